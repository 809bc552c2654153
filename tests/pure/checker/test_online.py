"""The checker that follows a run (leasecheck/checker/online.py) is the offline checker (``leasecheck check``), to the letter.

Issue 24: the online verdict of every run equals ``check_source`` of the same history (anomalies, stats, cited ops,
coverage, attribution), and what a probe told early is never taken back: it is printed at once, so it must be in the
final verdict whatever follows. Held over simulated correct histories, planted anomalies, mutated histories, the
example corpus, every order the merge can write events of equal time in, and a big real-shaped history; with
catalogue fault windows drawn in, so that coverage and attribution count something; probing every op, every few
ops and never; and with each node closed (judged, dropped) right after its last op, as a soak does.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from paths import EXAMPLES
from sim import PLANTERS, UNFENCED_PLANTERS, SimConfig, dump, parse, render, sim_configs, sim_randoms, simulate

from bench.gen import generate
from bench.plant import KINDS, plant
from leasecheck.checker import Verdict, check_source
from leasecheck.checker.online import PROVISIONAL_KINDS, STABLE_KINDS, OnlineChecker, Proven, follow
from leasecheck.histories import Header, HistoryReader, HistoryWriter, read_history
from leasecheck.histories.vocabulary import FAIL_REASONS, LINEARIZABILITY_KINDS, READ_STATUSES
from leasecheck.verdict.attribution import fault_victims
from leasecheck.verdict.run_verdict import fault_windows

CORPUS = sorted(n for n, e in json.loads((EXAMPLES / "expected.json").read_text()).items() if e["valid"] != "bad-input")
MS, INV, OK = 1_000_000, "invoke", "ok"
#: probe_every that never probes: every finding comes from the judging at the end
NEVER = 10**9
#: the tests drawn once per planted kind run fewer examples each (13 kinds)
PER_KIND = settings(max_examples=max(8, settings().max_examples // 4), deadline=None)
#: (fenced, kind) -> planter, as tests/pure/checker/test_properties.py plants them
PLANTS: dict[tuple[bool, str], Callable[..., tuple[list[str], int]]] = {
    **{(True, k): p for k, p in PLANTERS.items()}, **{(False, k): p for k, p in UNFENCED_PLANTERS.items()}}


def key(a: Any) -> tuple[str, str, tuple[int, ...], str]:
    return a.kind, a.node, tuple(a.ops), a.explanation


def say(text: str, stat: bool = False) -> None:
    """Hypothesis' note (or statistics event) when under Hypothesis; the helpers serve the plain tests too."""
    if currently_in_test_context():
        (event if stat else note)(text)


def offline(source: Any, **kw: Any) -> Verdict:
    """``leasecheck check`` as the run's judgement calls it: coverage and attribution from the catalogue's windows."""
    return check_source(source, windows=fault_windows, faults=fault_victims, **kw)


def assert_same(online: Verdict, off: Verdict) -> None:
    """Property 1: the verdict's JSON (anomalies with attribution, stats, warnings), coverage and cited ops."""
    assert online.to_json() == off.to_json()
    assert online.coverage is not None and off.coverage is not None
    assert online.coverage.to_json() == off.coverage.to_json()
    assert online.cited == off.cited


def assert_told_is_final(final: Verdict, proofs: list[Proven]) -> None:
    """Property 2: each finding told once; an early one is in the final verdict as told; together, exactly its anomalies."""
    told = [key(p.anomaly) for p in proofs if not p.provisional]
    listed = {key(a) for a in final.anomalies}
    assert len(told) == len(set(told)), f"a finding told twice: {told}"
    taken_back = [k for p, k in zip([p for p in proofs if not p.provisional], told, strict=True) if p.early and k not in listed]
    assert not taken_back, f"printed early, not in the final verdict: {taken_back}; final: {sorted(listed)}"
    assert all(p.anomaly.kind in STABLE_KINDS for p in proofs if p.early and not p.provisional)
    assert set(told) == listed, f"told {sorted(set(told))}, final {sorted(listed)}"
    # a provisional non-linearizable: the node has no linearization, and the verdict says so, by this kind or a proof kind
    for p in proofs:
        if p.provisional:
            assert p.anomaly.kind in PROVISIONAL_KINDS and p.early
            kinds = {a.kind for a in final.anomalies if a.node == p.anomaly.node}
            assert kinds & ({"non-linearizable"} | LINEARIZABILITY_KINDS), (p.anomaly, sorted(kinds))
    assert bool(proofs) == (final.valid is False)


