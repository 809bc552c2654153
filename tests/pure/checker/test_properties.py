"""Property tests of the checker against a simulated correct store (tests/support/sim.py).

* no false positives: every history of the correct store is valid;
* every planted anomaly is found, under its kind, citing the planted op, and every
  cited witness really satisfies the docs/contracts/anomaly-kinds.md definition of its kind;
* the fast epoch-order construction and the WGL search agree, per node and on
  the whole verdict;
* counterexamples render readably.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st
from sim import (
    MS,
    PLANTERS,
    UNFENCED_PLANTERS,
    SimConfig,
    plant_zombie_effect_before_newer_effect,
    render,
    sim_histories,
    simulate,
)

from leasecheck.checker import check_source, linearizable
from leasecheck.histories import Header, Op, read_history
from leasecheck.histories.format import EffectFence

#: kinds that by themselves mean the node has no linearization under the lease model;
#: spelled out here on purpose (docs/contracts/anomaly-kinds.md read independently of the checker's table),
#: so that a wrong table in the checker fails these tests instead of agreeing with them
LINEARIZABILITY_KINDS = {
    "duplicate-epoch",
    "epoch-regression",
    "stale-renew",
    "stale-commit",
    "stale-effect",
    "duplicate-commit",
    "lost-commit",
    "non-linearizable",
}
#: search is only asked about nodes this small (its cost is exponential)
SEARCH_MAX_OPS = 45


# --------------------------------------------------------------------------------------
# an independent reading of docs/contracts/anomaly-kinds.md's definitions, for cited ops


def _before(a: Op, b: Op) -> bool:
    """docs/contracts/anomaly-kinds.md: A completed (ok or fail) at a time strictly less than B's invoke."""
    return a.type in ("ok", "fail") and a.complete_time is not None and a.complete_time < b.invoke_time


def _observed(op: Op) -> int | None:
    """The epoch an op observed: returned by an ok claim/read, carried by an ok renew/effect/commit/release."""
    if op.type != "ok":
        return None
    e = op.result.get("epoch") if op.f in ("claim", "read") else op.value.get("epoch")
    return e if type(e) is int else None


def _lease_id(op: Op) -> Any:
    """The lease an op names: its epoch, or its token on an unfenced backend."""
    e = op.epoch
    return ("epoch", e) if e is not None else ("token", op.token)


