"""Reads of the protected resource (``read-resource``, issue 25): the format, the four resource rules, and the
simulated correct store read back.

* the reader rejects a malformed read with one line naming the file and the line;
* the simulated correct store, read back mid-run and at the end (fence and log in one step), is valid, under
  every effect rule, fenced and unfenced, whichever engine decides (tests/pure/checker/test_properties.py holds the rest of it);
* every planted resource anomaly (``RESOURCE_PLANTERS``) is found under its kind, citing exactly the planted ops,
  and every resource finding is proven by its citation, read independently of the checker;
* the fast path proves nothing a reference run would report, the search never trips on a read, and the checker
  that follows a run tells a resource finding once, finally, and as the offline checker does.
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from sim import RESOURCE_PLANTERS, SimConfig, dump, parse, render, sim_histories, simulate

from leasecheck.checker import check_source, linearizable
from leasecheck.checker.online import STABLE_KINDS, Proven, follow
from leasecheck.histories import HistoryError, Op, read_history

#: the resource kinds (docs/contracts/anomaly-kinds.md), spelled out here on purpose
RESOURCE_KINDS = {"stale-effect", "fence-regression", "phantom-effect", "lost-effect"}
#: few examples: each draws a whole simulated run (the neighbours' settings)
FEW = settings(max_examples=max(10, settings().max_examples // 4), deadline=None)

HEADER = {"format": "leasecheck-history", "version": 1, "ttl_ms": 100, "clock_uncertainty_ms": 0}
#: probe_every that never probes
NEVER = 10**9


def key(a: Any) -> tuple[str, str, tuple[int, ...], str]:
    return a.kind, a.node, tuple(a.ops), a.explanation


def assert_online_is_offline(lines: list[str], *everies: int) -> list[Proven]:
    """tests/pure/checker/test_online.py's two properties, in short: the online verdict is the offline one, and what a probe told
    is told once and stays in the verdict (the first probe rate's findings)."""
    off = check_source(lines)
    first: list[Proven] | None = None
    for every in everies:
        verdict, proofs = follow(lines, probe_every=every)
        assert verdict.to_json() == off.to_json()
        told = [key(p.anomaly) for p in proofs if not p.provisional]
        assert len(told) == len(set(told)), told
        assert set(told) == {key(a) for a in off.anomalies}
        assert all(p.anomaly.kind in STABLE_KINDS for p in proofs if p.early and not p.provisional)
        first = proofs if first is None else first
    assert first is not None
    return first


def _history(value: Any) -> list[str]:
    events = [
        {"time": 0, "process": 1, "type": "invoke", "f": "read-resource", "node": "n0", "value": {}},
        {"time": 1, "process": 1, "type": "ok", "f": "read-resource", "node": "n0", "value": value},
    ]
    return dump(HEADER, events)


# ------------------------------------------------------------------------------------------------ format


@pytest.mark.parametrize(("value", "words"), [
    ({"fence": 1}, 'lacks "accepted"'),
    ({"fence": 1, "accepted": {}}, '"accepted" must be a list'),
    ({"fence": "7", "accepted": []}, '"fence" must be an integer or null'),
    ({"accepted": [3]}, "accepted[0] must be an object"),
    ({"accepted": [{"payload": "p"}]}, 'accepted[0] lacks "epoch"'),
    ({"accepted": [{"epoch": 1.5, "payload": "p"}]}, 'accepted[0] "epoch" must be an integer or null'),
    ({"accepted": [{"epoch": 1, "payload": "p"}, {"epoch": 2}]}, 'accepted[1] "payload" must be a string'),
    ([], "read-resource ok value must be an object"),
])
def test_a_malformed_resource_read_is_rejected_naming_its_line(value: Any, words: str) -> None:
    with pytest.raises(HistoryError) as info:
        read_history(_history(value), name="h.jsonl")
    assert str(info.value).startswith("h.jsonl:3: "), str(info.value)
    assert words in str(info.value)


def test_a_resource_read_names_no_epoch_and_a_failed_one_proves_nothing() -> None:
    _, ops, _ = read_history(_history({"fence": 4, "accepted": [{"epoch": 4, "payload": "ghost"}]}))
    assert ops[0].epoch is None and ops[0].f == "read-resource"
    failed = dump(HEADER, [
        {"time": 0, "process": 1, "type": "invoke", "f": "read-resource", "node": "n0", "value": {}},
        {"time": 1, "process": 1, "type": "fail", "f": "read-resource", "node": "n0", "value": {"reason": "unavailable"}},
        {"time": 2, "process": 2, "type": "invoke", "f": "read-resource", "node": "n0", "value": {}},
        {"time": 3, "process": 2, "type": "info", "f": "read-resource", "node": "n0", "value": {}},
    ])
    assert check_source(failed).valid is True
    # the ghost is an anomaly: no effect op wrote it
    assert [a.kind for a in check_source(_history({"fence": 4, "accepted": [{"epoch": 4, "payload": "g"}]})).anomalies] == [
        "phantom-effect"]


# ------------------------------------------------------------------------------------------------ correct store


def test_the_simulated_store_reads_its_resource_back() -> None:
    """Not vacuous: mid-run and final reads, with non-empty logs, fences, tokens when unfenced, and some that fail."""
    seen: dict[str, int] = {"mid-run": 0, "logged": 0, "fenced": 0, "tokens": 0, "not-ok": 0}
    for seed in range(20):
        lines = simulate(random.Random(seed), SimConfig(ops=60, workers=3, nodes=2, fenced=seed % 2 == 0, crash_p=0.1))
        _, ops, _ = read_history(lines)
        last = max(op.invoke_time for op in ops if op.f != "read-resource")
        for op in ops:
            if op.f != "read-resource":
                continue
            seen["not-ok"] += op.type != "ok"
            if op.type != "ok":
                continue
            seen["mid-run"] += op.invoke_time < last
            seen["logged"] += bool(op.result["accepted"])
            seen["fenced"] += type(op.result["fence"]) is int and op.result["fence"] > 0
            seen["tokens"] += any(e.get("token") for e in op.result["accepted"])
    assert all(seen.values()), seen


@pytest.mark.parametrize(("fenced", "effect_fence"), [(True, "lease"), (True, "token"), (False, "lease")],
                         ids=["fenced-lease", "fenced-token", "unfenced"])
@FEW
@given(data=st.data())
def test_a_correct_store_read_back_is_valid_whichever_engine(fenced: bool, effect_fence: Any, data: st.DataObject) -> None:
    lines = data.draw(sim_histories(fenced=fenced, effect_fence=effect_fence))
    note(render(lines))
    for engine in ("auto", "reference", "search"):
        v = check_source(lines, engine=engine, budget=10)
        assert v.valid in (True, "unknown") if engine == "search" else v.valid is True, (engine, v.to_json())
    header, ops, _ = read_history(lines)
    for node in {op.node for op in ops}:
        nops = [op for op in ops if op.node == node]
        assert linearizable(header, nops, engine="fast") is True
        if len(nops) <= 40:
            assert linearizable(header, nops, engine="search", budget=5) in (True, None)


# ------------------------------------------------------------------------------------------------ planted


def verify_resource_citation(kind: str, cited: list[Op], ops: list[Op], effect_fence: str) -> None:
    """The cited ops prove the finding, per docs/contracts/anomaly-kinds.md, read apart from the checker."""
    reads = [op for op in cited if op.f == "read-resource"]
    assert reads and all(r.type == "ok" for r in reads), f"{kind} cites no ok read of the resource"

    def before(a: Op, b: Op) -> bool:
        return a.complete_time is not None and a.complete_time < b.invoke_time

    def entries(r: Op) -> list[tuple[Any, str]]:
        return [(e["epoch"], e["payload"]) for e in r.result["accepted"]]

    if kind == "stale-effect":
        if len(reads) == 1:  # 1a: an older epoch logged after a newer one
            es = [e for e, _ in entries(reads[0]) if type(e) is int]
            assert any(es[j] < max(es[:j]) for j in range(1, len(es))), "the log never goes back in epoch"
        else:  # 1b
            r1, r2 = sorted(reads, key=lambda r: r.index)
            assert before(r1, r2)
            new = [(e, p) for e, p in entries(r2) if type(e) is int and p not in {q for _, q in entries(r1)}]
            claims = [c for c in cited if c.f == "claim" and c.type == "ok" and before(c, r1)]
            above = [r1.result.get("fence") or 0] + [e for e, _ in entries(r1) if type(e) is int]
            above += [c.epoch for c in claims] if effect_fence == "lease" else []
            assert any(e < max(above) for e, _ in new), "no entry new to the later read is below what the earlier proved"
    elif kind == "fence-regression":
        r = max(reads, key=lambda r: r.index)
        f = r.result["fence"]
        assert type(f) is int
        others = [o for o in cited if o is not r]
        floor = [e for e, _ in entries(r) if type(e) is int]
        for o in others:
            assert before(o, r)
            if o.f == "claim":
                assert effect_fence == "lease"
                floor.append(o.epoch)
            else:
                floor += [o.result.get("fence") or 0] + [e for e, _ in entries(o) if type(e) is int]
        assert f < max(floor), "the fence is not below what the citation proves"
    elif kind == "phantom-effect":
        (r,) = reads
        listed = [p for _, p in entries(r)]
        writers = {op.value.get("payload") for op in ops if op.f == "effect" and op.node == r.node and op.type != "fail"
                   and op.invoke_time <= r.complete_time}
        assert any(p not in writers for p in listed) or len(listed) != len(set(listed)) or any(
            op.f == "effect" for op in cited), "every entry has a writer"
    elif kind == "lost-effect":
        r = max(reads, key=lambda r: r.index)
        listed = {p for _, p in entries(r)}
        acked = [op for op in cited if op.f == "effect" and op.type == "ok" and before(op, r)]
        prior = [o for o in reads if o is not r and before(o, r)]
        assert any(op.value["payload"] not in listed for op in acked) or any(
            p not in listed for o in prior for _, p in entries(o)), "nothing cited is missing from the read"
    else:
        pytest.fail(f"not a resource kind: {kind}")


@pytest.mark.parametrize("name", sorted(RESOURCE_PLANTERS))
@FEW
@given(data=st.data())
def test_a_planted_resource_anomaly_is_found_citing_the_planted_ops(name: str, data: st.DataObject) -> None:
    kind, planter = RESOURCE_PLANTERS[name]
    lines = data.draw(sim_histories())
    planted, want = planter(lines, data.draw(st.randoms(use_true_random=False)))
    note(render(planted))
    header, ops, _ = read_history(planted)
    by_index = {op.index: op for op in ops}
    node = by_index[want[0]].node
    for engine in ("auto", "reference"):
        v = check_source(planted, engine=engine)
        note(json.dumps(v.to_json()["anomalies"]))
        assert (kind, node, want) in [(a.kind, a.node, a.ops) for a in v.anomalies], engine
        mine = [a for a in v.anomalies if a.node == node]
        assert {a.kind for a in mine} <= RESOURCE_KINDS | {"stale-effect"}, "a resource kind is proof: no non-linearizable"
        for a in v.anomalies:
            if a.kind in RESOURCE_KINDS and any(by_index[i].f == "read-resource" for i in a.ops):
                verify_resource_citation(a.kind, [by_index[i] for i in a.ops], ops, header.effect_fence)
                assert "real-time" in a.explanation or "snapshot" in a.explanation or "concurrent" in a.explanation


@pytest.mark.parametrize("name", sorted(RESOURCE_PLANTERS))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_following_a_planted_resource_anomaly_is_checking_it(name: str, data: st.DataObject) -> None:
    """The online checker tells it once, as the verdict says it, early once the history has moved past the read."""
    kind, planter = RESOURCE_PLANTERS[name]
    cfg = dataclasses.replace(data.draw(st.builds(SimConfig, ops=st.integers(1, 30))), time_quantum_ms=0)
    planted, want = planter(simulate(data.draw(st.randoms(use_true_random=False)), cfg), random.Random(0))
    header, events = parse(planted)
    node = next(ev["node"] for ev in events if ev.get("index") == want[0])
    last = events[-1]["time"]
    # a later op of another node moves the history past the read
    events += [{"time": last + 1, "process": 10**6, "type": "invoke", "f": "read", "node": "elsewhere", "value": {}},
               {"time": last + 2, "process": 10**6, "type": "ok", "f": "read", "node": "elsewhere", "value": {"status": "READY"}}]
    lines = dump(header, events)
    proofs = assert_online_is_offline(lines, 1, NEVER)
    hits = [p for p in proofs if (p.anomaly.kind, p.anomaly.node, p.anomaly.ops) == (kind, node, want)]
    assert hits, [key(p.anomaly) for p in proofs]
    _, ops, _ = read_history(lines)
    if not any(op.node == node and op.complete_index is None for op in ops):
        assert all(p.early for p in hits)


def test_a_probe_holds_a_finding_back_until_the_history_moved_past_the_read() -> None:
    """An effect invoked at the very time a read completed may be in it (equal times are concurrent), and may be
    written after the read's completion: the probe right after the read must not call its entry a phantom."""
    events = [
        {"time": 0, "process": 1, "type": "invoke", "f": "read-resource", "node": "n0", "value": {}},
        {"time": 5, "process": 1, "type": "ok", "f": "read-resource", "node": "n0",
         "value": {"fence": None, "accepted": [{"epoch": None, "payload": "late"}]}},
        {"time": 5, "process": 2, "type": "invoke", "f": "effect", "node": "n0", "value": {"epoch": None, "payload": "late"}},
        {"time": 6, "process": 2, "type": "ok", "f": "effect", "node": "n0", "value": {}},
    ]
    lines = dump(HEADER, events)
    assert check_source(lines).valid is True
    verdict, proofs = follow(lines, probe_every=1)
    assert verdict.valid is True and proofs == []
