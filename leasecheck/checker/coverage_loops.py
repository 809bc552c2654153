"""A small node's coverage situations, straight from the definitions: a loop over its few leases per question.

Why apart from the indexed sweeps (:mod:`leasecheck.checker.coverage_sweeps`):
a real history's nodes hold about ten ops, where building the sweeps' indexes
costs more than it saves (docs/performance.md). They count exactly what the
sweeps count: the tests hold the two to each other.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from operator import attrgetter
from typing import cast

from leasecheck.checker.coverage_leases import (
    ZOMBIE_SITUATION,
    CoveredLease,
    attach,
    count_fault_situations,
    count_writes_across_claims,
    epochs_increase,
    lapsed_scan,
    lease_key,
    replaces,
    zombie_phase,
)
from leasecheck.checker.windows import INF, Window
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import EPOCH_CARRIERS

#: sort keys of the definitions' orders: leases by grant, claims by invoke (index breaks ties)
_by_grant = attrgetter("complete_time", "index")
_by_invoke = attrgetter("invoke_time", "index")


def count_small_node(ops: list[Op], ttl: float, uncertainty: float, store: Sequence[Window], skewed: Sequence[Window],
                counts: Counter[str], crossed: bool = False) -> None:
    """A small node's situations, straight from :mod:`leasecheck.checker.coverage`'s definitions: a loop over its few leases per question.

    Counts exactly what :class:`~leasecheck.checker.coverage_sweeps.IndexedNode`'s sweeps count (the tests hold the two
    to each other on generated, mutated and hand-written histories); it only
    skips their indexes, which cost more than they save on a node of a few
    leases. ``crossed``: under grant order, a later grant replaces an earlier one even when its claim was invoked
    before that grant completed (a job queue's history, see :mod:`leasecheck.checker.coverage`). A node with one claim and no fault window is done after the first
    loop: every situation but the fault ones needs two claims (or a claim that
    completed before it was invoked, which only a hand-made list of ops holds).
    """
    claims: list[Op] = []
    granted: list[Op] = []
    for op in ops:
        if op.f == "claim":
            claims.append(op)
            if op.type == "ok" and op.complete_time is not None:
                granted.append(op)
    if len(claims) < 2 and not store and not skewed and (
        not claims or claims[0].complete_time is None or claims[0].complete_time >= claims[0].invoke_time
    ):
        return  # a claim's own lease is granted at its completion, after its invoke: it is no lease "before" it
    granted.sort(key=_by_grant)
    leases = [CoveredLease(op, lease_key(op), op.epoch, cast(int, op.complete_time)) for op in granted]
    # the questions below ask about the leases granted before a time t, a prefix of ``leases``: its
    # length is a bisect of the grant times, and its latest lease (largest epoch when fenced, else
    # the last granted) is read off prefix maxima taken once, not found by a loop per question
    grants = [lease.granted for lease in leases]
    keys = [lease.key for lease in leases]
    latest: list[CoveredLease | None] = []
    fenced = epochs_increase(leases)  # else by grant, as unfenced leases are
    if fenced:
        best: CoveredLease | None = None
        best_epoch: float = -INF
        for lease in leases:
            if lease.epoch is not None and lease.epoch > best_epoch:
                best, best_epoch = lease, lease.epoch
            latest.append(best)
    else:
        latest.extend(leases)

    owned: list[tuple[Op, CoveredLease]] = []
    if leases:
        for op in ops:
            f = op.f
            if f == "claim":
                continue
            t = op.invoke_time
            owner: CoveredLease | None = None
            i = bisect_left(grants, t)  # leases[:i] were granted before t: the owner is the last of them naming op's lease
            if f in EPOCH_CARRIERS:
                key, p = lease_key(op), op.process
                while i:  # named by its grant: the latest lease of its key its own process got, else the latest
                    i -= 1
                    if keys[i] == key:
                        owner = owner or leases[i]
                        if leases[i].claim.process == p:
                            owner = leases[i]
                            break
                if owner is not None:
                    attach(op, owner)
                    owned.append((op, owner))
            elif f == "read":
                p = op.process
                while i:
                    i -= 1
                    if leases[i].claim.process == p:
                        owned.append((op, leases[i]))
                        break
    # zombie ops: an op of a lease that a newer one replaced before the op's invoke
    if len(leases) > 1:
        for op, lease in owned:
            t = op.invoke_time
            new: CoveredLease | None = None
            if fenced:
                i = bisect_left(grants, t)
                newest = latest[i - 1] if i else None
                if newest is not None and newest.epoch is not None and lease.epoch is not None and newest.epoch > lease.epoch:
                    new = newest
            else:
                for other in reversed(leases):
                    if other.granted >= t:
                        continue
                    if other.granted <= lease.granted:
                        break
                    if (crossed or other.claim.invoke_time > lease.granted) and replaces(other, lease):
                        new = other
                        break
            if new is not None:
                phase = zombie_phase(new, t)
                if phase is not None:
                    counts[ZOMBIE_SITUATION[op.f, phase]] += 1
                if op.f in EPOCH_CARRIERS and lapsed_scan(new, t, ttl, uncertainty):
                    counts["zombie-op-while-new-lapsed"] += 1
    count_writes_across_claims(owned, leases, ttl, uncertainty, counts)
    if claims:
        claims.sort(key=_by_invoke)
        open_until = -INF
        for c in claims:
            t = c.invoke_time
            if t < open_until:
                counts["claim-race-ready"] += 1
            i = bisect_left(grants, t)
            last = latest[i - 1] if i else None
            if last is None or last.released_ok_at < t:  # READY at t
                open_until = max(open_until, INF if c.complete_time is None else c.complete_time)
            # claim-while-held: a lease claimed before t, not ended before t, its latest grant invoke + ttl - u after t
            for j in range(i):
                lease = leases[j]
                if lease.end_at < t:
                    continue
                since = lease.claim.invoke_time
                for r in lease.renews:
                    done = r.complete_time
                    if r.type == "ok" and done is not None and done < t and r.invoke_time > since:
                        since = r.invoke_time
                if t < since + ttl - uncertainty:
                    counts["claim-while-held"] += 1
                    break
            # claim-after-expiry: the latest lease had lapsed (not ended, no renew of it pending at t, G + ttl + u before t)
            if last is not None and lapsed_scan(last, t, ttl, uncertainty):
                counts["claim-after-expiry"] += 1
    if store or skewed:  # no window: no fault situation
        count_fault_situations(leases, ttl, store, skewed, counts, claims)