def verify_citation(anomaly: Any, header: Header, ops: list[Op]) -> None:
    """Assert that the ops an anomaly cites prove it, per docs/contracts/anomaly-kinds.md's definition."""
    by_index = {op.index: op for op in ops}
    kind, node = anomaly.kind, anomaly.node
    node_ops = [op for op in ops if op.node == node]
    if kind == "non-linearizable":
        assert node_ops, f"non-linearizable names node {node!r} without ops"
        return
    assert anomaly.ops, f"{kind} cites no ops"
    for i in anomaly.ops:
        assert i in by_index, f"{kind} cites {i}, which is not an op's invoke index"
    cited = [by_index[i] for i in anomaly.ops]
    for op in cited:
        assert op.node == node, f"{kind} on {node!r} cites op {op.index} of node {op.node!r}"
    v, witnesses = cited[-1], cited[:-1]
    ttl = header.ttl_ms * MS
    cu = header.clock_uncertainty_ms * MS

    if kind == "duplicate-epoch":
        assert len(cited) >= 2
        assert all(op.f == "claim" and op.type == "ok" for op in cited), "duplicate-epoch cites non-claims"
        assert len({op.epoch for op in cited}) == 1 and v.epoch is not None, "epochs differ"
    elif kind == "epoch-regression":
        assert v.f == "claim" and v.type == "ok" and type(v.epoch) is int
        assert any(_before(w, v) and (_observed(w) or 0) >= v.epoch for w in witnesses if _observed(w) is not None), (
            "no cited op before the claim observed an epoch >= its epoch"
        )
    elif kind in ("stale-renew", "stale-commit"):
        assert v.f == kind.removeprefix("stale-") and v.type == "ok"
        if v.epoch is None:
            _verify_unfenced_stale(v, witnesses, node_ops)
        else:
            assert any(_before(w, v) and _observed(w) is not None and _observed(w) > v.epoch for w in witnesses), (
                f"no cited op before {v.index} observed an epoch > {v.epoch}"
            )
    elif kind == "stale-effect":
        assert v.f == "effect" and v.type == "ok"
        if v.epoch is None:
            _verify_unfenced_stale(v, witnesses, node_ops)
        elif header.effect_fence == "lease":
            # docs/contracts/anomaly-kinds.md: exactly like stale-commit (a claim lifted the resource's fence)
            assert any(_before(w, v) and _observed(w) is not None and _observed(w) > v.epoch for w in witnesses), (
                f"no cited op before {v.index} observed an epoch > {v.epoch}"
            )
        else:
            assert header.effect_fence == "token", header.effect_fence
            assert any(
                w.f == "effect" and w.type == "ok" and _before(w, v) and type(w.epoch) is int and w.epoch > v.epoch
                for w in witnesses
            ), "no cited accepted effect with a larger epoch completed before"
    elif kind == "duplicate-commit":
        assert all(op.f == "commit" and op.type == "ok" for op in cited)
        assert len({_lease_id(op) for op in cited}) >= 2, "the cited commits carry one epoch"
    elif kind == "lost-commit":
        assert len(cited) == 2
        c, r = cited
        assert c.f == "commit" and c.type == "ok" and r.f == "read" and r.type == "ok"
        assert _before(c, r), "the read was not invoked after the commit completed"
        seen = r.result
        assert (
            seen.get("status") != "SUCCEEDED" or seen.get("epoch") != c.epoch or seen.get("result") != c.value.get("result")
        ), "the read shows the committed status, epoch and result"
    elif kind == "overlapping-lease":
        assert v.f == "claim" and v.type == "ok"
        h = cited[0]
        assert len(cited) in (2, 3) and h.f == "claim" and h.type == "ok"
        assert h.invoke_time < v.complete_time
        if type(v.epoch) is int:
            assert type(h.epoch) is int and h.epoch < v.epoch
            between = [
                op for op in node_ops
                if op.f == "claim" and op.type == "ok" and type(op.epoch) is int and h.epoch < op.epoch < v.epoch
                and op.invoke_time < v.complete_time
            ]
            assert not between, f"op {between[0].index} is a later holder than the cited {h.index}"
        lease = _lease_id(h)
        renews = [
            op for op in node_ops
            if op.f == "renew" and op.type == "ok" and _lease_id(op) == lease and op.invoke_time < v.complete_time
        ]
        t = max([h.invoke_time] + [op.invoke_time for op in renews])
        if t > h.invoke_time:
            assert len(cited) == 3, f"T was set by renew {max(renews, key=lambda r: r.invoke_time).index}, which is not cited"
        if len(cited) == 3:
            assert cited[1] in renews and cited[1].invoke_time == t, "the cited renew is not the one that set T"
        assert v.complete_time < t + ttl - cu, "the claim completed after T + ttl - uncertainty"
        releases = [
            op for op in node_ops
            if op.f == "release" and op.type in ("ok", "info") and _lease_id(op) == lease and op.invoke_time < v.complete_time
        ]
        assert not releases, f"op {releases[0].index} released the previous lease"
    elif kind == "stuck-lease":
        assert v.f == "claim" and v.type == "fail" and v.result.get("reason") == "held"
        for op in node_ops:
            if op.f in ("claim", "renew") and op.index != v.index and op.invoke_time < v.complete_time:
                assert op.type != "info", f"info {op.f} {op.index} may have taken effect: rules stuck-lease out"
                if op.type == "ok":
                    assert v.invoke_time - op.complete_time > ttl + cu, (
                        f"ok {op.f} {op.index} completed within ttl + uncertainty before the claim"
                    )
        for w in witnesses:
            assert w.f in ("claim", "renew") and w.type == "ok"
    elif kind == "premature-expiry":
        assert v.f in ("renew", "commit", "release") and v.type == "fail" and v.result.get("reason") == "expired"
        assert type(v.epoch) is int
        (g,) = witnesses
        grants = [
            op for op in node_ops
            if op.f in ("claim", "renew") and op.type == "ok" and op.epoch == v.epoch and op.complete_time < v.invoke_time
        ]
        assert g in grants, "the cited grant is no ok claim or renew of the epoch completed before the refused op"
        assert g.invoke_time == max(op.invoke_time for op in grants), "the cited grant is not the one that sets T"
        assert v.complete_time < g.invoke_time + ttl - cu, "the refusal completed after T + ttl - uncertainty"
        releases = [
            op for op in node_ops
            if op.f == "release" and op.type in ("ok", "info") and op.value.get("epoch") == v.epoch and op.invoke_time < v.complete_time
        ]
        assert not releases, f"op {releases[0].index} released the lease before the refusal"
    else:
        pytest.fail(f"unknown anomaly kind {kind!r}")


