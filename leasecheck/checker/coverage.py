"""History → coverage: how often a run reached each dangerous interleaving of the protocol.

A ``valid`` verdict only says the backend did nothing wrong *where the run
went*. This module counts, per :data:`~leasecheck.histories.vocabulary.SITUATIONS`,
how often the history went where the seed's failure modes live (a zombie
writing after a takeover, two claims racing for a READY node, a lease expiring
while the store is paused, …), so that a report can say which never happened.
Like the checker it is a pure function of the history: the ops the reader
gives, and the fault windows read from the nemesis events (which events make a
window is the catalogue's business, :mod:`leasecheck.verdict.run_verdict`).

Definitions (times are the history's ``time``, ns; "before t" is ``< t``):

* a *lease* is an ok claim, named by its epoch (fenced) or its token
  (unfenced); an op belongs to the latest lease of its node with the epoch /
  token of its invoke value whose claim completed before the op's invoke; a
  ``read`` belongs to the latest lease its own process claimed on the node
  before the read's invoke. A lease *ends* when a commit or release of it is
  invoked (whatever its outcome).
* *newer lease* of a lease L at t: a lease of L's node whose claim completed
  before t and that has a larger epoch (fenced), or was invoked after L's claim
  completed with another token (unfenced); the newest such one (largest epoch;
  unfenced: latest completion) is L'. An op of L invoked at t with a newer
  lease is a *zombie op*, in phase ``before-new-effect`` (no effect, commit or
  release of L' invoked before t), ``while-new-runs`` (an effect of L' but no
  commit or release invoked before t) or ``after-new-ends`` (an ok commit or
  release of L' completed before t); one invoked while L''s end is in flight
  is in none. Every zombie op counts, whatever its outcome.
* the *latest lease* of a node at t is its newest lease whose claim completed
  before t (largest epoch; unfenced: latest completion). The node is READY at
  t when it has none, or an ok release of it completed before t.
* ``claim-race-ready``: a claim invoked before an earlier-invoked claim of its
  node completed, the node READY at that earlier claim's invoke; each later
  claim counts once.
* ``claim-while-held``: a claim invoked at t while some lease L of the node,
  claimed before t and not ended before t, has t < T + ttl − uncertainty, T
  the latest invoke among L's ok claim and ok renews completed before t.
* ``claim-after-expiry``: a claim invoked at t when the latest lease L is not
  ended before t, no renew of L invoked before t is ``info`` or completes at or
  after t, and t > G + ttl + uncertainty, G the latest completion among L's
  ok claim and ok renews.
* ``lease-expires-during-store-fault``: a lease whose deadline G + ttl (G the
  latest completion among its ok claim and the ok renews completed before that
  deadline) falls strictly inside a store-side fault window, the lease not
  ended before its deadline; each lease once.
* ``lease-held-by-skewed-worker``: a lease claimed by a victim of a worker-clock
  fault window and held at some moment of it (claim completed before the
  window's end, not ended before its start); each lease once.
"""

from __future__ import annotations

import heapq
import math
import os
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from leasecheck.checker.memory import no_gc
from leasecheck.histories import Header, HistoryReader, Op
from leasecheck.histories.format import Event
from leasecheck.histories.vocabulary import EPOCH_CARRIERS, SITUATIONS, ZOMBIE_FUNCTIONS, ZOMBIE_PHASES, Situation

INF = math.inf
NS_PER_MS = 1_000_000

#: the situation of a zombie op, by its ``f`` and its phase (an index into ZOMBIE_PHASES)
_ZOMBIE: dict[tuple[str, int], Situation] = {
    (f, i): cast(Situation, f"zombie-{f}-{phase}") for f in ZOMBIE_FUNCTIONS for i, phase in enumerate(ZOMBIE_PHASES)
}


@dataclass(frozen=True, slots=True)
class Window:
    """A fault active from ``start`` to ``end`` (ns; None: never healed), hitting ``victims`` (process numbers)."""

    start: int
    end: int | None = None
    victims: frozenset[int] = frozenset()

    @property
    def until(self) -> float:
        return INF if self.end is None else self.end


