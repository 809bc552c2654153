"""A big node's coverage situations, counted by indexed sweeps: one pass after sorting, bisects and one heap.

Why apart from the direct loops (:mod:`leasecheck.checker.coverage_loops`): a
node of many claims would cost the loops claims × ops; these sweeps cost a
sort. A real history's nodes are small, so this is the path of big, hand-made
or generated ones; it counts exactly what the loops count.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter, defaultdict
from typing import Any

from leasecheck.checker.coverage_leases import (
    ZOMBIE_SITUATION,
    CoveredLease,
    attach,
    count_writes_across_claims,
    epochs_increase,
    lapsed_indexed,
    lease_key,
    replaces,
    zombie_phase,
)
from leasecheck.checker.windows import INF
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import EPOCH_CARRIERS


def _granted_before(index: tuple[list[int], list[CoveredLease]] | None, t: int) -> CoveredLease | None:
    """The latest lease of ``index`` (grant times, leases) granted before t."""
    if index is None:
        return None
    i = bisect_left(index[0], t)
    return index[1][i - 1] if i else None


class IndexedNode:
    """One node's leases, indexed for the questions the situations ask at a time t."""

    def __init__(self, ops: list[Op], crossed: bool = False) -> None:
        """``crossed``: grants the history cannot order replace each other (a job queue's history)."""
        self.ops = ops
        self.crossed = crossed
        granted = sorted((op for op in ops if op.f == "claim" and op.type == "ok" and op.complete_time is not None),
                         key=lambda op: (op.complete_time, op.index))
        self.leases = [CoveredLease(op, lease_key(op), op.epoch, op.complete_time) for op in granted if op.complete_time is not None]
        self.fenced = epochs_increase(self.leases)  # else by grant, as unfenced leases are
        self.granted_at = [lease.granted for lease in self.leases]
        # the latest lease among the first i+1 grants: largest epoch (fenced), else the last
        self.latest: list[CoveredLease | None] = []
        best: CoveredLease | None = None
        best_rank: float = -INF
        for i, lease in enumerate(self.leases):
            rank = lease.epoch if self.fenced else i
            if rank is not None and rank > best_rank:
                best, best_rank = lease, rank
            self.latest.append(best)
        # leases by their name in an op, and by the process that claimed them: (grant times, leases), by grant
        by_key: dict[Any, tuple[list[int], list[CoveredLease]]] = defaultdict(lambda: ([], []))
        by_own_key: dict[Any, tuple[list[int], list[CoveredLease]]] = defaultdict(lambda: ([], []))
        by_process: dict[int, tuple[list[int], list[CoveredLease]]] = defaultdict(lambda: ([], []))
        for lease in self.leases:
            own = (lease.key, lease.claim.process)
            for index in (by_key[lease.key], by_own_key[own], by_process[lease.claim.process]):
                index[0].append(lease.granted)
                index[1].append(lease)
        #: every op that belongs to a lease and may be a zombie op, with its lease
        self.owned: list[tuple[Op, CoveredLease]] = []
        for op in ops:
            if op.f in EPOCH_CARRIERS:  # named by its grant: the latest lease of its key its own process got, else the latest
                key = lease_key(op)
                owner = (_granted_before(by_own_key.get((key, op.process)), op.invoke_time)
                         or _granted_before(by_key.get(key), op.invoke_time))
                if owner is not None:
                    attach(op, owner)
                    self.owned.append((op, owner))
            elif op.f == "read":
                owner = _granted_before(by_process.get(op.process), op.invoke_time)
                if owner is not None:
                    self.owned.append((op, owner))
        for lease in self.leases:
            lease.index_renews()

    def latest_before(self, t: int) -> CoveredLease | None:
        """The node's latest lease whose claim completed before t."""
        i = bisect_left(self.granted_at, t)
        return self.latest[i - 1] if i else None

    def newer(self, lease: CoveredLease, t: int) -> CoveredLease | None:
        """The newest lease that replaced ``lease`` before t (see :mod:`leasecheck.checker.coverage`'s definitions), or None."""
        if self.fenced:
            newest = self.latest_before(t)
            if newest is not None and newest.epoch is not None and lease.epoch is not None and newest.epoch > lease.epoch:
                return newest
            return None
        i = bisect_left(self.granted_at, t) - 1
        while i >= 0 and self.leases[i].granted > lease.granted:
            other = self.leases[i]
            if (self.crossed or other.claim.invoke_time > lease.granted) and replaces(other, lease):
                return other
            i -= 1
        return None

    def ready_at(self, t: int) -> bool:
        latest = self.latest_before(t)
        return latest is None or latest.released_ok_at < t


def count_zombies(node: IndexedNode, counts: Counter[str], ttl: float = INF, uncertainty: float = 0.0) -> None:
    for op, lease in node.owned:
        t = op.invoke_time
        new = node.newer(lease, t)
        if new is None:
            continue
        phase = zombie_phase(new, t)
        if phase is not None:
            counts[ZOMBIE_SITUATION[op.f, phase]] += 1
        if op.f in EPOCH_CARRIERS and lapsed_indexed(new, t, ttl, uncertainty):
            counts["zombie-op-while-new-lapsed"] += 1
    count_writes_across_claims(node.owned, node.leases, ttl, uncertainty, counts)


def count_claims(node: IndexedNode, ttl: float, uncertainty: float, counts: Counter[str]) -> None:
    claims = sorted((op for op in node.ops if op.f == "claim"), key=lambda op: (op.invoke_time, op.index))
    # claim-race-ready: a sweep by invoke, keeping the latest completion of an earlier claim on a READY node
    open_until = -INF
    for c in claims:
        t = c.invoke_time
        if t < open_until:
            counts["claim-race-ready"] += 1
        if node.ready_at(t):
            open_until = max(open_until, INF if c.complete_time is None else c.complete_time)
    # claim-while-held: a sweep over time; a max-heap of the live leases' latest grant invokes (stale entries skipped)
    events: list[tuple[int, int, int, Any]] = []  # (time, 0 query / 1 update, tie, payload)
    for i, c in enumerate(claims):
        events.append((c.invoke_time, 0, i, None))
    for i, lease in enumerate(node.leases):
        events.append((lease.granted, 1, i, (lease, lease.claim.invoke_time)))
        for r in lease.renews:
            if r.type == "ok" and r.complete_time is not None:
                events.append((r.complete_time, 1, i, (lease, r.invoke_time)))
        if lease.end_at < INF:
            events.append((int(lease.end_at), 1, i, (lease, None)))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    latest_grant: dict[int, int] = {}
    ended: set[int] = set()
    heap: list[tuple[int, int]] = []
    for t, kind, _, payload in events:
        if kind == 1:
            lease, invoked = payload
            k = id(lease)
            if invoked is None:
                ended.add(k)
            elif k not in ended and invoked > latest_grant.get(k, -1):
                latest_grant[k] = invoked
                heapq.heappush(heap, (-invoked, k))
            continue
        while heap and (heap[0][1] in ended or -heap[0][0] != latest_grant[heap[0][1]]):
            heapq.heappop(heap)
        if heap and t < -heap[0][0] + ttl - uncertainty:
            counts["claim-while-held"] += 1
    # claim-after-expiry: the latest lease had lapsed
    for c in claims:
        latest = node.latest_before(c.invoke_time)
        if latest is not None and lapsed_indexed(latest, c.invoke_time, ttl, uncertainty):
            counts["claim-after-expiry"] += 1