def assert_online_is_offline(source: Any, *everies: int) -> list[Proven]:
    """Properties 1 and 2, probing every ``everies`` ops in turn (NEVER: judged at the end only); the first's proofs."""
    if isinstance(source, list):
        say(render(source))
    off = offline(source)
    say(f"offline: {json.dumps(off.to_json())}")
    told: list[list[Proven]] = []
    for probe_every in everies:
        verdict, proofs = follow(source, probe_every=probe_every, windows=fault_windows, faults=fault_victims)
        say(f"probe_every={probe_every}: told {[(key(p.anomaly), p.early) for p in proofs]}")
        assert_same(verdict, off)
        assert_told_is_final(verdict, proofs)
        told.append(proofs)
    say(f"early findings: {'yes' if any(p.early for p in told[0]) else 'no'}", stat=True)
    return told[0]


def assert_closing_is_offline(source: Any, every: int, losses_ahead: bool = False) -> tuple[Verdict, Verdict]:
    """Property 3 as the harness follows a soak: each node closed (judged, dropped) once it has had its last op and,
    as leasecheck.run.closing promises, that op completed a ttl and the clock uncertainty ago (every lease of it is
    over) with none in flight; probes in between, each held to what it can know (it cites ops read or in flight,
    proven by now); (online, offline)."""
    header, ops, _ = read_history(source)
    left = Counter(op.node for op in ops)  # the first pass: how many ops each node has
    quiet = (header.ttl_ms + header.clock_uncertainty_ms) * MS
    closable: dict[str, float] = {}  # node -> when the harness may close it
    reader = HistoryReader(source)
    checker = OnlineChecker(reader.header, reader.nemesis, windows=fault_windows, faults=fault_victims)
    checker.losses_ahead = losses_ahead
    proofs: list[Proven] = []
    seen: set[int] = set()
    now = 0
    for n, op in enumerate(reader.ops(open_ops=checker.in_flight), 1):
        checker.add(op)
        seen.add(op.index)
        now = max(now, op.invoke_time if op.complete_time is None else op.complete_time,
                  reader.nemesis[-1].time if reader.nemesis else 0)
        if n % every == 0:
            probed = checker.probe()
            for p in probed:
                assert set(p.anomaly.ops) <= seen | {inv.index for inv in checker.in_flight.values()}, key(p.anomaly)
                assert p.proof_ns <= max([now] + [inv.time for inv in checker.in_flight.values()])
            proofs += probed
        left[op.node] -= 1
        if not left[op.node] and op.complete_index is not None:  # not one of those open at the end: close_all's
            assert not any(inv.node == op.node for inv in checker.in_flight.values())
            closable[op.node] = max(o.complete_time or o.invoke_time for o in ops if o.node == op.node) + quiet
        for node, at in list(closable.items()):
            if at <= now:
                del closable[node]
                proofs += checker.close(node)
    say(f"nodes closed mid-way: {'yes' if checker.closed else 'no'}", stat=True)
    so_far = checker.coverage_so_far()  # what a run's deadline asks: the closed nodes' counts and the open ones'
    flying = bool(checker.in_flight)
    proofs += checker.close_all()
    verdict = checker.verdict_of(reader)  # with what the reading found: its counts, warnings, and whether it was cut
    off = offline(source)
    assert verdict.to_json() == off.to_json()
    assert verdict.cited == off.cited
    assert off.coverage is not None
    if flying:  # what an op still in flight may take back is not counted yet: a lower bound
        assert all(n <= off.coverage[s] for s, n in so_far.counts.items()), (so_far, off.coverage)
    else:
        assert so_far.to_json() == off.coverage.to_json()
    assert_told_is_final(verdict, proofs)
    return verdict, off