@dataclass(frozen=True)
class Coverage:
    """How many times a history reached each situation (every one of :data:`SITUATIONS` is a key)."""

    counts: Mapping[Situation, int] = field(default_factory=lambda: dict.fromkeys(SITUATIONS, 0))

    def __getitem__(self, situation: Situation) -> int:
        return self.counts[situation]

    @property
    def reached(self) -> tuple[Situation, ...]:
        """The situations that happened at least once, in vocabulary order."""
        return tuple(s for s in SITUATIONS if self.counts[s])

    def missing(self, applicable: Iterable[str]) -> list[Situation]:
        """Those of ``applicable`` that never happened, in vocabulary order."""
        wanted = set(applicable)
        return [s for s in SITUATIONS if s in wanted and not self.counts[s]]

    def summary(self, applicable: Iterable[str]) -> str:
        """One line: ``coverage: 16/18 situations reached; never: a, b``."""
        wanted = [s for s in SITUATIONS if s in set(applicable)]
        never = self.missing(wanted)
        line = f"coverage: {len(wanted) - len(never)}/{len(wanted)} situations reached"
        return line + (f"; never: {', '.join(never)}" if never else "")

    def to_json(self) -> dict[str, int]:
        """Every situation's count, in vocabulary order."""
        return {s: self.counts[s] for s in SITUATIONS}


@dataclass(slots=True, eq=False)
class _Lease:
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


def _key(op: Op) -> Any:
    """A lease's name in an op: its epoch, or its token when the backend has no fencing token."""
    return op.epoch if op.epoch is not None else ("token", str(op.token))


def _granted_before(index: tuple[list[int], list[_Lease]] | None, t: int) -> _Lease | None:
    """The latest lease of ``index`` (grant times, leases) granted before t."""
    if index is None:
        return None
    i = bisect_left(index[0], t)
    return index[1][i - 1] if i else None


class _Node:
    """One node's leases, indexed for the questions the situations ask at a time t."""

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops
        granted = sorted((op for op in ops if op.f == "claim" and op.type == "ok" and op.complete_time is not None),
                         key=lambda op: (op.complete_time, op.index))
        self.leases = [_Lease(op, _key(op), op.epoch, op.complete_time) for op in granted if op.complete_time is not None]
        self.fenced = any(lease.epoch is not None for lease in self.leases)
        self.granted_at = [lease.granted for lease in self.leases]
        # the latest lease among the first i+1 grants: largest epoch (fenced), else the last
        self.latest: list[_Lease | None] = []
        best: _Lease | None = None
        best_rank: float = -INF
        for i, lease in enumerate(self.leases):
            rank = lease.epoch if self.fenced else i
            if rank is not None and rank > best_rank:
                best, best_rank = lease, rank
            self.latest.append(best)
        # leases by their name in an op, and by the process that claimed them: (grant times, leases), by grant
        by_key: dict[Any, tuple[list[int], list[_Lease]]] = defaultdict(lambda: ([], []))
        by_process: dict[int, tuple[list[int], list[_Lease]]] = defaultdict(lambda: ([], []))
        for lease in self.leases:
            for index in (by_key[lease.key], by_process[lease.claim.process]):
                index[0].append(lease.granted)
                index[1].append(lease)
        #: every op that belongs to a lease and may be a zombie op, with its lease
        self.owned: list[tuple[Op, _Lease]] = []
        for op in ops:
            if op.f in EPOCH_CARRIERS:
                owner = _granted_before(by_key.get(_key(op)), op.invoke_time)
                if owner is not None:
                    self._attach(op, owner)
                    self.owned.append((op, owner))
            elif op.f == "read":
                owner = _granted_before(by_process.get(op.process), op.invoke_time)
                if owner is not None:
                    self.owned.append((op, owner))
        for lease in self.leases:
            lease.index_renews()

    @staticmethod
    def _attach(op: Op, lease: _Lease) -> None:
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

    def latest_before(self, t: int) -> _Lease | None:
        """The node's latest lease whose claim completed before t."""
        i = bisect_left(self.granted_at, t)
        return self.latest[i - 1] if i else None

    def newer(self, lease: _Lease, t: int) -> _Lease | None:
        """The newest lease that replaced ``lease`` before t (see the module's definitions), or None."""
        if lease.epoch is not None:
            newest = self.latest_before(t)
            if newest is not None and newest.epoch is not None and newest.epoch > lease.epoch:
                return newest
            return None
        i = bisect_left(self.granted_at, t) - 1
        while i >= 0 and self.leases[i].granted > lease.granted:
            other = self.leases[i]
            if other.claim.invoke_time > lease.granted and other.key != lease.key:
                return other
            i -= 1
        return None

    def ready_at(self, t: int) -> bool:
        latest = self.latest_before(t)
        return latest is None or latest.released_ok_at < t


