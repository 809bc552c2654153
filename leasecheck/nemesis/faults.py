"""Process faults: pause (SIGSTOP / SIGCONT) and kill (SIGKILL), of workers or of a store server.

Each fault names its victims for the history and knows how to undo itself. A
killed worker cannot be undone, only replaced, so its heal is a no-op (the
runner starts a replacement under a new process number); a killed store server
is healed by starting it again on the same data.

A worker's pause or kill is aimed inside ops (:mod:`leasecheck.nemesis.inside`):
the factory draws up to three kinds of op by the schedule's seeded generator
(fewer when that would leave under two workers running, so the run still
contends), waits (up to a ttl) for workers to hold them between their
round trips, and stops each there as it lands (a kill stops them, then kills
them together); its event names every victim and, under ``"inside"``, the op
each was caught in. Should none come in time, it falls back to one worker with
a write in flight or holding a lease.

Each follows :class:`~leasecheck.nemesis.protocol.Fault`; the ``make_*``
functions are the catalogue's factories (:mod:`leasecheck.nemesis.catalogue`).
"""

from __future__ import annotations

import logging
import random
import signal
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from leasecheck.machine.processes import freeze, stopped
from leasecheck.machine.processes import signal_process as _signal
from leasecheck.nemesis.context import FaultContext, Worker
from leasecheck.nemesis.inside import MIN_RUNNING, VICTIMS, Aiming, InFlight, aims_inside, choose


@dataclass(frozen=True)
class Landing:
    """A worker an aimed fault caught holding an op between its round trips: to stop or kill now, during the hold."""

    process: int
    pid: int
    op: InFlight


#: the rest of an aim: further workers to stop as they land (the fault's ``start`` takes them, then closes it)
Landings = Generator[Landing, None, None]


@dataclass
class PauseProcess:
    """SIGSTOP a worker and everything below it (its GC pause / VM freeze); heal with SIGCONT.

    The whole tree, because a worker's backend may run in a child of its own
    (an ``exec:`` target, a library's heartbeat helper): a paused worker whose
    backend kept heartbeating would be no pause at all.

    An aimed pause may take several workers (``more``), each stopped inside an op of another kind as it lands,
    and its event names them all; they are healed together.
    """

    process: int
    pid: int
    name: str = "pause"
    paused: bool = False
    #: the processes stopped: each victim first, then what was below it
    stopped: list[int] = field(default_factory=list)
    #: told once the worker is stopped, and just before it is continued (:class:`~leasecheck.nemesis.context.FaultContext`)
    halted: Callable[[int], None] = lambda process: None
    resuming: Callable[[int], None] = lambda process: None
    #: the op it was aimed inside, held between its round trips for it (None: not aimed, or the aim found none)
    inside: InFlight | None = None
    #: further victims, stopped as they land (an aim of several kinds of op); None: one victim
    more: Landings | None = None
    #: every victim stopped: (process, pid, the op it was stopped inside, if any)
    victims: list[tuple[int, int, InFlight | None]] = field(default_factory=list)
    #: is a stopped worker still holding the op it was aimed at (:meth:`Aiming.holding`); None: no aim to check
    holding: Callable[[int], bool] | None = None
    #: what the pause waits for past its drawn end (:meth:`Aiming.outlast`: a queue task's job run again), and until
    #: when at most (time.monotonic()); None: its drawn duration
    awaits: Callable[[], bool] | None = None
    awaits_until: float = 0.0

    def awaiting(self) -> bool:
        """Does its heal, once due, wait still (:class:`~leasecheck.nemesis.protocol.Outlasting`)? While its evidence
        has not come, within its bound."""
        return self.paused and self.awaits is not None and time.monotonic() < self.awaits_until and self.awaits()

    def _stop(self, process: int, pid: int, op: InFlight | None) -> None:
        below = freeze(pid)  # the worker first, so that it starts no child we would miss
        if below is None:
            return
        self.stopped += [pid] + [child for child in below if _signal(child, signal.SIGSTOP)]
        self.victims.append((process, pid, _still_inside(op, pid, self.holding)))
        if stopped(pid):
            self.halted(process)

    def start(self) -> dict[str, Any]:
        self._stop(self.process, self.pid, self.inside)
        for landing in _taken(self.more):
            self._stop(landing.process, landing.pid, landing.op)
        self.paused = bool(self.victims)
        return _value(self.process, self.pid, self.victims)

    def heal(self) -> dict[str, Any] | None:
        if not self.paused:
            return None
        self.paused = False
        for process, _, _ in self.victims:
            self.resuming(process)
        for pid in reversed(self.stopped):  # each worker last: its children are running when it wakes
            _signal(pid, signal.SIGCONT)
        return {"victims": [process for process, _, _ in self.victims], "pid": self.pid}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "sigcont", "pids": [pid for _, pid, _ in self.victims], "tree": True} if self.paused else None