def _verify_unfenced_stale(v: Op, witnesses: list[Op], node_ops: list[Op]) -> None:
    """Grant order: a newer ok claim completed before the older holder's op was invoked."""
    mine = [op for op in node_ops if op.f == "claim" and op.type == "ok" and op.token == v.token]
    assert mine, f"no ok claim granted token {v.token!r}"
    assert any(
        w.f == "claim" and w.type == "ok" and w.token != v.token and _before(w, v)
        and all(_before(c, w) for c in mine)
        for w in witnesses
    ), "no cited newer claim (granted after the holder's, completed before the op)"


# --------------------------------------------------------------------------------------
# helpers


def _verdict(lines: list[str], **kw: Any) -> Any:
    v = check_source(lines, **kw)
    note(f"verdict{kw or ''}: {json.dumps(v.to_json(), indent=1)}")
    return v


def _node_ops(lines: list[str]) -> tuple[Header, dict[str, list[Op]], list[Op]]:
    header, ops, _ = read_history(lines)
    by_node: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_node[op.node].append(op)
    return header, by_node, ops


# --------------------------------------------------------------------------------------
# the simulation itself


@given(sim_histories())
def test_simulated_histories_are_well_formed(lines: list[str]) -> None:
    note(render(lines))
    header, ops, reader = read_history(lines)
    open_ops = sum(op.type == "info" and op.complete_index is None for op in ops)
    # the only warning a simulated run may earn: crashed ops that never completed
    assert all("never completed" in w for w in reader.warnings) and (open_ops > 0 or not reader.warnings), reader.warnings
    assert header.ttl_ms > 0


def test_simulation_exercises_the_interesting_cases() -> None:
    """Over a few seeds the store produces every outcome the checker must get right."""
    seen: set[tuple[str, str, Any]] = set()
    nemesis: set[str] = set()
    open_ops = 0
    for seed in range(40):
        rng = random.Random(seed)
        cfg = SimConfig(workers=3, nodes=2, ops=60, crash_p=0.1, pause_p=0.2, fenced=seed % 2 == 0)
        lines = simulate(rng, cfg)
        _, ops, reader = read_history(lines)
        nemesis |= {ev.f for ev in reader.nemesis}
        open_ops += sum(op.type == "info" and op.complete_index is None for op in ops)
        seen |= {(op.f, op.type, op.result.get("reason")) for op in ops}
    for want in [
        ("claim", "ok", None), ("claim", "fail", "held"), ("claim", "info", None), ("claim", "fail", "terminal"),
        ("renew", "ok", None), ("renew", "fail", "expired"), ("renew", "fail", "stale"),
        ("commit", "ok", None), ("commit", "fail", "stale"), ("commit", "fail", "expired"),
        ("effect", "ok", None), ("effect", "fail", "stale"), ("release", "ok", None), ("read", "ok", None),
    ]:
        assert want in seen, want
    assert {"pause", "resume", "kill"} <= nemesis
    assert open_ops > 0


