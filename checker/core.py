"""History → verdict: the checker's entry points.

Per node (nodes are independent), the named kinds are checked straight from
their definitions; then, unless one of them already proves the node has no
linearization, linearizability is decided from the epoch order
(:mod:`leasecheck.checker.order`), falling back to the WGL search (:mod:`leasecheck.checker.search`)
only where the epoch order cannot decide, within a time budget.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from leasecheck.checker import kinds, order
from leasecheck.checker.explain import at, describe
from leasecheck.checker.model import INITIAL, READY, REGISTER_INITIAL, SUCCEEDED, freeze, lease_step, register_step
from leasecheck.checker.order import Decision, Undecided
from leasecheck.checker.search import search
from leasecheck.checker.verdict import KINDS, LINEARIZABILITY_KINDS, Verdict
from leasecheck.histories import Header, HistoryReader, Op

Engine = Literal["auto", "search"]

#: default time budget (seconds) for all linearizability searches of one history
DEFAULT_BUDGET = 60.0


@contextmanager
def _no_gc() -> Iterator[None]:
    """Millions of small acyclic objects: the cyclic GC would only rescan them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def is_fenced(ops: Iterable[Op]) -> bool:
    """A node is fenced when any op names an integer epoch; unfenced ops all say null."""
    for op in ops:
        if op.type == "ok" and type(op.epoch) is int:
            return True
        if op.f != "claim" and op.f != "read" and type(op.value.get("epoch")) is int:
            return True
    return False


def _needed_maybes(ops: list[Op], done: list[Op], fenced: bool) -> list[Op]:
    """The indeterminate ops that some ok op may need to have taken effect.

    Letting an info op take effect only adds constraints, unless a later op can
    be explained by nothing else: an info commit is needed only for a read that
    shows SUCCEEDED, an info release only for one that shows READY, and an info
    claim only for a key that no ok claim granted (named by an ok op or by a
    needed info op), or for the owner a read shows. Dropping the rest keeps the
    search from trying every subset of them.
    """
    reads = [op.result for op in done if op.f == "read"]
    shown = {r.get("status") for r in reads}
    owners = [r.get("owner") for r in reads if r.get("status") != READY]
    ends = [
        op for op in ops
        if op.type == "info" and ((op.f == "commit" and SUCCEEDED in shown) or (op.f == "release" and READY in shown))
    ]
    if fenced:
        granted = {op.epoch for op in done if op.f == "claim"}
        unexplained = any(op.epoch not in granted for op in [*done, *ends] if op.f != "claim" and op.epoch)
    else:
        granted = {freeze(op.result.get("token")) for op in done if op.f == "claim"}
        named = [freeze(op.value.get("token")) for op in [*done, *ends] if op.f not in ("claim", "read")]
        named += [freeze(r.get("token")) for r in reads if freeze(r.get("token")) is not None]
        unexplained = any(t not in granted for t in named)
    claims = [
        op for op in ops
        if op.type == "info" and op.f == "claim"
        and (unexplained or any(op.value.get("owner") is None or op.value.get("owner") == o for o in owners))
    ]
    return claims + ends


def _search_node(ops: list[Op], fenced: bool, deadline: float | None) -> Decision | None:
    """The WGL search over the lease object and the protected resource of one node."""
    lease = [op for op in ops if op.f != "effect" and op.type == "ok"]
    lease += _needed_maybes(ops, lease, fenced)
    if fenced:
        granted = {op.result.get("epoch") for op in lease if op.type == "ok" and op.f == "claim"}
        named = {op.epoch for op in lease if op.type == "ok"} | {op.value.get("epoch") for op in lease if op.type == "info"}
        keys = sorted(k for k in named - granted if type(k) is int)
        initial = INITIAL
    else:
        granted = {freeze(op.result.get("token")) for op in lease if op.type == "ok" and op.f == "claim"}
        named = {freeze(op.value.get("token")) for op in lease if op.f != "claim" and op.f != "read"}
        named |= {freeze(op.result.get("token")) for op in lease if op.f == "read" and op.type == "ok"}
        keys = [k for k in named - granted if k is not None]
        initial = (READY, None, None, None)
    res = search(lease, initial, lambda s, op: lease_step(s, op, fenced, keys), deadline)
    if res.ok and fenced:
        effects = [op for op in ops if op.f == "effect" and op.type in ("ok", "info") and type(op.value.get("epoch")) is int]
        res = search(effects, REGISTER_INITIAL, register_step, deadline)
    if res.ok is None:
        return None
    if res.ok:
        return Decision(True, searched=True)
    cited = ([res.prefix[-1]] if res.prefix else []) + ([res.stuck] if res.stuck else [])
    if res.stuck is not None:
        why = (
            f"no order of this node's ops satisfies the lease model and real time: the search could linearize at "
            f"most {len(res.prefix)} ops"
            + (f" (the last {describe(res.prefix[-1])})" if res.prefix else "")
            + f" before {describe(res.stuck)}, which completed at {at(res.stuck.complete_time)}, could no longer take effect."
        )
    else:
        why = "no order of this node's ops satisfies the lease model and real time."
    return Decision(False, cited, why, searched=True)