@dataclass
class KillProcess:
    """SIGKILL a worker and everything below it; nothing to undo (its replacement gets a new process number).

    The whole tree, as a machine that dies takes it: a job queue's worker runs its
    jobs in children (RQ's work-horse, Celery's pool), and a child left running
    would be no kill of the worker at all. The worker is stopped first so that it
    forks nothing while its tree is read. An aimed kill may take several workers
    (``more``): each is stopped as it lands inside its op, and all die together.
    """

    process: int
    pid: int
    name: str = "kill"
    #: the op it was aimed inside (see :class:`PauseProcess`)
    inside: InFlight | None = None
    #: further victims, stopped as they land, killed with the first (see :class:`PauseProcess`)
    more: Landings | None = None
    victims: list[tuple[int, int, InFlight | None]] = field(default_factory=list)
    #: see :class:`PauseProcess`
    holding: Callable[[int], bool] | None = None

    def start(self) -> dict[str, Any]:
        trees = []

        def catch(process: int, pid: int, op: InFlight | None) -> None:
            trees.append([pid, *(freeze(pid) or [])])  # stopped now, during its hold; killed with the others
            self.victims.append((process, pid, _still_inside(op, pid, self.holding)))

        catch(self.process, self.pid, self.inside)
        for landing in _taken(self.more):
            catch(landing.process, landing.pid, landing.op)
        for tree in trees:
            for pid in tree:
                _signal(pid, signal.SIGKILL)  # a stopped process dies just the same
        return _value(self.process, self.pid, self.victims)

    def heal(self) -> dict[str, Any] | None:
        return None

    def undo_record(self) -> dict[str, Any] | None:
        return None


@dataclass
class ServerFault:
    """Pause or kill the store's server through the callables of whoever runs it."""

    name: str
    #: called for their effect; what they return (a server's ``start`` returns the server) is ignored
    inflict: Callable[[], object]
    undo: Callable[[], object]
    victim: str = "store"
    #: how to undo it from outside (e.g. SIGCONT the server's process tree); None if nothing to do
    record: dict[str, Any] | None = None
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        self.active = True  # from the moment it is tried: a start whose host was lost may have been done (a SIGSTOP sent)
        self.inflict()
        return {"victims": [self.victim]}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.undo()
        self.active = False  # only once undone: an undo that failed (its host lost) is tried again, and outlives us
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return self.record if self.active else None


def _still_inside(op: InFlight | None, pid: int, holding: Callable[[int], bool] | None) -> InFlight | None:
    """The op a stopped victim is inside: the one it came with if it still holds it, else none (its hold ran out
    before the stop landed: stopped, or killed, after that op, not inside it). An op held before its invoke (a job
    queue's task) keeps no mark: its stop is taken as it is."""
    if op is None or op.before or holding is None or holding(pid):
        return op
    log.info("the stop of worker %d landed after its hold of %s ran out: not inside it", pid, op)
    return None


def _taken(more: Landings | None) -> Iterator[Landing]:
    """Each further victim as it lands; the aim is disarmed once they are all taken, or on an error."""
    if more is None:
        return
    try:
        yield from more
    finally:
        more.close()


