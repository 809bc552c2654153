"""The stale family of docs/contracts/anomaly-kinds.md: a lease that acted after a newer one had been granted.

``duplicate-epoch``, ``epoch-regression``, ``stale-renew``, ``stale-commit`` and
``stale-effect``, each checked straight from its definition, as the rows of
:mod:`leasecheck.checker.table` run them. Fenced nodes are judged by epoch order:
one pass over the ops with :class:`~leasecheck.checker.precedence.MaxBefore`
answering "the largest epoch observed before this invoke" (epochs are the
version order, the way Elle uses unique writes, so no search is needed).
Unfenced nodes (``"epoch": null``) are judged by grant order instead: claims
ordered by real time, tokens naming the lease. A fenced node whose epochs repeat
or go back is judged by both (:mod:`leasecheck.checker.kinds_grant`), in the
same pass, and each explanation names the order it used. Every kind here proves
the node has no linearization; the epoch-order decision
(:mod:`leasecheck.checker.order`) explains a stale effect in the same words.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

from leasecheck.checker.explain import at, describe
from leasecheck.checker.findings import Findings, NodeHistory
from leasecheck.checker.kinds_grant import epoch_order_note, grant_order_explanation, non_increasing_since, stale_by_grant
from leasecheck.checker.leases import GrantLeases, TokenLeases, completed, int_epoch
from leasecheck.checker.model import freeze
from leasecheck.checker.precedence import MaxBefore
from leasecheck.histories import Op
from leasecheck.histories.format import EffectFence
from leasecheck.histories.vocabulary import STALE_KINDS


def _observed(op: Op) -> str:
    """How an op observed its epoch, for explanations."""
    if op.f == "claim":
        return f"had been granted epoch {op.epoch}"
    if op.f == "read":
        return f"had read epoch {op.epoch}"
    return f"had succeeded with epoch {op.epoch}"


# --------------------------------------------------------------------- fenced


def token_stale_effects(ops: Iterable[Op]) -> Iterator[tuple[Op, Op]]:
    """``effect_fence: "token"``: (accepted effect, stale effect) pairs, an ok effect
    invoked after an ok effect with a larger epoch had completed. Exactly when the
    protected resource (a register accepting epochs ≥ the largest it accepted) has
    no linearization."""
    effects = [op for op in ops if op.f == "effect" and op.type == "ok" and int_epoch(op)]
    accepted = MaxBefore(effects, key=lambda o: o.epoch)
    for op in effects:
        best, x = accepted.query(op.invoke_time)
        if x is not None and best > op.epoch:
            yield x, op


def lease_stale_effects(ops: Iterable[Op]) -> Iterator[tuple[Op, Op]]:
    """``effect_fence: "lease"``: (witness, stale effect) pairs, an ok effect with epoch
    e invoked after an op that observed an epoch > e had completed, exactly like
    ``stale-commit``. The witness is the op with the largest epoch observed before
    the effect's invoke (the first to complete, on a tie), as :func:`epoch_order`
    cites it."""
    ok = [op for op in ops if op.type == "ok" and int_epoch(op)]
    seen = MaxBefore(ok, key=lambda o: o.epoch)
    for op in ok:
        if op.f != "effect":
            continue
        best, x = seen.query(op.invoke_time)
        if x is not None and best > op.epoch:
            yield x, op


def stale_effects(ops: Iterable[Op], effect_fence: EffectFence) -> Iterator[tuple[Op, Op]]:
    """The ``stale-effect`` pairs (witness, effect) of a fenced node under the history's rule."""
    return lease_stale_effects(ops) if effect_fence == "lease" else token_stale_effects(ops)


#: how each rule's stale effect is explained, after the ops and times
_EFFECT_RULE = {
    "lease": (
        'under effect_fence "lease" the resource is coupled to the lease store, so a claim lifts its fence '
        "and an effect is stale once a newer epoch was observed, like a commit."
    ),
    "token": (
        'under effect_fence "token" the fenced resource rejects epochs below the largest it has accepted.'
    ),
}


