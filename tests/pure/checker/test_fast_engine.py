"""The checker's fast path (``engine="auto"``) against its reference (``engine="reference"``).

``auto`` skips the table of checks on nodes that one pass proves clean
(:mod:`leasecheck.checker.clean`); it must never change a verdict. These tests
hold the two engines to the same verdict, to the letter (validity, every
anomaly with its kind, node, cited ops and explanation, the stats, the unknown
nodes, the cited ops), on:

* the property tests' simulated histories (fenced and unfenced, either effect
  rule, either lease expiry), valid and with every kind planted;
* ``bench.gen`` histories (the benchmarks' real and hot-node shapes), valid and
  with every kind planted;
* mutants of those: epochs, times, outcomes, statuses, owners and results
  changed, ops dropped, duplicated, moved or reordered, which push ordinary
  nodes over every edge the one pass claims to know;
* the hand-written example corpus.

Coverage's two ways of counting are held to each other on the same histories:
small nodes' direct loops against the indexed sweeps big nodes take, with and
without fault windows.

And the fast path must actually be taken: on a real-shaped history it proves
almost every node clean.
"""

from __future__ import annotations

import json
import random
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from paths import EXAMPLES
from sim import PLANTERS, UNFENCED_PLANTERS, plant_zombie_effect_before_newer_effect, render, sim_histories

from bench.gen import generate
from leasecheck.checker import Verdict, check
from leasecheck.checker.clean import Rules, clean_counts
from leasecheck.checker.coverage import node_coverage
from leasecheck.checker.windows import Skew, Window
from leasecheck.histories import Header, Op, read_history
from leasecheck.histories.format import make_op

BUDGET = 10.0


def _both(header: Header, ops: list[Op]) -> tuple[Verdict, Verdict]:
    return check(header, ops, budget=BUDGET, engine="auto"), check(header, ops, budget=BUDGET, engine="reference")


