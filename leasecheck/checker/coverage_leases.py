"""A lease as the coverage situations see it, and what both ways of counting a node share.

Why its own module: a node is counted by direct loops when small
(:mod:`leasecheck.checker.coverage_loops`) and by indexed sweeps when big
(:mod:`leasecheck.checker.coverage_sweeps`), and the two must count exactly the
same (the tests hold them to each other). So what a lease is, which op belongs
to it, where a newer lease was when a zombie op ran, and the fault situations,
are written once, here; the definitions are :mod:`leasecheck.checker.coverage`'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from leasecheck.checker.windows import INF, MEMBER_PARTITION, PRIMARY_LOST, Window
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import ZOMBIE_FUNCTIONS, ZOMBIE_PHASES, Situation

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
    ended_ok_at: float = INF
    released_ok_at: float = INF
    renews: list[Op] = field(default_factory=list)
    #: renews by invoke: their invokes, and prefix maxima of (info → inf, else completion) and of ok completions
    renew_invokes: list[int] = field(default_factory=list)
    renew_blocks: list[float] = field(default_factory=list)
    renew_oks: list[float] = field(default_factory=list)

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
            if lease.end_at >= deadline and any(w.start < deadline < w.until for w in store):
                counts["lease-expires-during-store-fault"] += 1
    if skewed:
        for lease in leases:
            p = lease.claim.process
            # held until it ended or expired: a lease its holder never gave back is no longer held a ttl after its last
            # grant or renew (counting it at any later skew made a node's count depend on faults long after its end)
            held_until = min(lease.end_at, lease_deadline(lease, ttl))
            if any(p in w.victims and lease.granted < w.until and held_until > w.start for w in skewed):
                counts["lease-held-by-skewed-worker"] += 1
    count_cluster_situations(leases, ttl, store, counts, claims)


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