def stale_effect_explanation(x: Op, op: Op, effect_fence: EffectFence) -> str:
    """Why the protected resource should have refused ``op``, naming the rule that applied."""
    if effect_fence == "lease":
        return (
            f"the protected resource accepted {describe(op)}, invoked at {at(op.invoke_time)}, after "
            f"{describe(x)} {_observed(x)} at {at(x.complete_time)}: {_EFFECT_RULE['lease']}"
        )
    return (
        f"the protected resource accepted {describe(op)}, invoked at {at(op.invoke_time)}, after it had "
        f"accepted {describe(x)} at {at(x.complete_time)}: {_EFFECT_RULE['token']}"
    )


def epoch_order(n: NodeHistory, out: Findings) -> None:
    """duplicate-epoch, epoch-regression, stale-renew, stale-commit, stale-effect.

    One pass family over the ok ops that name an epoch: the epochs observed
    before each invoke (one :class:`MaxBefore`) answer all five. Under
    ``effect_fence: "lease"`` an effect is judged in that same pass, exactly like
    a commit; under ``"token"`` only against the effects the resource accepted.
    On a node whose epochs do not increase, an op epoch order does not call stale
    is also judged by grant order (:mod:`leasecheck.checker.kinds_grant`): one
    finding per op and kind, in op order.
    """
    node = n.node
    ok = [op for op in n.ops if op.type == "ok" and int_epoch(op)]
    claims = [o for o in ok if o.f == "claim"]
    first_claim: dict[int, Op] = {}
    for op in sorted(claims, key=lambda o: o.index):
        e = op.epoch
        if e in first_claim:
            c = first_claim[e]
            out.add(
                "duplicate-epoch", node, [c, op],
                f"{describe(c)} and {describe(op)} were both granted epoch {e} "
                f"(at {at(c.complete_time)} and {at(op.complete_time)}); every grant must get a new, larger epoch.",
            )
        else:
            first_claim[e] = op
    fence = n.effect_fence
    judged = ("claim", "renew", "commit", "effect") if fence == "lease" else ("claim", "renew", "commit")
    seen = MaxBefore(ok, key=lambda o: o.epoch)
    since = non_increasing_since(claims, seen)
    grants = None if since is None else GrantLeases(claims)
    for op in ok:
        if op.f not in judged:
            continue
        best, x = seen.query(op.invoke_time)
        e = op.epoch
        if x is not None and op.f == "claim" and best >= e:
            out.add(
                "epoch-regression", node, [x, op],
                f"{describe(op)} was granted epoch {e} at {at(op.complete_time)}, but it was invoked at "
                f"{at(op.invoke_time)}, after {describe(x)} {_observed(x)} at {at(x.complete_time)}: "
                f"epochs must only grow.",
            )
        elif x is not None and op.f == "effect" and best > e:
            out.add("stale-effect", node, [x, op], stale_effect_explanation(x, op, fence) + epoch_order_note(op, since))
        elif x is not None and op.f != "claim" and best > e:
            out.add(
                STALE_KINDS[op.f], node, [x, op],
                f"{describe(op)} was invoked at {at(op.invoke_time)}, after {describe(x)} {_observed(x)} "
                f"at {at(x.complete_time)}; yet the store accepted the {op.f} with the older epoch {e} "
                f"(completed at {at(op.complete_time)}).{epoch_order_note(op, since)}",
            )
        elif grants is not None and op.f != "claim" and (stale := stale_by_grant(op, grants)) is not None:
            lease, newer = stale
            out.add(STALE_KINDS[op.f], node, [lease, newer, op], grant_order_explanation(lease, newer, op))
    if fence == "token":
        for x, op in token_stale_effects(ok):
            out.add("stale-effect", node, [x, op], stale_effect_explanation(x, op, fence))


# ------------------------------------------------------------------- unfenced