def test_a_store_clock_at_the_fast_end_refuses_expired_between_the_bound_and_the_ttl() -> None:
    """The correct store's "expired" refusals reach the premature-expiry bound's margin: some complete after
    T + ttl - uncertainty but before T + ttl, so a checker that forgets the uncertainty reports correct runs."""
    near = 0
    for seed in range(100):
        rng = random.Random(seed)
        ttl = rng.choice([20, 50, 100, 1000])
        cfg = SimConfig(workers=3, nodes=1, ops=40, ttl_ms=ttl, clock_uncertainty_ms=ttl // 4, pause_p=0.5, commit_p=0.03,
                        store_clock="fast", crash_p=0.0)
        header, ops, _ = read_history(simulate(rng, cfg))
        ttl_ns, cu = header.ttl_ms * MS, header.clock_uncertainty_ms * MS
        for r in ops:
            if r.type == "fail" and r.f in ("renew", "commit", "release") and r.result.get("reason") == "expired":
                grants = [g.invoke_time for g in ops if g.f in ("claim", "renew") and g.type == "ok" and g.epoch == r.epoch
                          and g.complete_time < r.invoke_time]
                near += bool(grants) and max(grants) + ttl_ns - cu <= r.complete_time < max(grants) + ttl_ns
        if near >= 3:
            return
    pytest.fail(f"only {near} refusal(s) between T + ttl - uncertainty and T + ttl in 100 runs")


# --------------------------------------------------------------------------------------
# no false positives


@pytest.mark.parametrize(
    ("fenced", "effect_fence"),
    [(True, "lease"), (True, "token"), (False, "lease")],
    ids=["fenced-lease", "fenced-token", "unfenced"],
)
@given(data=st.data())
def test_correct_store_is_valid(fenced: bool, effect_fence: EffectFence, data: st.DataObject) -> None:
    """A correct store is never reported, whichever rule its resource follows (and says it follows)."""
    lines = data.draw(sim_histories(fenced=fenced, effect_fence=effect_fence))
    note(render(lines))
    verdict = _verdict(lines)
    _, ops, _ = read_history(lines)
    event(f"ops: {'<10' if len(ops) < 10 else '10-29' if len(ops) < 30 else '30+'}")
    event(f"crashed ops: {'yes' if any(op.type == 'info' for op in ops) else 'no'}")
    assert verdict.valid is True, [a.kind for a in verdict.anomalies]
    assert verdict.anomalies == []


# --------------------------------------------------------------------------------------
# planted anomalies are found, with proof


def _check_planted(kind: str, planted: list[str], v_index: int) -> None:
    note(render(planted))
    note(f"planted {kind} at op {v_index}")
    header, _, ops = _node_ops(planted)
    node = next(op.node for op in ops if op.index == v_index)
    verdict = _verdict(planted)
    assert verdict.valid is False
    if kind == "non-linearizable":
        hits = [a for a in verdict.anomalies if a.kind == kind and a.node == node]
    else:
        hits = [a for a in verdict.anomalies if a.kind == kind and a.node == node and v_index in a.ops]
    assert hits, f"no {kind} anomaly citing op {v_index}: {[(a.kind, a.ops) for a in verdict.anomalies]}"
    if kind != "non-linearizable":
        assert any(a.ops[-1] == v_index for a in hits), "the violating op must be cited last"
    # every anomaly the checker reports, planted or incidental, must be proven by its citation
    verify_verdict(verdict, header, ops)


def verify_verdict(verdict: Any, header: Header, ops: list[Op]) -> None:
    """Every anomaly proven by its citation; non-linearizable only where nothing else explains it."""
    for a in verdict.anomalies:
        verify_citation(a, header, ops)
    explained = {a.node for a in verdict.anomalies if a.kind in LINEARIZABILITY_KINDS - {"non-linearizable"}}
    both = {a.node for a in verdict.anomalies if a.kind == "non-linearizable"} & explained
    assert not both, f"non-linearizable reported beside a kind that already explains it, on {sorted(both)}"


#: every planting function, fenced and unfenced: (fenced, kind) -> planter
PLANTS: dict[tuple[bool, str], Callable[..., tuple[list[str], int]]] = {
    **{(True, kind): plant for kind, plant in PLANTERS.items()},
    **{(False, kind): plant for kind, plant in UNFENCED_PLANTERS.items()},
}