def power_cut_history(path: Path) -> Path:
    """Node a: claimed and committed at 0.1-0.3 s, judged at 2.1 s; the store's power cut at 3 s, back at 3.5 s
    (the events a power-loss fault writes); node b claimed after. The lease of a was acknowledged in the last unsynced
    interval before the cut, long after a was done: ``granted-before-power-loss`` 1 (as the run on record counted
    it offline, and its online checker did not: 52 against 55)."""
    with HistoryWriter(path, Header(1000, 10, {"target": "hand-written", "nemesis": ["power-loss"]}),
                       clock=lambda: 0) as w:
        w.invoke(0, "claim", "a", {"owner": "w0"}, at=100 * MS)
        w.complete(0, "ok", {"epoch": 1}, at=200 * MS)
        w.invoke(0, "commit", "a", {"epoch": 1, "result": "r"}, at=250 * MS)
        w.complete(0, "ok", at=300 * MS)
        w.invoke(2, "read", "c", {}, at=2000 * MS)  # a is judged when this read is in (done for over a ttl)
        w.complete(2, "ok", {"status": "READY"}, at=2100 * MS)
        w.nemesis("kill", {"fault": "power-loss", "victims": ["store"], "dropped": {"bytes": 8192, "files": 1, "entries": 0}},
                  at=3000 * MS)
        w.nemesis("start", {"fault": "power-loss", "victims": ["store"]}, at=3500 * MS)
        w.invoke(1, "claim", "b", {"owner": "w1"}, at=4000 * MS)
        w.complete(1, "ok", {"epoch": 1}, at=4100 * MS)
        w.invoke(1, "commit", "b", {"epoch": 1, "result": "r"}, at=4200 * MS)
        w.complete(1, "ok", at=4300 * MS)
    return path


def test_a_lease_granted_before_a_power_loss_counts_though_its_node_was_judged_long_before_the_cut(tmp_path: Path) -> None:
    """With a power loss ahead, a judged node's situations wait for the first loss after its last grant."""
    source = power_cut_history(tmp_path / "history.jsonl")
    off = offline(source)
    assert off.coverage is not None and off.coverage["granted-before-power-loss"] == 1
    online, _ = assert_closing_is_offline(source, every=1, losses_ahead=True)
    assert online.coverage is not None and online.coverage["granted-before-power-loss"] == 1
    with pytest.raises(AssertionError):  # a's situations counted when it was judged, before any loss: the run on record
        assert_closing_is_offline(source, every=1)


#: catalogue-shaped fault windows to draw into a history: (start f, heal f, value; "P" stands for a client process)
FAULTS: list[tuple[str, str, dict[str, Any]]] = [
    ("pause", "resume", {"fault": "pause-store", "victims": ["store"]}),
    ("kill", "start", {"fault": "kill-primary", "victims": ["store"]}),
    ("partition", "heal", {"fault": "partition-halves", "victims": ["store"]}),
    ("pause", "resume", {"fault": "pause", "victims": ["P"]}),
    ("clock-skew", "clock-reset", {"fault": "clock-bump", "victims": ["P"], "delta_ms": 500}),
]


def with_faults(draw: Callable[..., Any], lines: list[str]) -> list[str]:
    """``lines`` with 0-3 fault windows drawn in (some never healed), at the times of the events they land between."""
    header, events = parse(lines)
    procs = sorted({ev["process"] for ev in events if isinstance(ev["process"], int)}) or [0]
    for _ in range(draw(st.integers(0, 3), label="faults")):
        start_f, heal_f, value = draw(st.sampled_from(FAULTS), label="fault")
        value = {**value, "victims": [draw(st.sampled_from(procs), label="victim") if v == "P" else v for v in value["victims"]]}
        at = draw(st.integers(0, len(events)), label="start at")
        heal = draw(st.one_of(st.none(), st.integers(at, len(events))), label="heal at")
        for pos, f in ((heal, heal_f), (at, start_f)):  # the heal first: inserting it leaves the start's place
            if pos is not None:
                t = events[pos - 1]["time"] if pos else 0
                events.insert(pos, {"index": 0, "time": t, "process": "nemesis", "type": "info", "f": f, "value": value})
    return dump(header, events)


