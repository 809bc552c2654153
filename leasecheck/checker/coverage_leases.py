"""A lease as the coverage situations see it, and what both ways of counting a node share.

Why its own module: a node is counted by direct loops when small
(:mod:`leasecheck.checker.coverage_loops`) and by indexed sweeps when big
(:mod:`leasecheck.checker.coverage_sweeps`), and the two must count exactly the
same (the tests hold them to each other). So what a lease is, which op belongs
to it, where a newer lease was when a zombie op ran, and the fault situations,
are written once, here; the definitions are :mod:`leasecheck.checker.coverage`'s.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from leasecheck.checker.windows import INF, MEMBER_PARTITION, POWER_LOST, PRIMARY_LOST, Window
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import ZOMBIE_FUNCTIONS, ZOMBIE_PHASES, Situation

#: an effect or commit invoked this far into its lease (in ttls since its latest grant's invoke) writes late in it
#: (``late-write-across-claim``)
LATE_SHARE = 0.9

#: the situation of a zombie op, by its ``f`` and its phase (an index into ZOMBIE_PHASES)
ZOMBIE_SITUATION: dict[tuple[str, int], Situation] = {
    (f, i): cast(Situation, f"zombie-{f}-{phase}") for f in ZOMBIE_FUNCTIONS for i, phase in enumerate(ZOMBIE_PHASES)
}


@dataclass(slots=True, eq=False)
class CoveredLease:
    """One ok claim and what its ops did, as the situations need it."""

    claim: Op
    key: Any
    epoch: int | None
    #: the claim's completion (an ok claim always has one)
    granted: int
    #: first invoke of an effect; of a commit or release (its end); first completion of an ok commit / release; of an ok release
    effect_at: float = INF
    end_at: float = INF
    #: first invoke of a commit or release that may have ended it in the store (ok, or info: its answer never came); one
    #: refused (fail: the store unreachable, or the lease already gone) left the store's lease as it was
    may_end_at: float = INF
    ended_ok_at: float = INF
    released_ok_at: float = INF
    renews: list[Op] = field(default_factory=list)
    #: renews by invoke: their invokes, and prefix maxima of (info → inf, else completion) and of ok completions
    renew_invokes: list[int] = field(default_factory=list)
    renew_blocks: list[float] = field(default_factory=list)
    renew_oks: list[float] = field(default_factory=list)
    #: ok renews by completion, and the prefix maxima of their invokes (with the claim's): see :func:`grant_invoked`
    live_dones: list[int] | None = None
    live_since: list[int] = field(default_factory=list)

    def index_renews(self) -> None:
        self.renews.sort(key=lambda r: (r.invoke_time, r.index))
        block = ok = -INF
        for r in self.renews:
            done = INF if r.type == "info" or r.complete_time is None else r.complete_time
            block = max(block, done)
            if r.type == "ok" and r.complete_time is not None:
                ok = max(ok, r.complete_time)
            self.renew_invokes.append(r.invoke_time)
            self.renew_blocks.append(block)
            self.renew_oks.append(ok)


def lease_key(op: Op) -> Any:
    """A lease's name in an op: its epoch, or its token when the backend has no fencing token."""
    return op.epoch if op.epoch is not None else ("token", str(op.token))


def attach(op: Op, lease: CoveredLease) -> None:
    """Note what ``op``, an op of ``lease`` that carries its epoch or token, did to it."""
    done = op.complete_time
    if op.f == "renew":
        lease.renews.append(op)
    elif op.f == "effect":
        lease.effect_at = min(lease.effect_at, op.invoke_time)
    else:  # commit or release
        lease.end_at = min(lease.end_at, op.invoke_time)
        if op.type != "fail":
            lease.may_end_at = min(lease.may_end_at, op.invoke_time)
        if op.type == "ok" and done is not None:
            lease.ended_ok_at = min(lease.ended_ok_at, done)
            if op.f == "release":
                lease.released_ok_at = min(lease.released_ok_at, done)


def zombie_phase(new: CoveredLease, t: int) -> int | None:
    """Where the newer lease was at t: an index into ZOMBIE_PHASES, or None while its end is in flight."""
    if new.ended_ok_at < t:
        return 2
    if new.end_at < t:
        return None
    return 1 if new.effect_at < t else 0