@pytest.mark.parametrize(("fenced", "kind"), list(PLANTS), ids=[f"{'fenced' if f else 'unfenced'}-{k}" for f, k in PLANTS])
@given(data=st.data())
def test_planted_anomaly_is_detected(fenced: bool, kind: str, data: st.DataObject) -> None:
    lines = data.draw(sim_histories(fenced=fenced))
    rng = data.draw(st.randoms(use_true_random=False))
    planted, v_index = PLANTS[fenced, kind](lines, rng)
    _check_planted(kind, planted, v_index)


@pytest.mark.parametrize("effect_fence", ["lease", "token"])
@given(data=st.data())
def test_planted_stale_effect_is_found_under_each_rule(effect_fence: EffectFence, data: st.DataObject) -> None:
    """The stale-effect planter, pinned to each rule: found, citing the planted effect last."""
    lines = data.draw(sim_histories(fenced=True, effect_fence=effect_fence))
    planted, v_index = PLANTERS["stale-effect"](lines, data.draw(st.randoms(use_true_random=False)))
    _check_planted("stale-effect", planted, v_index)


@pytest.mark.parametrize("effect_fence", ["lease", "token"])
@given(data=st.data())
def test_zombie_effect_before_the_newer_effect_is_judged_by_the_rule(effect_fence: EffectFence, data: st.DataObject) -> None:
    """Where the two rules part: a zombie's effect after the newer claim, before any newer effect.

    ``"lease"``: stale-effect citing [that claim, the effect], and nothing else is
    wrong with the node. ``"token"``: valid (a near miss). Fast path and search agree.
    """
    lines = data.draw(sim_histories(fenced=True, effect_fence=effect_fence))
    planted, v_index = plant_zombie_effect_before_newer_effect(lines, data.draw(st.randoms(use_true_random=False)))
    note(render(planted))
    header, by_node, ops = _node_ops(planted)
    node = next(op.node for op in ops if op.index == v_index)
    verdict = _verdict(planted)
    if effect_fence == "token":
        assert verdict.valid is True, [(a.kind, a.ops) for a in verdict.anomalies]
    else:
        claim = max((op for op in by_node[node] if op.f == "claim" and op.type == "ok"), key=lambda o: o.index)
        assert [(a.kind, a.node, a.ops) for a in verdict.anomalies] == [("stale-effect", node, [claim.index, v_index])]
        verify_verdict(verdict, header, ops)
    nops = by_node[node]
    fast = linearizable(header, nops, engine="fast")
    assert fast is (effect_fence == "token")
    if len(nops) <= SEARCH_MAX_OPS:
        slow = linearizable(header, nops, engine="search", budget=10)
        assert slow is None or slow == fast, f"fast says {fast}, search says {slow}"


# --------------------------------------------------------------------------------------
# fast construction == search


_PLANTS: list[tuple[bool, str] | None] = [None, *PLANTS, (True, "zombie-effect")]


def _plant(plant: tuple[bool, str], lines: list[str], rng: Any) -> tuple[list[str], int]:
    if plant == (True, "zombie-effect"):
        return plant_zombie_effect_before_newer_effect(lines, rng)
    return PLANTS[plant](lines, rng)


@given(data=st.data())
def test_fast_and_search_agree(data: st.DataObject) -> None:
    """Per node and on the whole verdict, under either effect rule (sim_histories draws it)."""
    plant = data.draw(st.sampled_from(_PLANTS), label="plant")
    fenced = data.draw(st.booleans(), label="fenced") if plant is None else plant[0]
    lines = data.draw(sim_histories(fenced=fenced, max_ops=30), label="history")
    planted_node = None
    if plant is not None:
        lines, v_index = _plant(plant, lines, data.draw(st.randoms(use_true_random=False), label="plant rng"))
    note(render(lines))
    header, by_node, ops = _node_ops(lines)
    if plant is not None:
        planted_node = next(op.node for op in ops if op.index == v_index)
    for node, nops in sorted(by_node.items()):
        fast = linearizable(header, nops, engine="fast")
        if plant is None:
            assert fast is True, f"fast construction finds no linearization of node {node} of a correct store"
        elif node == planted_node and plant == (True, "zombie-effect"):
            assert fast is (header.effect_fence == "token"), f"zombie effect under {header.effect_fence!r}: fast says {fast}"
        elif node == planted_node and plant[0]:
            expect = plant[1] not in LINEARIZABILITY_KINDS
            assert fast is expect, f"planted {plant[1]}: fast says linearizable={fast} for {node}"
        if len(nops) > SEARCH_MAX_OPS:
            continue
        slow = linearizable(header, nops, engine="search", budget=10)
        event(f"search: {'gave up' if slow is None else 'decided'}")
        if slow is None:
            continue
        assert fast == slow, f"node {node}: fast says {fast}, search says {slow}"
    v_fast = _verdict(lines)
    v_search = _verdict(lines, engine="search", budget=10)
    if v_search.valid != "unknown":
        assert v_fast.valid == v_search.valid
        assert {(a.kind, a.node) for a in v_fast.anomalies} == {(a.kind, a.node) for a in v_search.anomalies}


