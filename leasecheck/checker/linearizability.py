"""Linearizability of one node: the epoch-order decision first, the WGL search as fallback.

The named kinds (:mod:`leasecheck.checker.kinds_stale`, ``kinds_commits``,
``kinds_timing``) are checked straight from their definitions; what they cannot see, a node with no linearization under the
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
from leasecheck.checker.model import (
    INITIAL,
    LEASE_FENCE_INITIAL,
    REGISTER_INITIAL,
    freeze,
    lease_fence_step,
    lease_step,
    register_step,
)
from leasecheck.checker.order import Decision, Undecided
from leasecheck.checker.search import SearchResult, search
from leasecheck.histories import Op
from leasecheck.histories.format import DEFAULT_EFFECT_FENCE, EffectFence
from leasecheck.histories.vocabulary import EPOCH_CARRIERS, NON_LINEARIZABLE, READ_RESOURCE, READY, SUCCEEDED


def is_fenced(ops: Iterable[Op]) -> bool:
    """A node is fenced when any op names an integer epoch; unfenced ops all say null."""
    for op in ops:
        if op.type == "ok" and type(op.epoch) is int:
            return True
        if op.f in EPOCH_CARRIERS and type(op.value.get("epoch")) is int:
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


def _search_node(ops: list[Op], fenced: bool, deadline: float | None, effect_fence: EffectFence) -> Decision | None:
    """The WGL search over the lease object and the protected resource of one node.

    Under ``effect_fence: "lease"`` a fenced node's ok effects are searched with
    its lease ops as one object (state: the lease's and the fence), so the
    search is exact by construction and owes nothing to the argument that lets
    :func:`~leasecheck.checker.order.decide_register` skip it. Under ``"token"``
    the resource is a register of its own, searched after the lease object.
    Info effects are left out in both: accepting more only raises the fence. Reads of the resource are left out
    too: a read changes nothing, and what it shows is judged by :mod:`leasecheck.checker.kinds_resource` (proof
    kinds: a node with one is never searched for ``non-linearizable``).
    """
    lease = [op for op in ops if op.f != "effect" and op.f != READ_RESOURCE and op.type == "ok"]
    lease += _needed_maybes(ops, lease, fenced)
    if fenced:
        granted = {op.result.get("epoch") for op in lease if op.type == "ok" and op.f == "claim"}
        named = {op.epoch for op in lease if op.type == "ok"} | {op.value.get("epoch") for op in lease if op.type == "info"}
        keys = sorted(k for k in named - granted if type(k) is int)
        effects = [op for op in ops if op.f == "effect" and op.type == "ok" and type(op.value.get("epoch")) is int]
        res: SearchResult
        if effect_fence == "lease":
            res = search(lease + effects, LEASE_FENCE_INITIAL, lambda s, op: lease_fence_step(s, op, keys), deadline)
        else:
            res = search(lease, INITIAL, lambda s, op: lease_step(s, op, True, keys), deadline)
            if res.ok:
                res = search(effects, REGISTER_INITIAL, register_step, deadline)
    else:
        granted = {freeze(op.result.get("token")) for op in lease if op.type == "ok" and op.f == "claim"}
        named = {freeze(op.value.get("token")) for op in lease if op.f != "claim" and op.f != "read"}
        named |= {freeze(op.result.get("token")) for op in lease if op.f == "read" and op.type == "ok"}
        tokens = [k for k in named - granted if k is not None]
        res = search(lease, (READY, None, None, None), lambda s, op: lease_step(s, op, False, tokens), deadline)
    if res.ok is None:
        return None
    if res.ok:
        return Decision(True, searched=True)
    cited = ([res.prefix[-1]] if res.prefix else []) + ([res.stuck] if res.stuck else [])
    model = _MODEL_WORDS[effect_fence] if fenced else "the lease model"
    if res.stuck is not None:
        why = (
            f"no order of this node's ops satisfies {model} and real time: the search could linearize at "
            f"most {len(res.prefix)} ops"
            + (f" (the last {describe(res.prefix[-1])})" if res.prefix else "")
            + f" before {describe(res.stuck)}, which completed at {at(res.stuck.complete_time)}, could no longer take effect."
        )
    else:
        why = f"no order of this node's ops satisfies {model} and real time."
    return Decision(False, cited, why, searched=True)


#: how a refutation names the model it searched, so that it says which effect rule applied
_MODEL_WORDS: dict[EffectFence, str] = {
    "lease": 'the lease model (effect_fence "lease": its protected resource is part of it, and a claim lifts the fence)',
    "token": 'the lease model (effect_fence "token": its protected resource is a register of its own)',
}


def decide_node(
    ops: list[Op],
    engine: Engine = "auto",
    deadline: float | None = None,
    effect_fence: EffectFence = DEFAULT_EFFECT_FENCE,
) -> Decision | None:
    """Linearizability of one node's ops: a Decision, or None when the search ran out of time.

    ``effect_fence`` is the history header's: whether a claim lifts the
    protected resource's fence (``"lease"``) or only accepted effects do (``"token"``).
    """
    fenced = is_fenced(ops)
    if engine != "search" and fenced:
        try:
            lease = order.decide(ops)
        except Undecided:
            pass
        else:
            return lease if not lease.ok else order.decide_register(ops, effect_fence)
    return _search_node(ops, fenced, deadline, effect_fence)


def non_linearizable(n: NodeHistory, found: Findings) -> None:
    """The ``non-linearizable`` check: no order of the node's ops satisfies the lease model and real time."""
    d = decide_node(n.ops, n.engine, n.deadline, n.effect_fence)
    if d is None:
        found.searched += 1
        found.unknown_nodes.append(n.node)
        return
    found.searched += d.searched
    if not d.ok:
        found.add(NON_LINEARIZABLE, n.node, d.ops, d.why)