def epochs_increase(leases: Sequence[CoveredLease]) -> bool:
    """Do the node's epochs name its leases in grant order? False when none has an epoch, or when two leases share
    one, or a claim invoked after a lease's grant got an epoch no larger (a duplicate-epoch / epoch-regression): such
    a node's leases are ordered by grant, as unfenced ones are, so that its takeovers are still seen (the leases here
    are by grant)."""
    epochs = [lease.epoch for lease in leases]
    if not epochs or any(e is None for e in epochs) or len(set(epochs)) < len(epochs):
        return False
    grants = [lease.granted for lease in leases]
    best: list[int] = []
    for lease in leases:
        best.append(max(best[-1], cast(int, lease.epoch)) if best else cast(int, lease.epoch))
    for lease in leases:
        i = bisect_left(grants, lease.claim.invoke_time)  # leases[:i] were granted before this claim was invoked
        if i and best[i - 1] >= cast(int, lease.epoch):
            return False
    return True


def replaces(other: CoveredLease, lease: CoveredLease) -> bool:
    """Under grant order, may ``other`` (granted later, its claim invoked after ``lease``'s grant) be a newer lease of
    ``lease``? Yes unless both carry one token from one process (a library that reuses a client id as its token)."""
    return other.key != lease.key or other.claim.process != lease.claim.process


def lapsed_scan(new: CoveredLease, t: int, ttl: float, uncertainty: float) -> bool:
    """Had ``new`` lapsed by t: not ended before t, no renew pending at t, and t past its latest grant + ttl + u?"""
    if new.end_at < t:
        return False
    g: float = new.granted
    for r in new.renews:
        if r.invoke_time < t:
            done = r.complete_time
            if r.type == "info" or done is None or done >= t:
                return False
            if r.type == "ok" and done > g:
                g = done
    return t > g + ttl + uncertainty


def lapsed_indexed(new: CoveredLease, t: int, ttl: float, uncertainty: float) -> bool:
    """:func:`lapsed_scan` on a lease whose renews were indexed (:meth:`CoveredLease.index_renews`)."""
    if new.end_at < t:
        return False
    g: float = new.granted
    k = bisect_left(new.renew_invokes, t)
    if k:
        if new.renew_blocks[k - 1] >= t:
            return False
        g = max(g, new.renew_oks[k - 1])
    return t > g + ttl + uncertainty


def grant_invoked(lease: CoveredLease, t: int) -> int:
    """T of ``lease`` at t: the latest invoke among its ok claim and its ok renews completed before t (the store's
    lease runs from no earlier than T, so it is surely live until T + ttl − uncertainty)."""
    if lease.live_dones is None:  # indexed once, on the first question: ok renews by completion, prefix max of invokes
        oks = sorted((r.complete_time, r.invoke_time) for r in lease.renews if r.type == "ok" and r.complete_time is not None)
        lease.live_dones, lease.live_since, best = [], [], lease.claim.invoke_time
        for done, invoked in oks:
            best = max(best, invoked)
            lease.live_dones.append(done)
            lease.live_since.append(best)
    k = bisect_left(lease.live_dones, t)
    return lease.live_since[k - 1] if k else lease.claim.invoke_time


def count_writes_across_claims(owned: Sequence[tuple[Op, CoveredLease]], leases: Sequence[CoveredLease], ttl: float,
                               uncertainty: float, counts: Counter[str]) -> None:
    """``op-in-flight-across-claim`` and ``late-write-across-claim``: each ok or fail effect or commit invoked at a
    while its lease was live (not ended before a, a < T + ttl − uncertainty, T :func:`grant_invoked`) with an ok claim
    of another process granted strictly between a and its completion; the late one also has a ≥ T + 0.9 ttl.
    ``owned``: ops with their leases; ``leases``: the node's, by grant."""
    if len(leases) < 2:
        return
    grants = [lease.granted for lease in leases]
    for op, lease in owned:
        done = op.complete_time
        if op.f not in ("effect", "commit") or op.type == "info" or done is None:
            continue
        t = op.invoke_time
        if lease.end_at < t:
            continue
        since = grant_invoked(lease, t)
        if t >= since + ttl - uncertainty:
            continue  # its lease may have run out before it was sent: a zombie's write, refused at its check
        i = bisect_right(grants, t)
        while i < len(grants) and grants[i] < done:
            if leases[i].claim.process != op.process:
                counts["op-in-flight-across-claim"] += 1
                if t >= since + LATE_SHARE * ttl:
                    counts["late-write-across-claim"] += 1
                break
            i += 1


def count_lagging_claims(claims: Sequence[Op], leases: Sequence[CoveredLease], skewed: Sequence[Window],
                         counts: Counter[str]) -> None:
    """``lagging-clock-claim-on-recent-node``: each ok claim invoked at a and granted at b while a worker-clock window
    surely held its process's clock behind by d throughout [a, b] (:meth:`Window.behind_throughout`), with the node's
    latest grant g to another process before a and d > b − g (``leases`` by grant)."""
    behind = [w for w in skewed if w.skew is not None and w.skew.delta_ms < 0]
    if not behind or not leases:
        return
    grants = [lease.granted for lease in leases]
    for c in claims:
        done = c.complete_time
        if c.type != "ok" or done is None:
            continue
        t, p = c.invoke_time, c.process
        lag = max((w.behind_throughout(t, done) for w in behind if p in w.victims), default=0.0)
        if not lag:
            continue
        i = bisect_left(grants, t)
        while i and leases[i - 1].claim.process == p:
            i -= 1
        if i and lag > done - grants[i - 1]:
            counts["lagging-clock-claim-on-recent-node"] += 1