# --------------------------------------------------------------------------------------
# readable counterexamples


_SMALL = [
    '{"format":"leasecheck-history","version":1,"ttl_ms":100,"clock_uncertainty_ms":0,"target":"sim-fenced"}\n',
    '{"index":0,"time":1000000,"process":1,"type":"invoke","f":"claim","node":"n0","value":{"owner":"w1"}}\n',
    '{"index":1,"time":2500000,"process":1,"type":"ok","f":"claim","node":"n0","value":{"epoch":1}}\n',
    '{"index":2,"time":3000000,"process":2,"type":"invoke","f":"claim","node":"n0","value":{"owner":"w2"}}\n',
    '{"index":3,"time":4000000,"process":"nemesis","type":"info","f":"pause","value":[1]}\n',
    '{"index":4,"time":4500000,"process":2,"type":"fail","f":"claim","node":"n0","value":{"reason":"held"}}\n',
    '{"index":5,"time":150000000,"process":1,"type":"invoke","f":"commit","node":"n0","value":{"epoch":1,"result":"r1"}}\n',
    '{"index":6,"time":151000000,"process":1,"type":"fail","f":"commit","node":"n0","value":{"reason":"expired"}}\n',
    '{"index":7,"time":152000000,"process":3,"type":"invoke","f":"read","node":"n0","value":{}}\n',
    '{"index":8,"time":153000000,"process":3,"type":"ok","f":"read","node":"n0","value":{"status":"RUNNING","epoch":1,"owner":"w1"}}\n',
    '{"index":9,"time":160000000,"process":4,"type":"invoke","f":"renew","node":"n0","value":{"epoch":1}}\n',
    '{"index":10,"time":161000000,"process":4,"type":"info","f":"renew","node":"n0","value":{}}\n',
    '{"index":11,"time":162000000,"process":5,"type":"invoke","f":"effect","node":"n0","value":{"epoch":1,"payload":"x"}}\n',
]


def test_render_small_history() -> None:
    assert render(_SMALL) == "\n".join(
        [
            "history ttl=100ms uncertainty=0ms target=sim-fenced",
            "#0   p1   claim   n0 owner=w1 -> ok epoch=1 [1.000, 2.500]",
            "#2   p2   claim   n0 owner=w2 -> fail held [3.000, 4.500]",
            "#3   ~ nemesis pause [1] @4.000",
            "#5   p1   commit  n0 epoch=1 result=r1 -> fail expired [150.000, 151.000]",
            "#7   p3   read    n0 {} -> ok status=RUNNING epoch=1 owner=w1 [152.000, 153.000]",
            "#9   p4   renew   n0 epoch=1 -> info [160.000, 161.000]",
            "#11  p5   effect  n0 epoch=1 payload=x -> (no completion) [162.000, -]",
        ]
    )
    read_history(_SMALL)  # and it is a valid v1 history


def test_render_shows_planted_op() -> None:
    lines = simulate(random.Random(1), SimConfig(ops=5, workers=1, nodes=1, crash_p=0, pause_p=0))
    planted, v = PLANTERS["stale-commit"](lines, random.Random(0))
    text = render(planted)
    assert len(text.splitlines()) == 1 + sum(1 for ln in planted[1:] if '"invoke"' in ln or '"nemesis"' in ln)
    line = next(ln for ln in text.splitlines() if ln.startswith(f"#{v} "))
    assert " commit " in line and "result=zombie-result -> ok" in line