def _rename_after(events: list[dict[str, Any]], pos: int, process: int) -> None:
    """The process's events after ``pos`` go to a new process number (a restarted worker), keeping the history well-formed."""
    fresh = 1 + max(ev["process"] for ev in events if isinstance(ev["process"], int))
    for ev in events[pos + 1:]:
        if ev["process"] == process:
            ev["process"] = fresh


def mutate(events: list[dict[str, Any]], rng: random.Random, unfenced: bool) -> str:
    """One random change that keeps the history readable (an invalid or a valid one); says what it did."""
    done = [i for i, ev in enumerate(events) if ev["type"] != "invoke" and ev["process"] != "nemesis"]
    if not done:
        return "nothing"
    i = rng.choice(done)
    ev, f = events[i], events[i]["f"]
    what = rng.choice(["claim-epoch", "same-epoch", "carried-epoch", "drop", "to-info", "to-fail", "to-ok", "delay"])
    claims = [events[j] for j in done if events[j]["type"] == "ok" and type(events[j]["value"].get("epoch")) is int]
    carried = [e for e in events if e["type"] == "invoke" and type(e["value"].get("epoch")) is int]
    if what in ("claim-epoch", "same-epoch") and claims:  # an ok claim's (or read's) epoch: moved, or another's of its node
        v = (c := rng.choice(claims))["value"]
        v["epoch"] = (rng.choice([o for o in claims if o["node"] == c["node"]])["value"]["epoch"] if what == "same-epoch"
                      else max(0, v["epoch"] + rng.choice([-2, -1, 1, 2])))
    elif what == "carried-epoch" and carried:  # the epoch a renew, effect, commit or release carries
        v = rng.choice(carried)["value"]
        v["epoch"] = max(0, v["epoch"] + rng.choice([-2, -1, 1, 2]))
    elif what == "drop":  # the completion never written: the op stays open to the end
        del events[i]
        _rename_after(events, i - 1, ev["process"])
    elif what == "to-info":
        ev.update(type="info", value={"error": "mutated"})
        _rename_after(events, i, ev["process"])
    elif what == "to-fail":
        ev.update(type="fail", value={"reason": rng.choice(sorted(FAIL_REASONS))})
    elif what == "to-ok":  # the store said yes (a zombie's refused commit accepted, a claim granted some epoch, ...)
        e = rng.randint(0, 5)
        claim = {"epoch": None, "token": f"tok-m{e}"} if unfenced else {"epoch": e}
        read = {"status": rng.choice(sorted(READ_STATUSES)), "epoch": e, "owner": f"w{rng.randint(0, 4)}"}
        resource = {"fence": rng.choice([None, e]), "accepted": []}  # (a read of the resource that lost its log)
        ev.update(type="ok", value={"claim": claim, "read": read, "read-resource": resource}.get(f, {}))
    elif what == "delay":  # a slow completion: later in the file, before its process's next event
        nxt = next((j for j in range(i + 1, len(events)) if events[j]["process"] == ev["process"]), len(events))
        k = rng.randint(i, nxt - 1)
        events.insert(k, {**events.pop(i), "time": events[k - 1]["time"] if k > i else ev["time"]})
    return what


def merge_order(lines: list[str], rng: random.Random) -> tuple[list[str], int]:
    """An order the merge may write: each run of events of equal time interleaved anew, each process's own order kept;
    re-indexed (anomalies cite the new indices). Also how many events changed place."""
    header, events = parse(lines)
    out: list[dict[str, Any]] = []
    for _, run in itertools.groupby(events, key=lambda ev: ev["time"]):
        queues: dict[Any, deque[dict[str, Any]]] = {}
        for ev in run:
            queues.setdefault(ev["process"], deque()).append(ev)
        while queues:
            out.append(queues[p := rng.choice(sorted(queues, key=str))].popleft())
            if not queues[p]:
                del queues[p]
    return dump(header, out), sum(a is not b for a, b in zip(events, out))


