"""The lease model and the protected-resource model of docs/contracts/lease-model.md, as pure functions.

Like a Porcupine ``Model``: a state, a step function, and nothing about the
system under test. A state is a tuple ``(status, key, owner, result)`` where
``key`` is the epoch (fenced backends) or the opaque token (unfenced ones).
The protected resource is a fenced register: alone (``register_step``) under
``effect_fence: "token"``, or, under ``"lease"``, one object with the lease
(``lease_fence_step``), because there a granted claim lifts its fence.
``step`` is nondeterministic (an indeterminate claim may have been granted any
epoch above the current one), so it returns every possible next state; the
search runs it over sets of states, Porcupine's power-set construction.

Both the search and the fast epoch-order construction judge reads with
:func:`read_matches`, so the two cannot disagree on what a read may show.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from leasecheck.histories import Op
from leasecheck.histories.vocabulary import READY, RUNNING, SUCCEEDED

State = tuple[str, Any, Any, Any]
INITIAL: State = (READY, 0, None, None)

#: the protected resource: the largest epoch it has accepted
REGISTER_INITIAL = float("-inf")

#: ``effect_fence: "lease"``: the lease's state and the resource's fence, one object
LeaseFence = tuple[State, float]
LEASE_FENCE_INITIAL: LeaseFence = (INITIAL, REGISTER_INITIAL)


def freeze(x: Any) -> Any:
    """A hashable stand-in for a JSON value (owners, results and tokens may be any JSON)."""
    if type(x) is list:
        return ("__list__", *map(freeze, x))
    if type(x) is dict:
        return ("__dict__", *sorted((k, freeze(v)) for k, v in x.items()))
    return x


def agrees(expected: Any, seen: Any) -> bool:
    """Does a value a read saw (raw JSON) agree with the one written (frozen)?

    A writer that did not say (an invoke with no ``owner``, a commit with no
    ``result``) cannot be contradicted: benefit of the doubt.
    """
    return expected is None or expected == freeze(seen)


def owner_of(claim: Op) -> Any:
    """The owner a claim asked to be recorded."""
    return freeze(claim.value.get("owner"))


def result_of(commit: Op) -> Any:
    """The result a commit asked to be recorded."""
    return freeze(commit.value.get("result"))


def read_matches(state: State, read: Op, fenced: bool) -> bool:
    """Can ``read``'s ok value be what the store held in ``state``?"""
    status, key, owner, result = state
    r = read.result
    if r.get("status") != status:
        return False
    if fenced:
        e = r.get("epoch")
        if e is not None and e != key:
            return False
    elif "token" in r and r["token"] is not None and r["token"] != key:
        return False
    # a field the read does not give is never compared (docs/contracts/anomaly-kinds.md's readings): a job
    # queue says that a job succeeded, not always who finished it nor what it returned
    if status != READY and "owner" in r and not agrees(owner, r["owner"]):
        return False
    if status == SUCCEEDED and "result" in r and not agrees(result, r["result"]):
        return False
    return True


def lease_step(state: State, op: Op, fenced: bool, info_keys: Iterable[Any] = ()) -> list[State]:
    """Every state the lease object can be in after ``op`` took effect in ``state``.

    Empty when ``op`` cannot take effect there. ``info_keys`` are the keys an
    indeterminate claim may have been granted: the epochs (or tokens) that some
    op names but no ok claim granted. Granting any other key helps nothing:
    nobody names it, and it only blocks ops that name the current key.
    """
    status, key, owner, _ = state
    f = op.f
    if f == "read":
        return [state] if read_matches(state, op, fenced) else []
    if f == "read-resource":
        return [state]  # a read changes nothing; what it shows is judged by leasecheck.checker.kinds_resource
    if f == "claim":
        if status == SUCCEEDED:
            return []
        who = owner_of(op)
        if op.type == "ok":
            new = op.result.get("epoch") if fenced else freeze(op.result.get("token"))
            if fenced and (type(new) is not int or not new > key):
                return []  # a fenced node's grant must name a larger epoch (null names none)
            return [(RUNNING, new, who, None)]
        if fenced:
            return [(RUNNING, k, who, None) for k in info_keys if k > key]
        # an unfenced grant's token is opaque: it may also be one nobody saw
        return [(RUNNING, k, who, None) for k in (*info_keys, ("unseen-token", op.index))]
    mine = op.value.get("epoch") if fenced else freeze(op.value.get("token"))
    if status != RUNNING or mine != key:
        return []
    if f == "renew":
        return [state]
    if f == "commit":
        return [(SUCCEEDED, key, owner, result_of(op))]
    if f == "release":
        return [(READY, key, None, None)]
    raise ValueError(f"the lease model has no operation {f!r}")


def register_step(largest: float, op: Op) -> list[float]:
    """The protected resource: an effect is accepted iff its epoch ≥ the largest accepted.

    Only effects that carry an integer epoch are passed in (the search of an
    unfenced node has no protected resource to judge).
    """
    e: int = op.value["epoch"]
    return [e] if e >= largest else []


def lease_fence_step(state: LeaseFence, op: Op, info_keys: Iterable[Any] = ()) -> list[LeaseFence]:
    """A fenced node under ``effect_fence: "lease"``: the lease model and its resource as one object.

    The fence is the largest epoch of every granted claim and every accepted
    effect: ``effect(e)`` is accepted iff e ≥ the fence (and leaves the lease as
    it was); a claim steps the lease as :func:`lease_step` does and lifts the
    fence to the epoch it was granted; every other op leaves the fence alone.
    Only effects with an integer epoch are passed in (fenced nodes only).
    """
    lease, fence = state
    if op.f == "effect":
        e: int = op.value["epoch"]
        return [(lease, e)] if e >= fence else []
    nxt = lease_step(lease, op, True, info_keys)
    if op.f == "claim":
        return [(s, max(fence, s[1])) for s in nxt]
    return [(s, fence) for s in nxt]
