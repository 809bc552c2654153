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
* a worker whose clock a fault set behind is handed, at every ask while it lags, a
  node another worker was granted within the last :data:`RECENT_TTLS` ttl (under
  the least a clock fault sets a clock behind) that a claim can have now, released
  or lapsed (``("lagging", node)``): a claim granted while its clock reads before
  that grant. With none, it contends a node granted lately whose holder went
  silent and whose lease lapses within a quarter ttl (a late writer's, or a
  stalled one's); with none of those either it asks again at once. Meanwhile,
  while fewer than :data:`STOCK` such nodes are there for it, a delivery to another
  worker is given back at once (``("release", node)``): claimed, released (not
  handed out again by the queue: it is the lagging clock's), and claimable by the
  lagging clock a few ms later (the others ask for a node only
  two or three times a second, so the stock is made ahead of its asks). Its skew
  lasts 1-3 ttl, so it never waits long for a lease to lapse. Whatever it was doing when its clock went behind, it is
  made free: a wait of its own (a zombie's, a late writer's hold) ends at once
  (:meth:`Steering.due`), and the worker gives back the lease it was working on
  (:mod:`leasecheck.run.workload`).

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
#: a zombie's phases a coverage goal counts (``zombie-OP-PHASE``), which its wait may be moved among (:meth:`Steering.wait`)
GOAL_PHASES: tuple[Phase, ...] = ("before-new-effect", "while-new-runs", "after-new-ends")
#: how recently another worker's grant makes a node a lagging clock's pick, in ttls: under the least a clock fault sets
#: a clock behind (``leasecheck.nemesis.clock``: 2-10 ttl), with room for the claim to wait for a strobe's behind
#: half-period (at most 100 ms) and be granted, so the claim reads before that grant
RECENT_TTLS = 1.8
#: how long a late writer's node waits for a contender, in ttls (past it the lease has lapsed with nobody there)
LATE_WAIT_TTLS = 1.5
#: a lagging clock with no claimable pick contends a node granted within this many ttls whose holder has been silent
#: this many ttls: its lease lapses (ttl + uncertainty past its last sign of life) within a quarter ttl, and the claim
#: then is within 1.1 ttl of that grant, less than the least a clock fault sets a clock behind
SILENT_GRANTED_TTLS, SILENT_QUIET_TTLS = 0.9, 0.75
#: while a worker's clock is behind, other workers' deliveries are given back at once until this many claimable nodes
#: granted within :data:`STOCK_TTLS` ttl (fresh enough to be picked, see :data:`RECENT_TTLS`) are there for it
STOCK, STOCK_TTLS = 2, 1.0
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
    #: the worker's slot (its clock's key): a wait of a worker whose clock a fault set behind ends at once
    slot: int | None = None


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
    #: the worker slots whose clock was behind when they last asked, and their process numbers: deliveries to other
    #: workers are given back for them (:meth:`tagged`) while they lag
    behind: dict[int, int] = field(default_factory=dict)
    #: the situations the run's coverage goal is short of now (the runner's deadline; none without a goal)
    short: Callable[[], frozenset[str]] = frozenset

    def late(self, node: str, process: int, now_s: float, ttl_s: float) -> None:
        """``process`` was granted ``node`` and will write late in that lease: the next other worker to ask contends."""
        self.lates[node] = (process, now_s + LATE_WAIT_TTLS * ttl_s)

    def wait(self, wait: Wait) -> None:
        """Hold ``wait`` until its phase. A zombie's phase among :data:`GOAL_PHASES` the goal has enough of is moved,
        by the generator, to one it is short of (:attr:`short`): drawn alike, the phases after a takeover's end
        came least (a new holder paused or killed never ends), and an until-covered gate hit its cap short of them."""
        shorts = sorted({p for p in GOAL_PHASES for s in self.short() if s.startswith("zombie-") and s.endswith(p)})
        if wait.phase in GOAL_PHASES and shorts and wait.phase not in shorts:
            wait.phase = self.rng.choice(shorts)
        self.waits.append(wait)

    def due(self, now_ns: int, now_s: float, out_s: float, alive: Callable[[Connection], bool],
            stopping: bool, live: int = 0) -> list[tuple[Connection, Wake]]:
        """The waits answered now (their phase came, was missed, or never came in time); the rest wait on.

        ``out_s``: seconds the store was out since the last call, added to every deadline. ``live``: how many
        workers are alive; when every one of them waits, nobody is left to take a node over, so a zombie's wait
        (the one due first; else the wait due first) times out now (else the run would idle until the deadlines).
        Not while a contender waits for a lapse: time alone brings it, and its claim moves the rest on (ending a
        wait then cut a late write's window: the contender claimed before the lapse, refused, or the late write
        went before the rival's grant).
        """
        answered: list[tuple[Connection, Wake]] = []
        if live and len(self.waits) >= live and not any(w.phase == "at-lapse" for w in self.waits):
            first = min(self.waits, key=lambda w: (w.phase not in PHASES, w.deadline))
            first.deadline = -1.0
        waits, self.waits = self.waits, []
        for w in waits:
            w.deadline += out_s
            if not alive(w.conn):
                continue
            answer = self.takeovers.wake(w.node, w.key, w.process, w.phase, now_ns, self.lapse_ns + LAPSE_MARGIN_NS)
            if answer is None and self._freed(w):
                answer = "timeout"
            if answer is None and (w.deadline < now_s or stopping):
                answer = "timeout"
            if answer is None:
                self.waits.append(w)
            else:
                answered.append((w.conn, answer))
        return answered

    def _freed(self, w: Wait) -> bool:
        """Should ``w`` end now because its worker's clock went behind? Yes for a zombie's wait and a late writer's hold
        (the worker is then free to claim while its skew shows); never for a contender's (its claim is the point)."""
        return w.phase != "at-lapse" and w.slot is not None and self.lagging is not None and self.lagging(w.slot)

    def steered(self, slot: int, process: int, now_ns: int, ttl_ns: int, now_s: float) -> str | tuple[str, str] | None:
        """A steered delivery for worker ``slot`` (its process number ``process``) asking now, or None (the queue's own).

        ``("contend", node)``: a late writer's node, to claim the moment its lease lapses; ``("lagging", node)``: for a
        worker whose clock is behind now, a node another worker was granted within :data:`RECENT_TTLS` ttl that a claim
        can have now, else ``("contend", node)`` on a node granted lately whose lease lapses within a quarter ttl, else
        ``""`` (ask again at once; the next delivery to another worker is given back for it, see :meth:`tagged`)."""
        self.behind.pop(slot, None)
        if self.lagging is not None and self.lagging(slot):
            self.behind[slot] = process
            return self._for_lagging(process, now_ns, ttl_ns)
        for node, (holder, deadline) in list(self.lates.items()):
            if deadline < now_s:
                del self.lates[node]
            elif holder != process:
                del self.lates[node]
                return ("contend", self.deliveries.duplicate(node))
        return None

    def _for_lagging(self, process: int, now_ns: int, ttl_ns: int) -> str | tuple[str, str]:
        """What a worker whose clock is behind is handed (see :meth:`steered`): a node whose claim is granted at once
        comes first, the skew lasting only 1-3 ttl."""
        lapse = self.lapse_ns + LAPSE_MARGIN_NS
        claimable = sorted(self.takeovers.claimable(process, now_ns - int(RECENT_TTLS * ttl_ns), now_ns, lapse))
        if claimable:
            return ("lagging", self.deliveries.duplicate(self.rng.choice(claimable)))
        quiet = int(SILENT_QUIET_TTLS * ttl_ns)
        silent = sorted(self.takeovers.silent(process, now_ns - int(SILENT_GRANTED_TTLS * ttl_ns), now_ns, quiet))
        if silent:
            node = self.rng.choice(silent)
            self.lates.pop(node, None)  # a late writer's: its one contender
            return ("contend", self.deliveries.duplicate(node))
        return ""  # none yet: ask again at once; deliveries to other workers are given back for it (see tagged)

    def _short_for_lagging(self, now_ns: int, ttl_ns: int) -> bool:
        """Is a worker whose clock is behind short of claimable nodes (fewer than :data:`STOCK` granted lately)?"""
        for slot, process in list(self.behind.items()):
            if self.lagging is None or not self.lagging(slot):
                del self.behind[slot]
                continue
            since = now_ns - int(STOCK_TTLS * ttl_ns)
            if len(self.takeovers.claimable(process, since, now_ns, self.lapse_ns + LAPSE_MARGIN_NS)) < STOCK:
                return True
        return False

    def tagged(self, node: str, now_ns: int = 0, ttl_ns: int = 0) -> str | tuple[str, str]:
        """The queue's delivery of ``node`` to a worker whose clock is not behind (see :meth:`steered`) at history time
        ``now_ns``, steered: with a stall (see :meth:`stall`), or, while a lagging clock is short of nodes to claim, as
        a release (``("release", node)``: claimed and given back at once, claimable by it a few ms after this grant)."""
        if self.stall(node):
            return ("stall", node)
        if self.behind and self._short_for_lagging(now_ns, ttl_ns):
            return ("release", node)
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