def tiny(*rows: tuple[float, Any, str, str, str | None, Any], ttl_ms: int = 100) -> list[str]:
    """A hand-made history: (time ms, process, type, f, node, value) rows in file order."""
    header = {"format": "leasecheck-history", "version": 1, "ttl_ms": ttl_ms, "clock_uncertainty_ms": 0}
    return dump(header, [{"index": 0, "time": int(t * MS), "process": p, "type": ty, "f": f, **({"node": n} if n else {}),
                          "value": v} for t, p, ty, f, n, v in rows])


@st.composite
def histories(draw: Callable[..., Any], planted: bool | None = None, fenced: bool | None = None,
              effect_fence: Any = None, quantum: bool = False) -> list[str]:
    """A simulated history (a correct store's, or with a planted anomaly when ``planted``), fault windows drawn in."""
    cfg: SimConfig = draw(sim_configs(fenced=fenced, effect_fence=effect_fence), label="config")
    if quantum:  # a coarse recorder clock: many events share a time
        cfg = dataclasses.replace(cfg, time_quantum_ms=draw(st.sampled_from([1, cfg.ttl_ms / 10, cfg.ttl_ms / 4])))
    lines = simulate(draw(sim_randoms(), label="rng"), cfg)
    if planted if planted is not None else draw(st.booleans(), label="planted"):
        kind = draw(st.sampled_from(sorted(PLANTERS if cfg.fenced else UNFENCED_PLANTERS)), label="kind")
        lines, _ = PLANTS[cfg.fenced, kind](lines, draw(st.randoms(use_true_random=False), label="plant rng"))
    return with_faults(draw, lines)


@pytest.mark.parametrize(("fenced", "effect_fence"), [(True, "lease"), (True, "token"), (False, "lease")],
                         ids=["fenced-lease", "fenced-token", "unfenced"])
@given(data=st.data())
def test_following_a_correct_store_is_checking_it_and_tells_nothing(fenced: bool, effect_fence: str, data: st.DataObject) -> None:
    lines = data.draw(histories(planted=False, fenced=fenced, effect_fence=effect_fence))
    assert assert_online_is_offline(lines, 1, data.draw(st.integers(2, 40), label="probe_every"), NEVER) == []


@pytest.mark.parametrize(("fenced", "kind"), list(PLANTS), ids=[f"{'fenced' if f else 'unfenced'}-{k}" for f, k in PLANTS])
@PER_KIND
@given(data=st.data())
def test_following_a_planted_anomaly_tells_it_early_and_keeps_it(fenced: bool, kind: str, data: st.DataObject) -> None:
    """The planted op is the history's last: a probe right after it tells every stable kind early, and the verdict keeps it."""
    lines = data.draw(histories(planted=False, fenced=fenced))
    planted, v_index = PLANTS[fenced, kind](lines, data.draw(st.randoms(use_true_random=False), label="plant rng"))
    proofs = assert_online_is_offline(planted, 1, data.draw(st.integers(2, 40), label="probe_every"), NEVER)
    mine = [p for p in proofs if p.anomaly.kind == kind and (v_index in p.anomaly.ops or kind == "non-linearizable")]
    assert mine, f"planted {kind} at op {v_index} never told: {[key(p.anomaly) for p in proofs]}"
    _, ops, _ = read_history(planted)
    node = next(op.node for op in ops if op.index == v_index)
    if not any(op.node == node and op.complete_index is None for op in ops):  # (an op in flight may hold a finding back)
        if kind in PROVISIONAL_KINDS:  # told at once, provisionally; the verdict's own said at the close if it differs
            assert any(p.early and p.provisional for p in mine)
        else:
            assert all(p.early is (kind in STABLE_KINDS) for p in mine)


