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
* a holder that writes late in its lease (:mod:`leasecheck.run.workload`: no
  heartbeat, its effect or commit sent in the lease's last tenth) says so as soon
  as it was granted (:meth:`Steering.late`); the next other worker that asks for a
  node gets it as a contender (``("contend", node)``), waits for the lease to lapse
  (``at-lapse``) and claims the moment it does, while the late write is held until
  that claim is granted (``rival-granted``): the write in flight across a rival's
  grant (``late-write-across-claim``);
* a worker whose clock a fault set behind is that contender first; else, for
  :data:`LAGGING_SHARE` of its asks, it is handed a node another worker was
  granted within the last :data:`RECENT_TTLS` ttl (the least a clock fault sets a
  clock behind) and that a claim can have now, released or lapsed
  (``("lagging", node)``): a claim granted while its clock reads before that grant.

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

from leasecheck.run.deliveries import Deliveries
from leasecheck.run.takeovers import PHASES, Phase, Takeovers, Wake

#: share of deliveries of a node a zombie waits on that come with a stall (see the module docstring)
STALL_SHARE = 0.3
#: share of a lagging-clock worker's asks answered with a duplicate of a recently granted, claimable node
LAGGING_SHARE = 0.9
#: how recently another worker's grant makes a node a lagging clock's pick, in ttls: the least a clock fault sets a
#: clock behind (``leasecheck.nemesis.clock``: 2-10 ttl), so a claim made now reads before that grant
RECENT_TTLS = 2
#: how long a late writer's node waits for a contender, in ttls (past it the lease has lapsed with nobody there)
LATE_WAIT_TTLS = 1.5
#: a lagging clock with no claimable pick contends a node granted within this many ttls whose holder missed a heartbeat
#: (silent this many ttls): it claims at the lapse, about a ttl past the holder's last sign of life, so within 1.4 ttl
#: of that grant, less than the least a clock fault sets a clock behind
SILENT_GRANTED_TTLS, SILENT_QUIET_TTLS = 0.7, 0.45
#: for this long after a late writer said so (ttls), only a lagging clock may contend its node, while one is behind
RESERVED_TTLS = 0.6
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
    #: the nodes of late writers still without a contender: node -> (the holder's process, time.monotonic() deadline)
    lates: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: the worker slots whose clock was behind when they last asked (a late write is then steered for them to contend)
    behind: set[int] = field(default_factory=set)

    def late(self, node: str, process: int, now_s: float, ttl_s: float) -> None:
        """``process`` was granted ``node`` and will write late in that lease: the next other worker to ask contends."""
        self.lates[node] = (process, now_s + LATE_WAIT_TTLS * ttl_s)

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

    def steered(self, slot: int, process: int, now_ns: int, ttl_ns: int, now_s: float) -> str | tuple[str, str] | None:
        """A steered delivery for worker ``slot`` (its process number ``process``) asking now, or None (the queue's own).

        ``("contend", node)``: a late writer's node, to claim the moment its lease lapses; ``("lagging", node)``: for a
        worker whose clock is behind now and then, a node another worker was granted within :data:`RECENT_TTLS` ttl
        that a claim can have now, else ``("contend", node)`` on a node granted lately whose holder went silent."""
        lagging = self.lagging is not None and self.lagging(slot)
        (self.behind.add if lagging else self.behind.discard)(slot)
        reserved = not lagging and self._someone_behind()  # a late write's contender should be the lagging clock
        for node, (holder, deadline) in list(self.lates.items()):
            if deadline < now_s:
                del self.lates[node]
            elif holder != process and not (reserved and deadline - now_s > (LATE_WAIT_TTLS - RESERVED_TTLS) * ttl_ns / 1e9):
                del self.lates[node]
                return ("contend", self.deliveries.duplicate(node))
        if not lagging or self.rng.random() >= LAGGING_SHARE:
            return None
        lapse = self.lapse_ns + LAPSE_MARGIN_NS
        claimable = sorted(self.takeovers.claimable(process, now_ns - RECENT_TTLS * ttl_ns, now_ns, lapse))
        if claimable:
            return ("lagging", self.deliveries.duplicate(self.rng.choice(claimable)))
        quiet = int(SILENT_QUIET_TTLS * ttl_ns)
        silent = sorted(self.takeovers.silent(process, now_ns - int(SILENT_GRANTED_TTLS * ttl_ns), now_ns, quiet))
        if silent:
            return ("contend", self.deliveries.duplicate(self.rng.choice(silent)))
        return ""  # none yet: ask again at once; the next delivery to another worker is steered for it (see tagged)

    def _someone_behind(self) -> bool:
        """Is a worker that asked lately still behind?"""
        self.behind = {slot for slot in self.behind if self.lagging is not None and self.lagging(slot)}
        return bool(self.behind)

    def tagged(self, node: str) -> str | tuple[str, str]:
        """The queue's delivery of ``node``, steered: with a stall (see :meth:`stall`), or, while a lagging clock waits
        for one and none is pending, as a late write (``("late", node)``: its holder writes late, and is contended) or a
        release (``("release", node)``: claimed and given back at once, claimable by the lagging clock next)."""
        if self.stall(node):
            return ("stall", node)
        if not self.lates and self.behind and self._someone_behind():
            return (self.rng.choice(("late", "release")), node)
        return node

    def stall(self, node: str) -> bool:
        """Should the worker ``node`` goes to now stall in it? Once per node at most (a stalled holder is a zombie that
        waits too: a chain of them would take every worker out of the run), when a zombie waits on it and the draw says so."""
        leases = self.takeovers.nodes.get(node)
        zombie = any(w.node == node and w.phase in PHASES for w in self.waits)
        if leases is None or leases.stalled or not zombie or self.rng.random() >= STALL_SHARE:
            return False
        leases.stalled = True
        return True