def _phase(new: _Lease, t: int) -> int | None:
    """Where the newer lease was at t: an index into ZOMBIE_PHASES, or None while its end is in flight."""
    if new.ended_ok_at < t:
        return 2
    if new.end_at < t:
        return None
    return 1 if new.effect_at < t else 0


def _zombies(node: _Node, counts: Counter[str]) -> None:
    for op, lease in node.owned:
        t = op.invoke_time
        new = node.newer(lease, t)
        if new is None:
            continue
        phase = _phase(new, t)
        if phase is not None:
            counts[_ZOMBIE[op.f, phase]] += 1


def _claims(node: _Node, ttl: float, uncertainty: float, counts: Counter[str]) -> None:
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
    # claim-after-expiry
    for c in claims:
        t = c.invoke_time
        latest = node.latest_before(t)
        if latest is None or latest.end_at < t:
            continue
        g: float = latest.granted
        k = bisect_left(latest.renew_invokes, t)
        if k:
            if latest.renew_blocks[k - 1] >= t:
                continue
            g = max(g, latest.renew_oks[k - 1])
        if t > g + ttl + uncertainty:
            counts["claim-after-expiry"] += 1


def _deadline(lease: _Lease, ttl: float) -> float:
    """G + ttl, G the latest completion among the ok claim and the ok renews completed before that deadline."""
    g: float = lease.granted
    for done in sorted(r.complete_time for r in lease.renews if r.type == "ok" and r.complete_time is not None):
        if done >= g + ttl:
            break
        g = max(g, done)
    return g + ttl


def _faults(leases: Sequence[_Lease], ttl: float, store: Sequence[Window], skewed: Sequence[Window], counts: Counter[str]) -> None:
    if store:
        for lease in leases:
            deadline = _deadline(lease, ttl)
            if lease.end_at >= deadline and any(w.start < deadline < w.until for w in store):
                counts["lease-expires-during-store-fault"] += 1
    if skewed:
        for lease in leases:
            p = lease.claim.process
            if any(p in w.victims and lease.granted < w.until and lease.end_at > w.start for w in skewed):
                counts["lease-held-by-skewed-worker"] += 1


#: a node with at most this many ops is counted by :func:`_small_node`'s direct loops, a bigger one by the
#: indexed sweeps of :class:`_Node` (the loops' cost grows with claims × ops; a real history's nodes hold ~10)
SMALL_NODE_OPS = 64


