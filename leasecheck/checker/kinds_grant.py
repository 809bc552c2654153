"""Staleness by grant order on a fenced node whose epochs do not increase (issue 25).

Epoch order (:func:`leasecheck.checker.kinds_stale.epoch_order`) names a lease by
its epoch, which is right while every grant gets a new, larger epoch. When a
node's epochs repeat or go back (a ``duplicate-epoch`` or ``epoch-regression``),
an epoch no longer names one lease and epoch order alone misjudges both ways:
the older holder's zombie op with a repeated (or larger) epoch, accepted after
the takeover, goes unreported, and the newer holder's own ops look stale next to
the older, larger epoch. So on such a node, and only there, stale-renew,
stale-commit and stale-effect (``effect_fence: "lease"``) are also judged by
grant order, the way unfenced nodes are
(:func:`leasecheck.checker.kinds_stale.grant_order`):

* the op's lease is an ok claim, found by :class:`~leasecheck.checker.leases.GrantLeases`
  (the latest ok claim of its epoch completed before its invoke, its own
  process's if any);
* the op is stale when it was invoked after a newer grant had completed: an ok
  claim invoked after the lease's claim completed and completed before the op's
  invoke (the first such to complete is cited: [lease's claim, newer claim, op]);
* an op stale by epoch order is reported there, once per op and kind, and not here.

Why it is sound: when epoch order does not call the op stale, no op before it
observed an epoch above the op's e, so the newer claim got an epoch ≤ e although
it was invoked after the lease's claim (which got e) completed: the two cited
claims themselves prove the epoch-regression (or duplicate-epoch). A store whose
epochs increase never meets the rule, and it runs only on nodes where
:func:`non_increasing_since` found such a proof.

Why a probe of a prefix says the same (:mod:`leasecheck.checker.online`): every
input of a finding (the lease's claim, the newer claim, the epochs observed
before the op) completed before the op's invoke, so it was read before the op
completed; the note epoch-order findings carry (:func:`epoch_order_note`) is
likewise decided by ops completed before the stale op's invoke.

Under ``effect_fence: "token"`` effects are not judged by grant order: that
resource knows only the tokens it was shown, so an effect carrying a repeated or
larger epoch is one it must accept; the duplicate or regression is the lease
store's fault, and is reported as such.
"""

from __future__ import annotations

from collections.abc import Iterable

from leasecheck.checker.explain import at, describe
from leasecheck.checker.leases import GrantLeases, completed
from leasecheck.checker.precedence import MaxBefore
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import AnomalyKind

#: the kinds that prove a node's epochs do not increase with grant order
NON_INCREASING: tuple[AnomalyKind, AnomalyKind] = ("duplicate-epoch", "epoch-regression")


def non_increasing_since(claims: Iterable[Op], seen: MaxBefore) -> tuple[int, AnomalyKind] | None:
    """When the node's epochs were first proven not to increase, and by which kind; None if they never were.

    ``claims``: the node's ok claims with an integer epoch; ``seen``: the epochs its
    ok ops observed (as :func:`~leasecheck.checker.kinds_stale.epoch_order` builds
    it). A claim proves it at its completion when it repeats the epoch of a claim
    completed before it (a ``duplicate-epoch``, named first on a tie) or got an
    epoch no larger than one observed before its invoke (an ``epoch-regression``).
    """
    granted: set[object] = set()
    for c in sorted(claims, key=lambda o: (completed(o), o.index)):
        if c.epoch in granted:
            return completed(c), "duplicate-epoch"
        best, _ = seen.query(c.invoke_time)
        if best is not None and best >= c.epoch:
            return completed(c), "epoch-regression"
        granted.add(c.epoch)
    return None


def epoch_order_note(op: Op, since: tuple[int, AnomalyKind] | None) -> str:
    """What an epoch-order finding of stale ``op`` adds when the node's epochs had been shown not to increase
    before the op's invoke: which order judged it (empty otherwise, so that other nodes read as before)."""
    if since is None or since[0] >= op.invoke_time:
        return ""
    return (f" Judged by epoch order; this node's epochs do not increase ({_A[since[1]]} {since[1]} was proven by "
            f"{at(since[0])}), so its ops are also judged by grant order.")


#: the article of each kind's name
_A = {"duplicate-epoch": "a", "epoch-regression": "an"}


def stale_by_grant(op: Op, leases: GrantLeases) -> tuple[Op, Op] | None:
    """(the claim of ``op``'s lease, the newer claim) when ``op`` was invoked after a newer grant had completed."""
    lease = leases.of(op)
    if lease is None:
        return None
    newer = leases.newer(lease, op)
    return None if newer is None else (lease, newer)


def grant_order_explanation(lease: Op, newer: Op, op: Op) -> str:
    """Why ``op`` is stale by grant order, naming the duplicate or regression that made epoch order unfit."""
    e, e2 = lease.epoch, newer.epoch
    how = f"repeats epoch {e}: a duplicate-epoch" if e2 == e else f"got epoch {e2}, not above {e}: an epoch-regression"
    who = "the protected resource" if op.f == "effect" else "the store"
    rule = ' under effect_fence "lease", where a claim lifts the resource\'s fence' if op.f == "effect" else ""
    return (
        f"{describe(op)} belongs to the lease {describe(lease)} granted epoch {e} at {at(lease.complete_time)}; it was "
        f"invoked at {at(op.invoke_time)}, after a newer grant: {describe(newer)}, invoked at {at(newer.invoke_time)} "
        f"(after that grant), was granted epoch {e2} at {at(newer.complete_time)}. Yet {who} accepted the {op.f} "
        f"(completed at {at(op.complete_time)}){rule}. Judged by grant order, because this node's epochs do not "
        f"increase (op {newer.index} {how}): an epoch no longer names one lease, its grant does."
    )
