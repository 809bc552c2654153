"""History → coverage: how often a run reached each dangerous interleaving of the protocol.

A ``valid`` verdict only says the backend did nothing wrong *where the run
went*. This module counts, per :data:`~leasecheck.histories.vocabulary.SITUATIONS`,
how often the history went where the seed's failure modes live (a zombie
writing after a takeover, two claims racing for a READY node, a lease expiring
while the store is paused, …), so that a report can say which never happened.
Like the checker it is a pure function of the history: the ops the reader
gives, and the fault windows read from the nemesis events (which events make a
window is the catalogue's business, :mod:`leasecheck.verdict.run_verdict`;
what a window is, :mod:`leasecheck.checker.windows`). This module is the
definitions and the counts; a lease as the situations see it is
:mod:`leasecheck.checker.coverage_leases`, and a node is counted by
:mod:`leasecheck.checker.coverage_loops` (small) or
:mod:`leasecheck.checker.coverage_sweeps` (big).

Definitions (times are the history's ``time``, ns; "before t" is ``< t``):

* a *lease* is an ok claim, named by its grant: an op belongs to the latest
  lease of its node with the epoch / token of its invoke value whose claim
  completed before the op's invoke, of those its own process was granted if
  any, else of all; a ``read`` belongs to the latest lease its own process
  claimed on the node before the read's invoke. A lease *ends* when a commit or
  release of it is invoked (whatever its outcome).
* a node is *ordered by epoch* when its leases all have epochs, no two the same,
  and no claim invoked after a lease's grant got an epoch no larger than that
  lease's; otherwise (unfenced, or a duplicate-epoch / epoch-regression) it is
  *ordered by grant*.
* *newer lease* of a lease L at t: a lease of L's node whose claim completed
  before t and that has a larger epoch (ordered by epoch), or was invoked after
  L's claim completed and has another token or another claimer (ordered by
  grant; in a job queue's history, ``lease_expiry: "queue"`` under
  ``effect_fence: "lease"``, also one invoked before L's claim completed and
  granted after it: its claims are all invoked at the enqueue, so its grants
  are ordered by completion alone, as the checker's ``stale-effect`` orders
  them: whichever came first, the other's later ops were a zombie's); the
  newest such one (largest epoch; by grant: latest completion) is
  L'. An op of L invoked at t with a newer
  lease is a *zombie op*, in phase ``before-new-effect`` (no effect, commit or
  release of L' invoked before t), ``while-new-runs`` (an effect of L' but no
  commit or release invoked before t) or ``after-new-ends`` (an ok commit or
  release of L' completed before t); one invoked while L''s end is in flight
  is in none. Every zombie op counts, whatever its outcome.
* ``zombie-op-while-new-lapsed``: a zombie op (renew, effect, commit or
  release) invoked at t when L' has *lapsed*: not ended before t, no renew of
  L' invoked before t is ``info`` or completes at or after t, and t > G + ttl +
  uncertainty, G the latest completion among L''s ok claim and ok renews
  (completed before t); L' being the newest lease, no later claim was granted.
* a lease L is *surely live* at t when it is not ended before t and t < T +
  ttl − uncertainty, T the latest invoke among L's ok claim and the ok renews
  of L completed before t (the store's lease began no earlier than T): no
  store may have let it lapse yet, so an op of L sent then is no zombie's.
* ``op-in-flight-across-claim``: an ``ok`` or ``fail`` effect or commit of L
  (the op), invoked at a while L was surely live, with an ok claim of its node
  by another process (the grant) completed strictly between a and the op's
  completion. They overlap because the op was sent under a live lease and had
  not come back when the rival was granted: its check and its write straddle
  the takeover, so a store must have applied it before the grant or refused
  it. A zombie op (its lease surely lapsed at its invoke, refused at its
  check) never counts, nor one that never completed (``info``).
* ``late-write-across-claim``: such an op invoked at a ≥ T + 0.9 ttl, in the
  last tenth of its lease: the holder wrote late, as its lease was about to
  lapse, and the grant came while the write was on its way.
* ``lagging-clock-claim-on-recent-node``: an ok claim (the grant) by process
  p, invoked at a and granted at b, while a worker-clock window with a negative
  ``delta_ms`` surely held p's clock behind by d = −delta_ms throughout [a, b]
  (a victim of the window from its start to its end; for a strobe, inside one
  of its behind half-periods, :meth:`~leasecheck.checker.windows.Window.behind_throughout`),
  with g the node's latest grant before a to another process (the recent
  grant) and d > b − g. They overlap because p's clock read earlier than g
  while it claimed: a store judging the recent lease by that clock sees it
  not yet begun. A refused claim, or one granted while a strobe showed the
  true time, never counts.
* the *latest lease* of a node at t is its newest lease whose claim completed
  before t (largest epoch; by grant: latest completion). The node is READY at
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
* ``granted-before-power-loss``: a lease whose claim completed ok strictly
  between the previous power loss's restart (the end of the latest power-loss
  window ending by this one's start; the history's start if none) and a
  power-loss window's start: acknowledged in the last unsynced interval before
  the cut; each lease once.
* ``claim-after-power-loss``: a claim of a node with such a lease, invoked
  strictly between that window's end (the restart) and the start of the next
  power-loss window after it, that the store answered (ok, or fail for any reason
  but ``unavailable``: an ``error`` such as "no such node" is its answer); each claim once.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from leasecheck.checker.coverage_inside import Stops, split_stops
from leasecheck.checker.coverage_leases import count_fault_situations
from leasecheck.checker.coverage_loops import count_small_node
from leasecheck.checker.coverage_sweeps import IndexedNode, count_claims, count_zombies
from leasecheck.checker.memory import no_gc
from leasecheck.checker.windows import Window, WindowsOf
from leasecheck.histories import Header, HistoryReader, Op
from leasecheck.histories.vocabulary import SITUATIONS, Situation

NS_PER_MS = 1_000_000


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


#: a node with at most this many ops is counted by direct loops (:mod:`leasecheck.checker.coverage_loops`), a bigger
#: one by indexed sweeps (:mod:`leasecheck.checker.coverage_sweeps`): the loops' cost grows with claims × ops; a real
#: history's nodes hold ~10
SMALL_NODE_OPS = 64


def coverage(header: Header, ops: Iterable[Op], store_faults: Sequence[Window] = (), skewed_workers: Sequence[Window] = ()) -> Coverage:
    """Count every situation in a history's ops (any order).

    ``store_faults`` are the windows of store-side faults; ``skewed_workers``
    those of worker-side faults, each naming its victims (a worker pause's or
    kill's, by its role, counted by :mod:`leasecheck.checker.coverage_inside`). Small nodes (a
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
    # a queue's claims are all invoked at the enqueue: its grants cannot be ordered by invoke, only by completion (and
    # under effect_fence "lease" the checker holds a zombie's stale effects to that order: kinds_stale.crossed_effects)
    crossed = header.lease_expiry == "queue" and header.effect_fence == "lease"
    counts: Counter[str] = Counter()
    skewed_workers, stop_windows = split_stops(skewed_workers)  # worker pauses and kills: the ops they landed inside
    stops = Stops.of(stop_windows)
    with no_gc():
        for nops in nodes:
            stops.count(nops, counts)
            if len(nops) <= small_ops:
                count_small_node(nops, ttl, uncertainty, store_faults, skewed_workers, counts, crossed)
                continue
            node = IndexedNode(nops, crossed)
            count_zombies(node, counts, ttl, uncertainty)
            count_claims(node, ttl, uncertainty, counts)
            count_fault_situations(node.leases, ttl, store_faults, skewed_workers, counts,
                                   [op for op in nops if op.f == "claim"])
    return Coverage({s: counts[s] for s in SITUATIONS})


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
