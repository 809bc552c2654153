"""Running faults on a seeded schedule — several at once — and healing all of them on any exit."""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts.protocol import HostUnreachable
from leasecheck.nemesis.catalogue import FaultKind
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.protocol import FAULT_FAILED, Fault, Outlasting

#: the share of its drawn wait a fault waits while the run wants its evidence sooner (:attr:`Nemesis.hurry`): three
#: tenths, so a gate's pause and kill (every 5 s) come every 1.5 s on average until their situations are reached (an
#: eighth, from the run's start, kept two pauses on nearly always: a default gate's SQLite store locked by a paused
#: writer most of its 40 s, 8 nodes claimed in all, and the windows after a takeover's end never reached)
HURRIED = 0.3
#: how often a due heal that waits for its evidence (:class:`~leasecheck.nemesis.protocol.Outlasting`) asks again, s
OUTLAST_POLL_S = 0.05

log = logging.getLogger("leasecheck.nemesis")

#: record(f, value): write one nemesis event into the history (what it returns, e.g. the event's index, is ignored)
Record = Callable[[str, Any], object]


@dataclass
class Nemesis:
    """Every ``interval_s`` (± half, from the seed) start a fault chosen from ``kinds``
    (catalogue rows) and heal it its row's duration later; up to ``max_active`` faults overlap.

    Kinds are dealt like cards: every kind once, in a shuffled order, then a new
    shuffle. A run's verdict needs every requested fault started and healed
    (docs/contracts/run-verdict.md), so a kind that could not start at its turn (no
    victim yet, ``max_active`` reached, or what it holds held) keeps its turn for the next tick;
    uniform draws would leave one of four kinds out of a dozen ticks one run
    in eight. Every event's value names the fault (``"fault": name``), so
    kinds that share an event name (``pause`` of a worker or of the store) are
    told apart.

    A kind that ``holds`` something (the store's server or container) starts only while no
    other fault holding the same is on or still healing: the ticks start faults outside
    the lock while heals go on on their own thread, and a container paused while its kill
    was being undone (or killed, or cut off) answers the engine's 409, ending the run.

    Each row's factory makes the fault from ``context`` (the run's workers,
    clocks, network and store) and the tick's generator; the row also names
    the events written at start and heal. The schedule knows nothing else
    about any fault.

    ``hurry(kind)`` says whether the run wants ``kind``'s evidence sooner (an
    ``--until-covered`` run past its time limit while a situation the fault exists
    for or seeks is short: :meth:`leasecheck.run.deadline.Deadline.hurry`): the
    wait before the next fault is then :data:`HURRIED` of its draw, for the kind
    dealt next (any kind, between rounds). The draws are the same either way, so
    the schedule still follows the seed; only its pace follows the evidence, and
    ``repace()`` makes it look again at once when that changes. A run without
    ``--until-covered`` is never hurried.

    A fault whose start or heal loses its host (:class:`~leasecheck.hosts.protocol.HostUnreachable`: a deployment's
    host whose connection dropped mid-run, a Docker engine gone) does not end the run: its :data:`FAULT_FAILED`
    event says which and why, a start that failed is undone as far as it can be, and a fault whose heal failed stays in ``unhealed`` (and in what ``on_change`` is told, so the
    state file keeps it for ``leasecheck heal``); ``heal_all`` tries it once more. The run verdict reads the events.

    ``on_change(active)`` is told the active faults whenever they change (the
    runner keeps a state file from it, so ``leasecheck heal`` can undo them
    even after the harness was SIGKILLed). ``heal_all()`` undoes whatever is
    active: the runner calls it on normal exit, Ctrl-C and exceptions.
    """

    kinds: Sequence[FaultKind]
    interval_s: float
    context: FaultContext
    record: Record
    rng: random.Random
    max_active: int = 2
    #: the mean wait before the first fault (± half, from the seed), if shorter than ``interval_s``: the
    #: runner makes it a third of a short run's time limit, so that a 5 s run's first fault starts in it
    first_interval_s: float | None = None
    #: does the run want this kind's evidence sooner? (see the class; never, unless the runner says so)
    hurry: Callable[[FaultKind], bool] = lambda kind: False
    on_change: Callable[[list[Fault]], None] = lambda active: None
    active: list[Fault] = field(default_factory=list)
    #: faults whose heal failed (their host lost): still on as far as anyone knows
    unhealed: list[Fault] = field(default_factory=list)
    started: int = 0
    error: BaseException | None = None
    #: the row each active fault was made from, by identity (a dataclass fault is not hashable)
    _kind_of: dict[int, FaultKind] = field(default_factory=dict)
    _heals: list[tuple[float, int, Fault]] = field(default_factory=list)
    _order: Any = field(default_factory=itertools.count)
    #: the kinds still to deal in this round, next first
    _deck: list[FaultKind] = field(default_factory=list)
    #: store faults started and not yet healed to the end (a killed store's heal is its restart): see store_out
    _store_faults: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    #: set to make the loop look again now (a heal_all, a change of pace)
    _nudge: threading.Event = field(default_factory=threading.Event)
    #: set when a heal is added (or all are being healed): the healer looks again
    _healed: threading.Event = field(default_factory=threading.Event)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    #: held by a fault's start and by a heal's undo, so the two never run at once: a failover started while a
    #: partition's heal rebuilt the deposed primary killed the member the rebuild was copying from (ci: postgres-standby,
    #: seed 1, the run's last heal met a failover starting; pg_basebackup timed out). Taken after ``_lock``, never
    #: before it: a start holds it alone, so the lock stays free for the questions asked meanwhile
    _changing: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _healer: threading.Thread | None = None

    def start(self) -> None:
        if not self.kinds:
            return
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._healer = threading.Thread(target=self._heal_due, name="nemesis-heals", daemon=True)
        self._thread.start()
        self._healer.start()

    def _run(self) -> None:
        """The ticks: deal the next kind and make, then start, its fault. Outside the lock: a factory may wait for its
        moment (a pause aimed inside an op waits up to a ttl for one) while the heals go on on their own thread."""
        try:
            # the next fault is due at ``ticked + wait * pace``: ``wait`` drawn at the tick, the pace read at each look
            ticked, wait = time.monotonic(), self.rng.uniform(0.5, 1.5) * min(self.interval_s, self.first_interval_s or self.interval_s)
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= ticked + wait * self._pace():
                    # a fixed number of draws per tick, so the schedule's choices never
                    # depend on timing (whether the last fault had healed yet)
                    ticked, wait = now, self.rng.uniform(0.5, 1.5) * self.interval_s
                    tick = random.Random(self.rng.getrandbits(64))
                    with self._lock:
                        if not self._deck:
                            self._deck = list(self.kinds)
                            tick.shuffle(self._deck)
                        kind = self._deck[0]
                        room = len(self.active) < self.max_active and not self._held(kind)
                    if room and self._inflict(kind, tick):
                        with self._lock:
                            self._deck.pop(0)
                self._nudge.wait(max(0.0, ticked + wait * self._pace() - time.monotonic()))
                self._nudge.clear()
        except BaseException as e:  # reported by the runner, which heals all
            self.error = e

    def _heal_due(self) -> None:
        """The heals, each when due (its row's duration after its fault started), whatever a tick is waiting for."""
        try:
            while not self._stop.is_set():
                with self._lock:
                    now = time.monotonic()
                    while self._heals and self._heals[0][0] <= now:
                        _, _, fault = heapq.heappop(self._heals)
                        if isinstance(fault, Outlasting) and fault.awaiting():  # its evidence has not come: not yet
                            heapq.heappush(self._heals, (now + OUTLAST_POLL_S, next(self._order), fault))
                            continue
                        self._heal(fault)
                    due = self._heals[0][0] if self._heals else None
                self._healed.wait(None if due is None else max(0.0, due - time.monotonic()))
                self._healed.clear()
        except BaseException as e:
            self.error = e

    def _held(self, kind: FaultKind) -> bool:
        """Does an active fault hold what ``kind`` holds? Asked under the lock, which every heal holds to its end, so
        a fault being healed still counts (``_heal`` takes it off ``active`` first); one whose heal failed too."""
        return kind.holds is not None and any(self._kind_of[id(f)].holds == kind.holds for f in self.active + self.unhealed)

    def _pace(self) -> float:
        """The share of a drawn wait the next fault waits: :data:`HURRIED` when the run wants the evidence of the kind
        dealt next (of any kind, between rounds) sooner, else 1."""
        upcoming = self._deck[:1] or self.kinds
        return HURRIED if any(self.hurry(kind) for kind in upcoming) else 1.0

    def repace(self) -> None:
        """Look again at the pace now (the runner's deadline calls it when what it hurries changes)."""
        self._nudge.set()

    def _inflict(self, kind: FaultKind, rng: random.Random) -> bool:
        """Start a fault of ``kind`` (its heal due its row's duration from then); False when it has no victim now.
        Started once ``heal_all`` began, it is healed at once."""
        fault = kind.make(self.context, rng)
        if fault is None:
            return False
        try:
            with self._changing:
                value = fault.start()
        except HostUnreachable as e:
            self._start_failed(kind, fault, e)
            return True  # dealt: its turn is over, a host that stopped answering is not asked again at every tick
        with self._lock:
            self.active.append(fault)
            self._kind_of[id(fault)] = kind
            self._store_faults += kind.on_store
            self.started += 1
            self.record(kind.events[0], {"fault": kind.name, **value})
            heapq.heappush(self._heals, (time.monotonic() + kind.duration_s(self.context, rng), next(self._order), fault))
            self.on_change(list(self.active))
            if self._stop.is_set():
                self._heal(fault)
        self._healed.set()
        return True

    def _heal(self, fault: Fault) -> None:
        # called under the lock only (see _held)
        # by identity, never ==: two pauses of one worker are equal dataclasses, and healing the later one must
        # not take the earlier one off the list (it would never be healed, and heal_all would meet a stranger)
        at = next((i for i, active in enumerate(self.active) if active is fault), None)
        if at is None:
            return
        del self.active[at]
        kind = self._kind_of.pop(id(fault))
        try:
            with self._changing:
                value = fault.heal()
        except HostUnreachable as e:
            self._lost(kind, "heal", e)
            self._keep_unhealed(kind, fault)
            value = None
        finally:
            self._store_faults -= kind.on_store
        if value is not None:
            self.record(kind.events[1], {"fault": kind.name, **value})
        self.on_change(self.active + self.unhealed)

    def _start_failed(self, kind: FaultKind, fault: Fault, error: HostUnreachable) -> None:
        """A start that lost its host: said in the history, then undone as far as it can be (all or part of it may
        have been done: a SIGSTOP sent before the connection dropped, a rule on one host of two); what cannot be
        undone stays in ``unhealed``. An undo that fails otherwise (a server started again that never was killed) is
        logged: there was nothing of it to undo."""
        with self._lock:
            self._lost(kind, "start", error)
            try:
                with self._changing:
                    fault.heal()
            except HostUnreachable:
                self._keep_unhealed(kind, fault)
                self.on_change(self.active + self.unhealed)
            except EnvironmentFailure as e:
                log.warning("undoing the start of %s that failed: %s", kind.name, e)

    def _lost(self, kind: FaultKind, step: str, error: HostUnreachable) -> None:
        """Say in the history, and in the log, that ``kind``'s ``step`` lost its host."""
        self.record(FAULT_FAILED, {"fault": kind.name, "step": step, "error": str(error)})
        log.warning("the %s of %s failed: %s", step, kind.name, error)

    def _keep_unhealed(self, kind: FaultKind, fault: Fault) -> None:
        """``fault`` may still be on: kept (with its row) for heal_all's second try and for the state file."""
        self.unhealed.append(fault)
        self._kind_of[id(fault)] = kind

    def _retry_unhealed(self) -> None:
        """Heal once more each fault whose heal failed (its host may answer again); one that heals now is recorded
        healed, one that does not stays, for ``leasecheck heal``."""
        for fault in list(self.unhealed):
            kind = self._kind_of[id(fault)]
            try:
                with self._changing:
                    value = fault.heal()
            except HostUnreachable as e:
                log.warning("%s still not healed: %s", kind.name, e)
                continue
            self.unhealed.remove(fault)
            del self._kind_of[id(fault)]
            if value is not None:
                self.record(kind.events[1], {"fault": kind.name, **value})
        self.on_change(self.active + self.unhealed)

    def store_out(self) -> bool:
        """Is a fault of the store on right now, or still healing (a killed server starting again)?

        Read without the lock, from the recorder's thread: a stale answer only moves a zombie's wait by a tick.
        """
        return self._store_faults > 0

    def active_names(self) -> list[str]:
        with self._lock:
            return [f.name for f in self.active]

    def heal_all(self) -> None:
        """Stop scheduling and undo every active fault (idempotent)."""
        self._stop.set()
        self._nudge.set()
        self._healed.set()
        with self._lock:
            for fault in list(self.active):
                self._heal(fault)
            self._heals.clear()
            self._retry_unhealed()
        for thread in (self._thread, self._healer):  # a tick still aiming heals what it starts itself
            if thread is not None and thread is not threading.current_thread():
                thread.join(30)