def _n0(*rows: tuple[float, int, str, str, Any]) -> list[str]:
    return tiny(*((t, p, ty, f, "n0", v) for t, p, ty, f, v in rows))


def _claim(t: float, p: int, epoch: Any = None, token: str | None = None) -> list[tuple[float, int, str, str, Any]]:
    ok = {"epoch": epoch, **({"token": token} if token else {})}
    return [(t, p, INV, "claim", {"owner": f"w{p}"}), (t + 1, p, OK, "claim", ok)]


#: the shrunk counterexamples of property 2: an op completed after a probe changes what the final verdict says of the
#: finding the probe told (other ops cited, another explanation, or no such finding at all)
REWORDED: dict[str, list[str]] = {
    # p1's renew (op 3), invoked before p2's claim completes, is in flight at the probe: told [0, 2]; ok: T moves, [0, 3, 2]
    "overlap-renew-in-flight": _n0(*_claim(0, 1, 1), (2, 2, INV, "claim", {"owner": "w2"}), (3, 1, INV, "renew", {"epoch": 1}),
                                   (4, 2, OK, "claim", {"epoch": 2}), (5, 1, OK, "renew", {})),
    # p2's claim (op 2) in flight when p3's completes: told [0, 3]; it completes with epoch 2, the previous holder: [2, 3]
    "overlap-claim-in-flight": _n0(*_claim(0, 1, 1), (2, 2, INV, "claim", {"owner": "w2"}), (3, 3, INV, "claim", {"owner": "w3"}),
                                   (4, 3, OK, "claim", {"epoch": 3}), (5, 2, OK, "claim", {"epoch": 2})),
    # claim 0 completes last, with the same epoch: told [1, 3]; the final verdict pairs the first invoked: [0, 1], [0, 3]
    "duplicate-epoch": _n0((0, 1, INV, "claim", {"owner": "w1"}), *_claim(1, 2, 1), *_claim(3, 3, 1),
                           (5, 1, OK, "claim", {"epoch": 1})),
    # likewise of commits: told [1, 3]; final [0, 1], [0, 3]
    "duplicate-commit": _n0((0, 1, INV, "commit", {"epoch": 1}), (1, 2, INV, "commit", {"epoch": 2}), (2, 2, OK, "commit", {}),
                            (3, 3, INV, "commit", {"epoch": 3}), (4, 3, OK, "commit", {}), (5, 1, OK, "commit", {})),
    # a claim of epoch 1 invoked after the read: told lost-commit [0, 2] without an owner; final: "owner 'w3'"
    "lost-commit-later-owner": _n0((0, 1, INV, "commit", {"epoch": 1, "result": "r"}), (1, 1, OK, "commit", {}),
                                   (2, 2, INV, "read", {}), (3, 2, OK, "read", {"status": "READY"}), *_claim(4, 3, 1)),
    # unfenced stale-commit by grant order told [0, 2, 4]; a later read naming epoch 1 makes the node fenced: gone
    # (a backend that mixes epochs and tokens on one node: the one case a probe's finding may be taken back, see
    # docs/online.md; held to it by the strict xfail below)
    "unfenced-turned-fenced": _n0(*_claim(0, 1, None, "a"), *_claim(200, 2, None, "b"),
                                  (300, 1, INV, "commit", {"token": "a", "epoch": None}), (301, 1, OK, "commit", {}),
                                  (400, 3, INV, "read", {}), (401, 3, OK, "read", {"status": "SUCCEEDED", "epoch": 1})),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(
    strict=True, reason="a node that turns fenced after unfenced ops is judged by the other rules at its close")) if c ==
    "unfenced-turned-fenced" else c for c in sorted(REWORDED)])
def test_an_early_finding_is_not_reworded_by_a_later_op(case: str) -> None:
    assert_online_is_offline(REWORDED[case], 1)