def lease_deadline(lease: CoveredLease, ttl: float) -> float:
    """G + ttl, G the latest completion among the ok claim and the ok renews completed before that deadline."""
    g: float = lease.granted
    for done in sorted(r.complete_time for r in lease.renews if r.type == "ok" and r.complete_time is not None):
        if done >= g + ttl:
            break
        g = max(g, done)
    return g + ttl


def count_fault_situations(leases: Sequence[CoveredLease], ttl: float, store: Sequence[Window], skewed: Sequence[Window],
                           counts: Counter[str], claims: Sequence[Op] = ()) -> None:
    """The two fault situations of a node's ``leases``: a deadline inside a store fault, a lease held by a skewed worker."""
    if store:
        for lease in leases:
            deadline = lease_deadline(lease, ttl)
            # a holder that tried to commit in the outage and was refused still held it in the store at its deadline
            if lease.may_end_at >= deadline and any(w.start < deadline < w.until for w in store):
                counts["lease-expires-during-store-fault"] += 1
    if skewed:
        for lease in leases:
            p = lease.claim.process
            # held until it ended or expired: a lease its holder never gave back is no longer held a ttl after its last
            # grant or renew (counting it at any later skew made a node's count depend on faults long after its end)
            held_until = min(lease.end_at, lease_deadline(lease, ttl))
            if any(p in w.victims and lease.granted < w.until and held_until > w.start for w in skewed):
                counts["lease-held-by-skewed-worker"] += 1
    count_lagging_claims(claims, leases, skewed, counts)
    count_cluster_situations(leases, ttl, store, counts, claims)
    count_power_situations(leases, store, counts, claims)


def count_cluster_situations(leases: Sequence[CoveredLease], ttl: float, store: Sequence[Window], counts: Counter[str],
                             claims: Sequence[Op] = ()) -> None:
    """The cluster situations of a node's ``leases`` and ``claims`` (every claim invoked, whatever its outcome), from the
    store windows whose roles say what the cluster went through."""
    lost = [w.start for w in store if PRIMARY_LOST in w.roles]
    split = [w for w in store if MEMBER_PARTITION in w.roles]
    if not lost and not split:
        return
    for lease in leases:
        if any(t - ttl <= lease.granted < t and lease.end_at >= t for t in lost):
            counts["lease-granted-before-primary-lost"] += 1
        if any(lease.granted < t and any(r.invoke_time > t for r in lease.renews) for t in lost):
            counts["lease-renewed-across-failover"] += 1
    for claim in claims:  # every claim attempted while the members were cut apart, granted or not (a sync cluster stalls them)
        if any(w.start <= claim.invoke_time < w.until for w in split):
            counts["claim-during-member-partition"] += 1


#: the refusal that says nothing of what the store kept: it was not reached (an ``error`` is its answer: "no such node")
_UNANSWERED = ("unavailable",)


def count_power_situations(leases: Sequence[CoveredLease], store: Sequence[Window], counts: Counter[str],
                           claims: Sequence[Op] = ()) -> None:
    """``granted-before-power-loss`` and ``claim-after-power-loss`` of a node's ``leases`` and ``claims``, from the store
    windows of power losses (role :data:`POWER_LOST`: the loss at its start, the restart at its end)."""
    losses = sorted((w for w in store if POWER_LOST in w.roles), key=lambda w: (w.start, w.until))
    if not losses:
        return
    before: set[int] = set()  # the leases granted in the last unsynced interval before some loss, by id
    after: list[tuple[float, float]] = []  # for each loss that found one: (its restart, the next loss's start)
    for w in losses:
        since = max((v.until for v in losses if v.until <= w.start), default=-INF)  # the previous loss's restart
        found = [lease for lease in leases if since < lease.granted < w.start]
        if found:
            before.update(id(lease) for lease in found)
            after.append((w.until, min((v.start for v in losses if v.start > w.until), default=INF)))
    counts["granted-before-power-loss"] += len(before)
    for claim in claims:  # each answered claim once, whichever loss it followed
        if claim.type == "info" or (claim.type == "fail" and claim.result.get("reason") in _UNANSWERED):
            continue
        if any(restart < claim.invoke_time < following for restart, following in after):
            counts["claim-after-power-loss"] += 1