def _small_node(ops: list[Op], ttl: float, uncertainty: float, store: Sequence[Window], skewed: Sequence[Window],
                counts: Counter[str]) -> None:
    """A small node's situations, straight from the definitions above: a loop over its few leases per question.

    Counts exactly what :class:`_Node`'s sweeps count (the tests hold the two
    to each other on generated, mutated and hand-written histories); it only
    skips their indexes, which cost more than they save on a node of a few
    leases. A node with one claim and no fault window is done after the first
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
    granted.sort(key=lambda op: (op.complete_time, op.index))
    leases = [_Lease(op, _key(op), op.epoch, cast(int, op.complete_time)) for op in granted]
    fenced = any(lease.epoch is not None for lease in leases)

    def latest_before(t: float) -> _Lease | None:
        best: _Lease | None = None
        best_rank: float = -INF
        for i, lease in enumerate(leases):
            if lease.granted >= t:
                break
            rank = lease.epoch if fenced else i
            if rank is not None and rank > best_rank:
                best, best_rank = lease, rank
        return best

    owned: list[tuple[Op, _Lease]] = []
    if leases:
        for op in ops:
            f = op.f
            if f == "claim":
                continue
            t = op.invoke_time
            owner: _Lease | None = None
            if f in EPOCH_CARRIERS:
                key = _key(op)
                for lease in leases:
                    if lease.granted >= t:
                        break
                    if lease.key == key:
                        owner = lease
                if owner is not None:
                    _Node._attach(op, owner)
                    owned.append((op, owner))
            elif f == "read":
                for lease in leases:
                    if lease.granted >= t:
                        break
                    if lease.claim.process == op.process:
                        owner = lease
                if owner is not None:
                    owned.append((op, owner))
    # zombie ops: an op of a lease that a newer one replaced before the op's invoke
    if len(leases) > 1:
        for op, lease in owned:
            t = op.invoke_time
            new: _Lease | None = None
            if lease.epoch is not None:
                newest = latest_before(t)
                if newest is not None and newest.epoch is not None and newest.epoch > lease.epoch:
                    new = newest
            else:
                for other in reversed(leases):
                    if other.granted >= t:
                        continue
                    if other.granted <= lease.granted:
                        break
                    if other.claim.invoke_time > lease.granted and other.key != lease.key:
                        new = other
                        break
            if new is not None:
                phase = _phase(new, t)
                if phase is not None:
                    counts[_ZOMBIE[op.f, phase]] += 1
    if claims:
        claims.sort(key=lambda op: (op.invoke_time, op.index))
        open_until = -INF
        for c in claims:
            t = c.invoke_time
            if t < open_until:
                counts["claim-race-ready"] += 1
            latest = latest_before(t)
            if latest is None or latest.released_ok_at < t:  # READY at t
                open_until = max(open_until, INF if c.complete_time is None else c.complete_time)
            # claim-while-held: a lease claimed before t, not ended before t, its latest grant invoke + ttl - u after t
            for lease in leases:
                if lease.granted >= t:
                    break
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
            # claim-after-expiry: the latest lease not ended, no renew of it pending at t, G + ttl + u before t
            if latest is None or latest.end_at < t:
                continue
            g: float = latest.granted
            pending = False
            for r in latest.renews:
                if r.invoke_time < t:
                    done = r.complete_time
                    if r.type == "info" or done is None or done >= t:
                        pending = True
                        break
                    if r.type == "ok" and done > g:
                        g = done
            if not pending and t > g + ttl + uncertainty:
                counts["claim-after-expiry"] += 1
    _faults(leases, ttl, store, skewed, counts)


def coverage(header: Header, ops: Iterable[Op], store_faults: Sequence[Window] = (), skewed_workers: Sequence[Window] = ()) -> Coverage:
    """Count every situation in a history's ops (any order).

    ``store_faults`` are the windows of store-side faults; ``skewed_workers``
    those of worker-clock faults, each naming its victims. Small nodes (a
    real history's) are direct loops over their few leases, big ones one pass
    after sorting with bisects and one heap: a million real-shaped ops take
    about a second.
    """
    by_node: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by_node[op.node].append(op)
    return node_coverage(header, by_node.values(), store_faults, skewed_workers)


def node_coverage(header: Header, nodes: Iterable[list[Op]], store_faults: Sequence[Window] = (),
                  skewed_workers: Sequence[Window] = (), small_ops: int = SMALL_NODE_OPS) -> Coverage:
    """:func:`coverage` of ops already grouped by node (each list one node's ops, any order).

    A node of at most ``small_ops`` ops is counted by direct loops, a bigger
    one by indexed sweeps; the tests set ``small_ops`` to hold the two to each other.
    """
    ttl = header.ttl_ms * NS_PER_MS
    uncertainty = header.clock_uncertainty_ms * NS_PER_MS
    counts: Counter[str] = Counter()
    with no_gc():
        for nops in nodes:
            if len(nops) <= small_ops:
                _small_node(nops, ttl, uncertainty, store_faults, skewed_workers, counts)
                continue
            node = _Node(nops)
            _zombies(node, counts)
            _claims(node, ttl, uncertainty, counts)
            _faults(node.leases, ttl, store_faults, skewed_workers, counts)
    return Coverage({s: counts[s] for s in SITUATIONS})


#: windows(nemesis events) -> (store-side fault windows, worker-clock fault windows)
WindowsOf = Callable[[Sequence[Event]], tuple[Sequence[Window], Sequence[Window]]]


def coverage_source(source: str | os.PathLike[str] | Iterable[bytes | str], windows: WindowsOf) -> tuple[Header, Coverage]:
    """Read a history (a path, or lines) and count its situations; raises ``HistoryError`` on bad input.

    ``windows`` makes the fault windows from the nemesis events (the
    catalogue knows which events are which: ``leasecheck.verdict.run_verdict.fault_windows``).
    """
    with no_gc():
        reader = HistoryReader(source)
        ops = list(reader.ops())
        store, skewed = windows(reader.nemesis)
        return reader.header, coverage(reader.header, ops, store, skewed)
