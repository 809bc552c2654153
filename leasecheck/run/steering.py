"""Where the hub steers the workload: when a waiting zombie is woken, and which delivery a worker gets.

Why its own module: the recorder serves the pipes; what it answers a zombie's
wait and how it bends a delivery toward a dangerous window are the workload's
design, written here as rules on what was recorded (:mod:`leasecheck.run.takeovers`),
never on sleeps. Three windows of issue 25 are reached this way:

* a zombie waits for ``while-new-lapsed`` (the newer lease's holder silent past
  ttl + uncertainty, not yet re-claimed): a node delivered while a zombie waits on
  it is, for :data:`STALL_SHARE` of such deliveries and once per node, handed out with a stall
  (``("stall", node)``): its new holder stops heartbeating early and long, as a
  GC pause would, so its lease lapses while the zombie is there to act;
* a zombie waits for ``at-new-claim`` (its own lease surely lapsed, another's
  claim in flight): woken at that claim's invoke, its effect is in flight while the
  claim is granted;
* a worker whose clock a fault set behind is handed, for :data:`LAGGING_SHARE`
  of its asks, a duplicate of a node another worker was granted within the last
  :data:`RECENT_TTLS` ttl: a claim on a recently held node by a lagging clock.

When every live worker waits as a zombie, nobody is left to take a node over: the
wait due first then ends at once (:meth:`Steering.due`). Every draw comes from the
steering's own generator, seeded from ``--seed`` by the runner.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from leasecheck.checker.coverage_leases import RECENT_TTLS  # how recent a grant makes a node a lagging clock's pick
from leasecheck.run.deliveries import Deliveries
from leasecheck.run.takeovers import Phase, Takeovers, Wake

#: share of deliveries of a node a zombie waits on that come with a stall (see the module docstring)
STALL_SHARE = 0.3
#: share of a lagging-clock worker's asks answered with a duplicate of a recently granted node
LAGGING_SHARE = 0.9
#: history ns past a lease's last sign of life + ttl + uncertainty before it counts as lapsed (a margin for the stamp)
LAPSE_MARGIN_NS = 2_000_000


@dataclass
class Wait:
    """A stalled worker waiting for a phase of its node."""

    conn: Connection
    node: str
    key: Any
    process: int
    phase: Phase
    #: time.monotonic() after which it is told "timeout"
    deadline: float


@dataclass
class Steering:
    """The waits of stalled zombies, and the steered deliveries; fed and asked by the recorder's thread."""

    takeovers: Takeovers
    deliveries: Deliveries
    #: ttl + uncertainty, ns: a lease silent that long has surely lapsed
    lapse_ns: int
    #: is this worker slot's clock set behind now? (None: no worker-clock faults in this run)
    lagging: Callable[[int], bool] | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    waits: list[Wait] = field(default_factory=list)

    def wait(self, wait: Wait) -> None:
        self.waits.append(wait)

    def due(self, now_ns: int, now_s: float, out_s: float, alive: Callable[[Connection], bool],
            stopping: bool, live: int = 0) -> list[tuple[Connection, Wake]]:
        """The waits answered now (their phase came, was missed, or never came in time); the rest wait on.

        ``out_s``: seconds the store was out since the last call, added to every deadline. ``live``: how many
        workers are alive; when every one of them waits, nobody is left to take a node over, so the wait due
        first times out now (else the run would idle until the deadlines).
        """
        answered: list[tuple[Connection, Wake]] = []
        if live and len(self.waits) >= live:
            first = min(self.waits, key=lambda w: w.deadline)
            first.deadline = -1.0
        waits, self.waits = self.waits, []
        for w in waits:
            w.deadline += out_s
            if not alive(w.conn):
                continue
            answer = self.takeovers.wake(w.node, w.key, w.process, w.phase, now_ns, self.lapse_ns + LAPSE_MARGIN_NS)
            if answer is None and (w.deadline < now_s or stopping):
                answer = "timeout"
            if answer is None:
                self.waits.append(w)
            else:
                answered.append((w.conn, answer))
        return answered

    def lagging_duplicate(self, slot: int, process: int, now_ns: int, ttl_ns: int) -> str | None:
        """For a worker whose clock is behind, now and then: a duplicate of a node another worker was granted within
        the last :data:`RECENT_TTLS` ttl (None: the queue's own choice)."""
        if self.lagging is None or not self.lagging(slot) or self.rng.random() >= LAGGING_SHARE:
            return None
        recent = sorted(self.takeovers.recent(process, now_ns - RECENT_TTLS * ttl_ns))
        return self.deliveries.duplicate(self.rng.choice(recent)) if recent else None

    def stall(self, node: str) -> bool:
        """Should the worker ``node`` goes to now stall in it? Once per node at most (a stalled holder is a zombie that
        waits too: a chain of them would take every worker out of the run), when a zombie waits on it and the draw says so."""
        leases = self.takeovers.nodes.get(node)
        if leases is None or leases.stalled or not any(w.node == node for w in self.waits) or self.rng.random() >= STALL_SHARE:
            return False
        leases.stalled = True
        return True