@given(data=st.data())
def test_closing_each_node_after_its_last_op_keeps_the_verdict(data: st.DataObject) -> None:
    """Anomalies with their attribution, stats, cited ops: as if every node had been judged at the end."""
    lines = data.draw(histories(quantum=data.draw(st.booleans(), label="coarse clock")))
    note(render(lines))
    assert_closing_is_offline(lines, data.draw(st.sampled_from([1, 3, NEVER]), label="probe_every"))


@given(data=st.data())
def test_closing_each_node_after_its_last_op_keeps_the_coverage(data: st.DataObject) -> None:
    """Coverage too: a fault window that starts or heals after a node was closed counts for its leases as offline."""
    lines = data.draw(histories(quantum=data.draw(st.booleans(), label="coarse clock")))
    note(render(lines))
    verdict, off = assert_closing_is_offline(lines, 1)
    assert verdict.coverage is not None and off.coverage is not None
    assert verdict.coverage.to_json() == off.coverage.to_json()


def lease_then(*nemesis: tuple[float, str, dict[str, Any]]) -> list[str]:
    """p1's lease on n0 (claimed over 0-1 ms, ttl 100 ms, never ended: n0 closable from 101 ms, closed when n1's read
    completes at 120 ms), n1 read again until 300 ms, nemesis between."""
    rows = [(0.0, 1, INV, "claim", "n0", {"owner": "w1"}), (1.0, 1, OK, "claim", "n0", {"epoch": 1}),
            (2.0, 2, INV, "read", "n1", {}), (120.0, 2, OK, "read", "n1", {"status": "READY"}),
            (121.0, 2, INV, "read", "n1", {}), *((t, "nemesis", "info", f, None, v) for t, f, v in nemesis),
            (300.0, 2, OK, "read", "n1", {"status": "READY"})]
    return tiny(*sorted(rows, key=lambda r: r[0]))


@pytest.mark.parametrize("nemesis", [
    [(150, "kill", {"fault": "kill-primary", "victims": ["store"]})],  # the lease was over before: no primary lost under it
    [(200, "clock-skew", {"fault": "clock-bump", "victims": [1], "delta_ms": 500})],  # nor held by a skewed worker
    [(0.5, "pause", {"fault": "pause-store", "victims": ["store"]}),
     (150, "resume", {"fault": "pause-store", "victims": ["store"]})],  # deadline 101 ms inside the fault, healed after the close
    [(0.5, "pause", {"fault": "pause-store", "victims": ["store"]}),
     (50, "resume", {"fault": "pause-store", "victims": ["store"]})],  # deadline after the heal
], ids=["primary-lost-after-close", "skew-after-close", "store-fault-healed-after-close", "store-fault-healed-before"])
def test_a_fault_after_a_node_was_closed_counts_as_offline(nemesis: list[tuple[float, str, dict[str, Any]]]) -> None:
    """The shrunk counterexamples of the coverage property, with the harness's rule: node n0 closed at 120 ms, once
    its lease was surely over, the fault's events read before or after."""
    lines = lease_then(*nemesis)
    verdict, off = assert_closing_is_offline(lines, 1)
    assert verdict.coverage is not None and off.coverage is not None
    assert verdict.coverage.to_json() == off.coverage.to_json()


@given(data=st.data())
def test_following_a_mutated_history_is_checking_it(data: st.DataObject) -> None:
    lines = data.draw(histories(planted=False))
    header, events = parse(lines)
    rng = data.draw(st.randoms(use_true_random=False), label="mutation rng")
    what = [mutate(events, rng, header.get("target") == "sim-unfenced") for _ in range(data.draw(st.integers(1, 3)))]
    note(f"mutations: {what}")
    mutated = dump(header, events)
    read_history(mutated)  # the mutator keeps the history well-formed
    proofs = assert_online_is_offline(mutated, 1, data.draw(st.integers(2, 40), label="probe_every"), NEVER)
    event(f"mutated history: {'invalid' if proofs else 'valid'}")


@pytest.mark.parametrize("name", CORPUS)
def test_following_an_example_is_checking_it(name: str) -> None:
    assert_online_is_offline(EXAMPLES / name, 1, 2, 3, NEVER)
    assert_closing_is_offline(EXAMPLES / name, 1)