def decide_node(ops: list[Op], engine: Engine = "auto", deadline: float | None = None) -> Decision | None:
    """Linearizability of one node's ops: a Decision, or None when the search ran out of time."""
    fenced = is_fenced(ops)
    if engine == "auto" and fenced:
        try:
            lease = order.decide(ops)
        except Undecided:
            pass
        else:
            return lease if not lease.ok else order.decide_register(ops)
    return _search_node(ops, fenced, deadline)


def linearizable(header: Header, ops: list[Op], engine: Literal["fast", "search"] = "fast", budget: float | None = None) -> bool | None:
    """Is one node's history linearizable? True, False, or None (search out of budget).

    ``engine="fast"`` decides from the epoch order where it can (the checker's
    normal path); ``"search"`` always runs the WGL search. Tests hold the two
    to the same answer.
    """
    deadline = None if budget is None else time.monotonic() + budget
    d = decide_node(ops, "auto" if engine == "fast" else "search", deadline)
    return None if d is None else d.ok


def check(
    header: Header,
    ops: Iterable[Op],
    *,
    budget: float | None = DEFAULT_BUDGET,
    engine: Engine = "auto",
) -> Verdict:
    """Check a history's ops (any order) and return the verdict of DESIGN.md."""
    with _no_gc():
        by_node: dict[str, list[Op]] = defaultdict(list)
        types: Counter[str] = Counter()
        n = 0
        for op in ops:
            by_node[op.node].append(op)
            types[op.type] += 1
            n += 1
        deadline = None if budget is None else time.monotonic() + budget
        found = kinds.Findings()
        unknown: list[str] = []
        searched = 0
        for node in sorted(by_node):
            nops = by_node[node]
            fenced = is_fenced(nops)
            if fenced:
                kinds.epoch_order(node, nops, found)
                kinds.overlapping_fenced(node, nops, header, found)
            else:
                kinds.grant_order(node, nops, found)
                kinds.overlapping_unfenced(node, nops, header, found)
            kinds.commits(node, nops, fenced, found)
            kinds.stuck(node, nops, header, found)
            if found.kinds_on(node) & LINEARIZABILITY_KINDS:
                continue
            d = decide_node(nops, engine, deadline)
            if d is None:
                searched += 1
                unknown.append(node)
            else:
                searched += d.searched
                if not d.ok:
                    found.add("non-linearizable", node, d.ops, d.why)
        order_of = {k: i for i, k in enumerate(KINDS)}
        anomalies = sorted(found.anomalies, key=lambda a: (a.node, order_of[a.kind], a.ops))
        cited: dict[int, Op] = {}
        if anomalies:
            wanted = {i for a in anomalies for i in a.ops}
            cited = {op.index: op for nops in by_node.values() for op in nops if op.index in wanted}
        valid: Any = False if anomalies else ("unknown" if unknown else True)
        stats: dict[str, Any] = {
            "ops": n,
            "nodes": len(by_node),
            "ok": types["ok"],
            "fail": types["fail"],
            "info": types["info"],
            "searched_nodes": searched,
            "anomalies": {k: found.counts[k] for k in KINDS if found.counts[k]},
        }
        if sum(found.counts.values()) > len(anomalies):
            stats["anomalies_listed"] = len(anomalies)
        return Verdict(valid, anomalies, stats, unknown_nodes=unknown, cited=cited)


def check_source(
    source: str | os.PathLike[str] | Iterable[bytes | str],
    *,
    budget: float | None = DEFAULT_BUDGET,
    engine: Engine = "auto",
    name: str | None = None,
) -> Verdict:
    """Read and check one history (a path, or lines). Raises ``HistoryError`` on bad input."""
    with _no_gc():
        reader = HistoryReader(source, name)
        verdict = check(reader.header, reader.ops(), budget=budget, engine=engine)
    verdict.warnings.extend(reader.warnings)
    verdict.stats["events"] = reader.events
    verdict.stats["nemesis_events"] = len(reader.nemesis)
    return verdict