def _value(process: int, pid: int, victims: list[tuple[int, int, InFlight | None]]) -> dict[str, Any]:
    """A worker fault's start event: its victims (the first one's pid), and the op each aimed one landed inside
    (``"inside"``: a list, one entry per victim it stopped inside an op) or just before (``"before"``: a job queue's
    task held after its heartbeat, before its write's invoke)."""
    aimed = [op for _, _, op in victims if op is not None]
    inside = [op.to_json() for op in aimed if not op.before]
    before = [op.to_json() for op in aimed if op.before]
    pids = [p for _, p, _ in victims]
    return {"victims": [v for v, _, _ in victims] or [process], "pid": pid,
            **({"pids": pids} if len(pids) > 1 else {}), **({"inside": inside} if inside else {}),
            **({"before": before} if before else {})}


log = logging.getLogger("leasecheck.nemesis")

#: the longest a pause or kill waits for a worker to hold an op it aims at, in ttls (then it falls back): long
#: enough for the rarer kinds (a release, a read) to come by; the heals go on meanwhile (the schedule's own thread)
AIM_WAIT_TTLS = 1.0
#: once the first victim is stopped, the longest the others are waited for, in ttls, by fault: a pause is stamped once
#: they all are, so its window in the history starts at most this much after the first stop; a kill's victims all
#: die at its stamp, whenever the first was stopped, so it waits for the others as long as for the first
GATHER_TTLS = {"pause": 0.25, "kill": AIM_WAIT_TTLS}
#: the longest a pause that waits for its evidence (:meth:`Aiming.outlast`) lasts, in ttls from its start: a job
#: queue whose workers were all busy or stalled may take a few of its timeouts to run the job again
OUTLAST_TTLS = 8.0


def aimed(ctx: FaultContext, rng: random.Random, fault: str, eligible: Callable[[Worker], bool]) -> tuple[Landing, Landings] | None:
    """The first worker holding an op of a kind drawn for ``fault`` (:func:`leasecheck.nemesis.inside.choose`), and
    the rest as they land: up to :data:`~leasecheck.nemesis.inside.VICTIMS` workers, fewer when that would leave under
    :data:`MIN_RUNNING` running; None when the run has no aiming or none came within :data:`AIM_WAIT_TTLS`."""
    aiming = ctx.aiming
    if aiming is None:
        return None
    running = sum(1 for w in ctx.workers() if eligible(w))
    if aiming.before and running - 1 < MIN_RUNNING:
        return None
    most = max(1, min(VICTIMS, running - MIN_RUNNING))
    draws = choose(aiming, fault, rng, most)
    if not draws:
        return None
    came = aiming.aim(draws, ctx.ttl_s(AIM_WAIT_TTLS), ctx.ttl_s(GATHER_TTLS[fault]))
    landings = _landings(ctx, aiming, fault, came, eligible, most)
    first = next(landings, None)
    log.info("%s aimed %s: %s", fault, ", ".join(f"before a {d.f}" if aiming.before else f"inside a {d.f} at request {d.at}"
                                                for d in draws),
             first.op if first is not None else "none came in time")
    return (first, landings) if first is not None else None


def _landings(ctx: FaultContext, aiming: Aiming, fault: str, came: Iterator[InFlight],
              eligible: Callable[[Worker], bool], most: int) -> Landings:
    """The workers (ready, ``eligible``) holding the ops that ``came``, counted as landed, up to ``most``; after the
    first, only while :data:`MIN_RUNNING` others stay running (the first is stopped by then: it is no longer
    eligible). Done at ``most``: the aim is disarmed then, however many kinds it armed."""
    taken = 0
    try:
        for op in came:
            workers = [w for w in ctx.workers() if eligible(w)]
            victim = next((w for w in workers if w.process == op.process and w.pid is not None), None)
            if victim is None or victim.pid is None or (taken and len(workers) - 1 < MIN_RUNNING):
                continue
            taken += 1
            aiming.landed(fault)[op.f] += 1
            if taken > 1:
                log.info("%s also landed inside %s", fault, op)
            yield Landing(victim.process, victim.pid, op)
            if taken >= most:
                return
    finally:
        if isinstance(came, Generator):
            came.close()