@given(data=st.data())
def test_following_any_order_the_merge_writes_is_checking_that_order(data: st.DataObject) -> None:
    """Events of equal time (a coarse clock) interleaved anew; online and offline judge the same permuted file."""
    lines = data.draw(histories(quantum=True))
    permuted, moved = merge_order(lines, data.draw(st.randoms(use_true_random=False), label="merge rng"))
    event(f"events moved by the merge order: {'0' if not moved else '1-9' if moved < 10 else '10+'}")
    assert_online_is_offline(permuted, 1, data.draw(st.integers(2, 40), label="probe_every"), NEVER)


def test_merge_orders_do_reorder_ties() -> None:
    """The merge-order property is not vacuous: a coarse clock gives ties, and the interleaving moves events."""
    cfg = SimConfig(workers=4, nodes=2, ops=60, time_quantum_ms=10)
    assert sum(merge_order(simulate(random.Random(s), cfg), random.Random(s))[1] for s in range(5)) > 10


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("online") / "real.jsonl"
    generate(path, 8_000, 16, 20, 0.01, 24, shape="real", clock_uncertainty_ms=10)
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_following_a_big_real_shaped_history_is_checking_it_whole_and_split(real: Path, tmp_path: Path, kind: str) -> None:
    """Its nodes retire as their run ends (closed mid-way), and the split path (two partitions) gives the same verdict."""
    path = tmp_path / f"{kind}.jsonl"
    planted = plant(real, path, kind, seed=24)
    off = offline(path)
    assert any(a.kind == kind and a.node == planted.node and planted.op in a.ops for a in off.anomalies)
    assert_same(offline(path, partitions=2, jobs=1), off)
    assert_online_is_offline(path, 1, 97, NEVER)
    assert_closing_is_offline(path, 64)


def test_a_commit_in_flight_keeps_its_lease_from_counting_as_expired_during_a_store_fault(tmp_path: Path) -> None:
    """What a run's deadline reads is a lower bound: a's lease (granted at 0.2 s, ttl 1 s) has its commit in flight
    when the store's power is cut at 0.6 s; as the ops stand it would expire during the cut, but the commit, invoked
    before its deadline, may end it, so it is not counted while in flight. Refused at the restart (the store was
    unreachable), it ended nothing: then, and only then, the lease counts, online as offline."""
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, Header(1000, 10, {"target": "hand-written", "nemesis": ["power-loss"]}),
                       clock=lambda: 0) as w:
        w.invoke(0, "claim", "a", {"owner": "w0"}, at=100 * MS)
        w.complete(0, "ok", {"epoch": 1}, at=200 * MS)
        w.invoke(0, "commit", "a", {"epoch": 1, "result": "r"}, at=500 * MS)
        w.nemesis("kill", {"fault": "power-loss", "victims": ["store"], "dropped": {"bytes": 8192, "files": 1, "entries": 0}},
                  at=600 * MS)
        w.invoke(1, "claim", "a", {"owner": "w1"}, at=1500 * MS)
        w.complete(1, "fail", {"reason": "unavailable"}, at=1600 * MS)
        w.nemesis("start", {"fault": "power-loss", "victims": ["store"]}, at=3000 * MS)
        w.complete(0, "fail", {"reason": "unavailable"}, at=3000 * MS)
    reader = HistoryReader(path)
    checker = OnlineChecker(reader.header, reader.nemesis, windows=fault_windows, faults=fault_victims, losses_ahead=True)
    for op in reader.ops(open_ops=checker.in_flight):
        checker.add(op)
        if op.f == "claim" and op.type == "fail":  # the commit is in flight, the cut has begun, a's deadline passed
            assert [inv.f for inv in checker.in_flight.values()] == ["commit"]
            assert checker.coverage_so_far()["lease-expires-during-store-fault"] == 0
    off = offline(path)
    assert off.coverage is not None and off.coverage["lease-expires-during-store-fault"] == 1
    assert checker.finish().coverage == off.coverage