def _windows(ops: list[Op]) -> tuple[list[Window], list[Window]]:
    """Store-side and worker-clock fault windows over a history's span (one never healed), so every situation can count."""
    if not ops:
        return [], []
    end = max(op.complete_time or op.invoke_time for op in ops)
    victims = frozenset(op.process for op in ops if op.process % 2 == 0)
    others = frozenset(op.process for op in ops if op.process % 2)
    behind = Skew(-end / 1e6)  # a step behind by the whole history: every claim inside it reads before every grant
    strobe = Skew(-end / 2e6, period_ms=max(end / 40e6, 1e-3), duration_s=end / 2e9)  # behind half the time, for a while
    return [Window(end // 3, end // 2), Window(3 * end // 4)], [
        Window(end // 4, 2 * end // 3, victims, skew=behind), Window(end // 5, None, others, skew=strobe)]


def assert_same_coverage(header: Header, ops: list[Op]) -> None:
    """Coverage counted by the small nodes' direct loops is the indexed sweeps', with and without fault windows."""
    by_node: dict[str, list[Op]] = {}
    for op in ops:
        by_node.setdefault(op.node, []).append(op)
    for store, skewed in [([], []), _windows(ops)]:
        sweep = node_coverage(header, by_node.values(), store, skewed, small_ops=0).to_json()
        loops = node_coverage(header, by_node.values(), store, skewed, small_ops=1 << 30).to_json()
        assert loops == sweep, f"direct loops: {loops}\nsweeps: {sweep}"
        assert node_coverage(header, by_node.values(), store, skewed).to_json() == sweep


def assert_same_verdict(header: Header, ops: list[Op]) -> Verdict:
    """The fast path's verdict is the reference's, to the letter (unless a search ran out of budget); coverage too."""
    assert_same_coverage(header, ops)
    fast, ref = _both(header, ops)
    if fast.unknown_nodes or ref.unknown_nodes:
        return ref  # a search out of time: which one gave up depends on the clock, not the engine
    assert fast.to_json() == ref.to_json(), f"fast: {fast.to_json()}\nreference: {ref.to_json()}"
    assert fast.cited.keys() == ref.cited.keys()
    return ref


def _with_header(lines: list[str], **fields: Any) -> list[str]:
    head = json.loads(lines[0])
    head.update(fields)
    return [json.dumps(head) + "\n", *lines[1:]]


# --------------------------------------------------------------------------------------
# the property tests' simulated histories


_PLANTS = [
    *((True, k) for k in PLANTERS),
    *((False, k) for k in UNFENCED_PLANTERS),
    (True, "zombie-effect"),
]


@given(data=st.data())
def test_same_verdict_on_simulated_histories(data: st.DataObject) -> None:
    """Valid or with one planted anomaly, under either effect rule and either lease expiry."""
    plant = data.draw(st.sampled_from([None, None, *_PLANTS]), label="plant")
    fenced = data.draw(st.booleans(), label="fenced") if plant is None else plant[0]
    lines = data.draw(sim_histories(fenced=fenced), label="history")
    if plant is not None:
        rng = data.draw(st.randoms(use_true_random=False), label="plant rng")
        if plant[1] == "zombie-effect":
            lines, _ = plant_zombie_effect_before_newer_effect(lines, rng)
        else:
            lines, _ = (PLANTERS if plant[0] else UNFENCED_PLANTERS)[plant[1]](lines, rng)
    if data.draw(st.booleans(), label="lease_expiry holder"):
        lines = _with_header(lines, lease_expiry="holder")
    note(render(lines))
    header, ops, _ = read_history(lines)
    assert_same_verdict(header, ops)


# --------------------------------------------------------------------------------------
# bench.gen histories: real-shaped (many small nodes) and hot-node (few big ones)


@cache
def _gen_lines(ops: int, nodes: int, crash_rate: float, seed: int, commit_rate: float = 0.8) -> tuple[str, ...]:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "h.jsonl"
        generate(path, ops, 16, nodes, crash_rate, seed, commit_rate=commit_rate)
        return tuple(path.read_text().splitlines(keepends=True))


_SHAPES = [
    pytest.param(3000, 200, 0.01, 1, id="real-shaped"),
    pytest.param(3000, 20, 0.05, 2, id="contended"),
    pytest.param(3000, 3, 0.01, 3, id="hot-nodes"),
    pytest.param(2000, 50, 0.2, 4, id="crashy"),
]


@pytest.mark.parametrize(("ops", "nodes", "crash_rate", "seed"), _SHAPES)
@pytest.mark.parametrize("header_fields", [{}, {"effect_fence": "token"}, {"lease_expiry": "holder"}, {"clock_uncertainty_ms": 400}],
                         ids=["lease", "token", "holder", "uncertain"])
def test_same_verdict_on_generated_histories(ops: int, nodes: int, crash_rate: float, seed: int, header_fields: dict[str, Any]) -> None:
    lines = _with_header(list(_gen_lines(ops, nodes, crash_rate, seed)), **header_fields)
    header, hops, _ = read_history(lines)
    assert_same_verdict(header, hops)


@pytest.mark.parametrize("kind", [*PLANTERS, "zombie-effect"])
@pytest.mark.parametrize(("ops", "nodes", "crash_rate", "seed"), _SHAPES[:3])
def test_same_verdict_on_generated_histories_with_a_planted_anomaly(ops: int, nodes: int, crash_rate: float, seed: int, kind: str) -> None:
    lines = list(_gen_lines(ops // 3, nodes, crash_rate, seed))
    for fence in ("lease", "token"):
        rng = random.Random(f"{kind}-{seed}-{fence}")
        base = _with_header(lines, effect_fence=fence)
        planted, v = plant_zombie_effect_before_newer_effect(base, rng) if kind == "zombie-effect" else PLANTERS[kind](base, rng)
        header, hops, _ = read_history(planted)
        verdict = assert_same_verdict(header, hops)
        if kind != "zombie-effect" or fence == "lease":
            assert verdict.valid is False, (kind, fence)
            assert any(v in a.ops or kind == "non-linearizable" for a in verdict.anomalies), (kind, fence)


def test_the_one_pass_proves_most_real_shaped_nodes_clean() -> None:
    """The fast path is taken: else the engines would agree trivially, and slowly."""
    header, ops, _ = read_history(list(_gen_lines(3000, 200, 0.01, 1)))
    by_node: dict[str, list[Op]] = {}
    for op in ops:
        by_node.setdefault(op.node, []).append(op)
    rules = Rules.of(header)
    proven = sum(clean_counts(nops, rules) is not None for nops in by_node.values())
    assert proven >= 0.95 * len(by_node), f"{proven} of {len(by_node)} nodes proven clean"


# --------------------------------------------------------------------------------------
# mutants: ordinary nodes pushed over every edge


_STATUSES = ["READY", "RUNNING", "SUCCEEDED"]


def _rebuild(op: Op, **changes: Any) -> Op:
    """``op`` with fields changed and its derived epoch worked out again."""
    fields = {f: getattr(op, f) for f in op.__struct_fields__ if f != "epoch"}
    fields.update(changes)
    return make_op(
        fields["index"], fields["process"], fields["f"], fields["node"], fields["value"], fields["type"],
        fields["result"], fields["invoke_time"], fields["complete_time"], fields["complete_index"],
    )


def _mutate(ops: list[Op], rng: random.Random, ttl_ns: int) -> tuple[list[Op], str]:
    """One random change to one op (or to the list's order); says what it did."""
    i = rng.randrange(len(ops))
    op = ops[i]
    what = rng.choice(["epoch", "epoch", "time", "time", "type", "status", "owner", "result", "swap", "drop", "dup", "node", "release",
                       "backwards"])
    out = list(ops)
    if what == "epoch":
        d = rng.choice([-2, -1, 1, 2])
        if op.f in ("claim", "read") and op.type == "ok" and type(op.result.get("epoch")) is int:
            out[i] = _rebuild(op, result={**op.result, "epoch": op.result["epoch"] + d})
        elif type(op.value.get("epoch")) is int:
            out[i] = _rebuild(op, value={**op.value, "epoch": op.value["epoch"] + d})
        elif rng.random() < 0.5:
            out[i] = _rebuild(op, value={**op.value, "epoch": None})
    elif what == "time":
        d = rng.choice([-1, 1]) * rng.choice([1, 1_000, 1_000_000, ttl_ns // 2, ttl_ns, 2 * ttl_ns])
        if op.complete_time is not None and rng.random() < 0.5:
            out[i] = _rebuild(op, complete_time=max(op.invoke_time, op.complete_time + d))
        else:
            inv = max(0, op.invoke_time + d)
            done = op.complete_time if op.complete_time is None else max(inv, op.complete_time)
            out[i] = _rebuild(op, invoke_time=inv, complete_time=done)
    elif what == "type":
        to = rng.choice(["ok", "fail", "info"])
        result: dict[str, Any] = {}
        if to == "fail":
            result = {"reason": rng.choice(["held", "stale", "expired", "terminal"])}
        elif to == "ok" and op.f == "claim":
            result = {"epoch": rng.randint(0, 4)}
        elif to == "ok" and op.f == "read":
            result = {"status": rng.choice(_STATUSES), "epoch": rng.randint(0, 4), "owner": f"w{rng.randint(0, 20)}"}
        done = None if to == "info" else (op.complete_time if op.complete_time is not None else op.invoke_time + 1_000)
        out[i] = _rebuild(op, type=to, result=result, complete_time=done)
    elif what == "status" and op.f == "read" and op.type == "ok":
        out[i] = _rebuild(op, result={**op.result, "status": rng.choice(_STATUSES)})
    elif what == "owner":
        if op.f == "claim":
            out[i] = _rebuild(op, value={**op.value, "owner": rng.choice([None, "w-other", ["w", 1], op.value.get("owner")])})
        elif op.f == "read" and op.type == "ok":
            r = dict(op.result)
            if rng.random() < 0.3:
                r.pop("owner", None)
            else:
                r["owner"] = rng.choice(["w-other", ["w", 1], None])
            out[i] = _rebuild(op, result=r)
    elif what == "result":
        if op.f == "commit":
            out[i] = _rebuild(op, value={**op.value, "result": rng.choice([None, "r-other", 7, ["r"]])})
        elif op.f == "read" and op.type == "ok":
            r = dict(op.result)
            if rng.random() < 0.3:
                r.pop("result", None)
            else:
                r["result"] = rng.choice(["r-other", 7, None])
            out[i] = _rebuild(op, result=r)
    elif what == "swap":
        j = min(len(out) - 1, i + rng.randint(1, 5))
        out[i], out[j] = out[j], out[i]
    elif what == "drop":
        del out[i]
    elif what == "dup":
        copy = _rebuild(op, index=max(o.index for o in ops) + 1, process=max(o.process for o in ops) + 1)
        out.insert(min(len(out), i + rng.randint(0, 3)), copy)
    elif what == "node":
        out[i] = _rebuild(op, node=ops[rng.randrange(len(ops))].node)
    elif what == "backwards" and op.complete_time is not None:
        # no reader lets an op complete before its invoke, but check() takes ops from anyone
        out[i] = _rebuild(op, invoke_time=op.complete_time + rng.choice([1, 1_000_000, ttl_ns]))
    elif what == "release":
        # an indeterminate release of the op's lease, invoked at the op's time (listed last)
        e = op.epoch if type(op.epoch) is int else 1
        rel = make_op(max(o.index for o in ops) + 1, max(o.process for o in ops) + 1, "release", op.node,
                      {"epoch": e}, "info", {}, op.invoke_time, None)
        out.append(rel)
    return out, f"{what} at {i} (op {op.index})"


@pytest.mark.parametrize(("ops", "nodes", "crash_rate", "seed"), _SHAPES)
@given(data=st.data())
def test_same_verdict_on_mutants(ops: int, nodes: int, crash_rate: float, seed: int, data: st.DataObject) -> None:
    lines = list(_gen_lines(ops // 6, nodes, crash_rate, seed))
    fields = data.draw(st.sampled_from([{}, {"effect_fence": "token"}, {"lease_expiry": "holder"}, {"clock_uncertainty_ms": 300}]))
    header, hops, _ = read_history(_with_header(lines, **fields))
    rng = data.draw(st.randoms(use_true_random=False), label="mutation rng")
    changes = []
    for _ in range(data.draw(st.integers(1, 8), label="mutations")):
        hops, what = _mutate(hops, rng, int(header.ttl_ms * 1_000_000))
        changes.append(what)
    note(f"mutations: {changes}")
    assert_same_verdict(header, hops)


def test_same_verdict_in_any_order() -> None:
    """Ops given out of completion order: the one pass notices and leaves the node to the reference."""
    header, ops, _ = read_history(list(_gen_lines(3000, 200, 0.01, 1)))
    rng = random.Random(0)
    for _ in range(3):
        rng.shuffle(ops)
        assert_same_verdict(header, ops)


def test_same_verdict_on_the_example_corpus() -> None:
    expected = json.loads((EXAMPLES / "expected.json").read_text())
    for name, exp in expected.items():
        if exp["valid"] == "bad-input":
            continue
        header, ops, _ = read_history(EXAMPLES / name)
        assert_same_verdict(header, ops)


def test_a_subset_of_nodes_is_checked_alone() -> None:
    """What a partition of the history gets: the verdict of those nodes alone, either engine."""
    header, ops, _ = read_history(list(_gen_lines(3000, 20, 0.05, 2)))
    nodes = sorted({op.node for op in ops})
    part = set(nodes[::3])
    sub = [op for op in ops if op.node in part]
    verdict = assert_same_verdict(header, sub)
    assert verdict.stats["nodes"] == len(part) and verdict.stats["ops"] == len(sub)


def test_unknown_fields_do_not_fool_the_one_pass() -> None:
    """A read without the fields the common case has (no owner, no result) is the reference's to judge."""
    header = Header(1000, 0)
    base = [
        make_op(0, 1, "claim", "n", {"owner": "w1"}, "ok", {"epoch": 1}, 10, 20),
        make_op(2, 1, "commit", "n", {"epoch": 1, "result": "r"}, "ok", {}, 30, 40),
        make_op(4, 2, "read", "n", {}, "ok", {"status": "SUCCEEDED", "epoch": 1, "owner": "w1", "result": "r"}, 50, 60),
    ]
    assert clean_counts(base, Rules.of(header)) == (3, 0, 0)
    assert check(header, base).valid is True
    for r in ({"status": "SUCCEEDED", "epoch": 1, "result": "r"}, {"status": "SUCCEEDED", "epoch": 1, "owner": "w1"},
              {"status": "SUCCEEDED", "epoch": 1, "owner": "w1", "result": "other"}, {"epoch": 1}):
        ops = [*base[:2], msgspec.structs.replace(base[2], result=r)]
        assert clean_counts(ops, Rules.of(header)) is None
        assert_same_verdict(header, ops)


# --------------------------------------------------------------------------------------
# the epoch-order decision's matching of info claims: networkx only when no perfect one


@given(
    needed=st.lists(st.integers(1, 12), min_size=1, max_size=8, unique=True).map(sorted),
    claims=st.integers(0, 10),
    data=st.data(),
)
def test_the_small_matching_is_perfect_exactly_when_hopcroft_karp_is(needed: list[int], claims: int, data: st.DataObject) -> None:
    """Any perfect matching serves (every edge passes the real-time test); when none exists,
    networkx's decides the refutation as before."""
    import networkx as nx

    from leasecheck.checker.order import _perfect_matching

    ms = [make_op(2 * i, i, "claim", "n", {"owner": f"w{i}"}, "info", {}, i, None) for i in range(claims)]
    edges = [(m, e) for m in ms for e in needed if data.draw(st.booleans())]
    got = _perfect_matching(needed, edges)
    g: nx.Graph[tuple[str, int]] = nx.Graph()
    g.add_nodes_from(("e", e) for e in needed)
    g.add_nodes_from(("c", m.index) for m in ms)
    g.add_edges_from((("e", e), ("c", m.index)) for m, e in edges)
    best = nx.bipartite.hopcroft_karp_matching(g, top_nodes=[("e", e) for e in needed]) if edges else {}
    perfect = all(("e", e) in best for e in needed)
    assert (got is not None) == perfect
    if got is not None:
        assert sorted(got) == needed
        assert len({m.index for m in got.values()}) == len(needed), "a claim granted two epochs"
        assert all((m, e) in edges for e, m in got.items())