def _aim_again(ctx: FaultContext, fault: str) -> bool:
    """An aim that found no op in time: wait for the next tick (no victim now) rather than fall back, while the run
    wants ``fault``'s evidence sooner and the fault has landed before (so it has started: the run verdict needs that);
    always, for an aiming that holds ops before their invoke (:attr:`~leasecheck.nemesis.inside.Aiming.before`)."""
    if ctx.aiming is None:
        return False
    return ctx.aiming.before or (ctx.hurried(fault) and sum(ctx.aiming.landed(fault).values()) > 0)


def make_pause(ctx: FaultContext, rng: random.Random) -> PauseProcess | None:
    """The catalogue's ``pause``: ready workers, each stopped inside an op of a kind drawn for it (:func:`aimed`), when
    the pause aims inside ops (:func:`~leasecheck.nemesis.inside.aims_inside`); else one with a write in flight if any
    has (stopped between a store's check and its write, the write lands after another's claim), else one that holds a
    lease if any does (a zombie in the making).

    Never one that is stopped already: a paused worker keeps its write in flight, so it would be chosen again, and the
    first pause's SIGCONT would end both while the second's window, recorded open until its own heal, said the worker
    was stopped when it ran (ci: seed 3 of the attribution test met a resume with no pause of its own open)."""
    writing = ctx.writing()

    def running(w: Worker) -> bool:
        return w.pid is not None and not stopped(w.pid)

    if aims_inside(ctx.aiming, "pause", rng):
        inside = aimed(ctx, rng, "pause", running)
        if inside is not None:
            first, more = inside
            assert ctx.aiming is not None
            return PauseProcess(first.process, first.pid, halted=ctx.halted, resuming=ctx.resuming, inside=first.op,
                                holding=ctx.aiming.holding, more=more, awaits=ctx.aiming.outlast(first.op),
                                awaits_until=time.monotonic() + ctx.ttl_s(OUTLAST_TTLS))
        if _aim_again(ctx, "pause"):
            return None
    victim = ctx.pick_worker(rng, lambda w: running(w) and w.process in writing) if writing else None
    victim = victim or ctx.pick_holder(rng, running)
    if victim is None or victim.pid is None:
        return None
    return PauseProcess(victim.process, victim.pid, halted=ctx.halted, resuming=ctx.resuming)


def make_kill(ctx: FaultContext, rng: random.Random) -> KillProcess | None:
    """The catalogue's ``kill``: ready workers, killed (the runner starts their replacements) inside ops of the kinds
    drawn for it (:func:`aimed`); else one that holds a lease if any does: its lease is left to expire and be taken
    over, and a kill of an idle worker tests nothing (a short run whose kills all missed is ``unknown``)."""
    inside = aimed(ctx, rng, "kill", lambda w: w.pid is not None and not stopped(w.pid))
    if inside is not None:
        first, more = inside
        assert ctx.aiming is not None  # an aim came: there is an aiming
        return KillProcess(first.process, first.pid, inside=first.op, more=more, holding=ctx.aiming.holding)
    if _aim_again(ctx, "kill"):
        return None
    victim = ctx.pick_holder(rng, lambda w: w.pid is not None)
    return KillProcess(victim.process, victim.pid) if victim is not None and victim.pid is not None else None


def make_pause_store(ctx: FaultContext, rng: random.Random) -> ServerFault | None:
    """The catalogue's ``pause-store``: the store's server stopped; ``leasecheck heal`` continues its whole tree."""
    server = ctx.server
    if server is None:
        return None
    pid = server.pid
    record = {"kind": "sigcont", "pids": [pid], "tree": True} if pid else None
    return ServerFault("pause-store", server.pause, server.resume, record=record)


def make_kill_store(ctx: FaultContext, rng: random.Random) -> ServerFault | None:
    """The catalogue's ``kill-store``: the store's server killed, started again on the same data at the heal."""
    server = ctx.server
    if server is None:
        return None
    return ServerFault("kill-store", server.kill, server.start)