def grant_order(n: NodeHistory, out: Findings) -> None:
    """stale-renew / stale-commit / stale-effect of unfenced leases, by grant order.

    A holder's op is stale when it was invoked after a newer claim (one invoked
    after the holder's claim completed, with another token) had completed.
    """
    node, ops = n.node, n.ops
    leases = TokenLeases(ops)
    claims = leases.claims
    if len(claims) < 2:
        return
    starts = [c.invoke_time for c in claims]
    for op in ops:
        if op.type != "ok" or op.f not in ("renew", "commit", "effect"):
            continue
        h = leases.of(op)
        if h is None:
            continue
        tok = freeze(h.result.get("token"))
        newer: Op | None = None
        newer_done = 0
        assert h.complete_time is not None  # an ok op completed
        for c in claims[bisect_right(starts, h.complete_time):]:
            if c.invoke_time >= op.invoke_time:
                break
            c_done = c.complete_time
            assert c_done is not None
            if (c_done < op.invoke_time and freeze(c.result.get("token")) != tok
                    and (newer is None or c_done < newer_done)):
                newer, newer_done = c, c_done
        if newer is not None:
            out.add(
                STALE_KINDS[op.f], node, [h, newer, op],
                f"{describe(op)}, whose lease {describe(h)} was granted at {at(h.complete_time)}, was invoked at "
                f"{at(op.invoke_time)}, after the newer {describe(newer)} (invoked at {at(newer.invoke_time)}) "
                f"had been granted at {at(newer.complete_time)}; yet it was accepted.",
            )
    if n.effect_fence == "lease":
        crossed = crossed_effects(leases, [op for op in ops if op.type == "ok" and op.f == "effect"])
        if crossed is not None:
            a, b, early, late = crossed
            out.add(
                "stale-effect", node, [a, b, early, late],
                f"{describe(a)} was granted by {at(a.complete_time)} and {describe(b)} by {at(b.complete_time)}, in an "
                f"order the history cannot tell (both were invoked before either completed); {describe(early)} of the "
                f"second was invoked at {at(early.invoke_time)}, after the first's grant, and {describe(late)} of the "
                f"first at {at(late.invoke_time)}, after the second's. Whichever was granted first, the other's grant "
                'made its later effect stale (effect_fence "lease"); yet both were accepted.',
            )


def crossed_effects(leases: TokenLeases, effects: list[Op]) -> tuple[Op, Op, Op, Op] | None:
    """Two unfenced leases whose grants the history cannot order, each with an ok effect invoked after the other's
    claim completed: (claim A, claim B, B's effect, A's effect), A's the later invoked; None if there are none.

    Under ``effect_fence: "lease"`` a granted claim lifts the fence, so whichever of the two grants came first,
    the later grant made the earlier lease's effect after it stale: one of the two accepted effects is stale
    whatever the order. This is what a job queue's zombie leaves when the harness can bound a grant only by the
    job's enqueue: the grant-order rule above needs one claim invoked after the other completed.

    Of every such pair, the one whose proof was complete first (its four ops' last completion), so that what
    the checker following a run reports of a history so far (:mod:`leasecheck.checker.online`) is what it
    reports of the whole: ops completed later only make later proofs. Runs whether or not the grant-order
    rule found a stale effect, for the same reason."""
    mine: dict[int, list[Op]] = {}
    claim_of: dict[int, Op] = {}
    for op in effects:
        h = leases.of(op)
        if h is not None:
            mine.setdefault(id(h), []).append(op)
            claim_of[id(h)] = h
    held = sorted(claim_of.values(), key=lambda c: c.complete_time or 0)
    best: tuple[tuple[int, tuple[int, ...]], tuple[Op, Op, Op, Op]] | None = None
    for i, a in enumerate(held):
        assert a.complete_time is not None
        for b in held[i + 1:]:
            assert b.complete_time is not None
            if freeze(a.result.get("token")) == freeze(b.result.get("token")):
                continue
            ea = _first_done(mine[id(a)], b.complete_time)
            eb = _first_done(mine[id(b)], a.complete_time)
            if ea is None or eb is None:
                continue
            found = (b, a, eb, ea) if ea.invoke_time > eb.invoke_time else (a, b, ea, eb)
            key = (max(completed(op) for op in found), tuple(op.index for op in found))
            if best is None or key < best[0]:
                best = (key, found)
    return None if best is None else best[1]


def _first_done(effects: list[Op], after: int) -> Op | None:
    """Of a lease's ok effects, the first to complete of those invoked after ``after`` (ties: the lower index)."""
    return min((e for e in effects if e.invoke_time > after), key=lambda e: (completed(e), e.index), default=None)
