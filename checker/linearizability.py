"""Linearizability of one node: the epoch-order decision first, the WGL search as fallback.

The named kinds of :mod:`leasecheck.checker.kinds` are checked straight from
their definitions; what they cannot see, a node with no linearization under the
lease model (:mod:`leasecheck.checker.model`), is decided here. The epoch order
(:mod:`leasecheck.checker.order`) decides fenced nodes in one pass; only nodes
it cannot place (unfenced tokens, reads without an epoch) are searched
(:mod:`leasecheck.checker.search`), within a time budget.
"""

from __future__ import annotations

from collections.abc import Iterable

from leasecheck.checker import order
from leasecheck.checker.explain import at, describe
from leasecheck.checker.findings import Engine, Findings, NodeHistory
from leasecheck.checker.model import INITIAL, REGISTER_INITIAL, freeze, lease_step, register_step
from leasecheck.checker.order import Decision, Undecided
from leasecheck.checker.search import search
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import NON_LINEARIZABLE, READY, SUCCEEDED


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


def non_linearizable(n: NodeHistory, found: Findings) -> None:
    """The ``non-linearizable`` check: no order of the node's ops satisfies the lease model and real time."""
    d = decide_node(n.ops, n.engine, n.deadline)
    if d is None:
        found.searched += 1
        found.unknown_nodes.append(n.node)
        return
    found.searched += d.searched
    if not d.ok:
        found.add(NON_LINEARIZABLE, n.node, d.ops, d.why)
