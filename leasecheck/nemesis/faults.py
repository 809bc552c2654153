"""Process faults: pause (SIGSTOP / SIGCONT) and kill (SIGKILL), of workers or of a store server.

Each fault names its victims for the history and knows how to undo itself. A
killed worker cannot be undone, only replaced, so its heal is a no-op (the
runner starts a replacement under a new process number); a killed store server
is healed by starting it again on the same data.

A worker's pause or kill is aimed inside an op (:mod:`leasecheck.nemesis.inside`):
the factory draws a kind of op by the schedule's seeded generator, waits (up to
half a ttl) for a worker to hold one between its round trips, and stops or
kills that worker there; its event says so (``"inside"``). Should none come in
time, it falls back to a worker with a write in flight or one holding a lease.

Each follows :class:`~leasecheck.nemesis.protocol.Fault`; the ``make_*``
functions are the catalogue's factories (:mod:`leasecheck.nemesis.catalogue`).
"""

from __future__ import annotations

import logging
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leasecheck.nemesis.context import FaultContext, Worker
from leasecheck.nemesis.inside import InFlight, choose
from leasecheck.nemesis.processes import freeze, stopped
from leasecheck.nemesis.processes import signal_process as _signal


@dataclass
class PauseProcess:
    """SIGSTOP a worker and everything below it (its GC pause / VM freeze); heal with SIGCONT.

    The whole tree, because a worker's backend may run in a child of its own
    (an ``exec:`` target, a library's heartbeat helper): a paused worker whose
    backend kept heartbeating would be no pause at all.
    """

    process: int
    pid: int
    name: str = "pause"
    paused: bool = False
    #: the processes stopped: the worker first, then what was below it
    stopped: list[int] = field(default_factory=list)
    #: told once the worker is stopped, and just before it is continued (:class:`~leasecheck.nemesis.context.FaultContext`)
    halted: Callable[[int], None] = lambda process: None
    resuming: Callable[[int], None] = lambda process: None
    #: the op it was aimed inside, held between its round trips for it (None: not aimed, or the aim found none)
    inside: InFlight | None = None

    def start(self) -> dict[str, Any]:
        below = freeze(self.pid)  # the worker first, so that it starts no child we would miss
        self.paused = below is not None
        self.stopped = [self.pid] + [child for child in below if _signal(child, signal.SIGSTOP)] if below is not None else []
        if self.paused and stopped(self.pid):
            self.halted(self.process)
        return {"victims": [self.process], "pid": self.pid, **_inside(self.inside)}

    def heal(self) -> dict[str, Any] | None:
        if not self.paused:
            return None
        self.paused = False
        self.resuming(self.process)
        for pid in reversed(self.stopped):  # the worker last: its children are running when it wakes
            _signal(pid, signal.SIGCONT)
        return {"victims": [self.process], "pid": self.pid}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "sigcont", "pids": [self.pid], "tree": True} if self.paused else None


@dataclass
class KillProcess:
    """SIGKILL a worker and everything below it; nothing to undo (its replacement gets a new process number).

    The whole tree, as a machine that dies takes it: a job queue's worker runs its
    jobs in children (RQ's work-horse, Celery's pool), and a child left running
    would be no kill of the worker at all. The worker is stopped first so that it
    forks nothing while its tree is read.
    """

    process: int
    pid: int
    name: str = "kill"
    #: the op it was aimed inside (see :class:`PauseProcess`)
    inside: InFlight | None = None

    def start(self) -> dict[str, Any]:
        below = freeze(self.pid) or []
        for pid in [self.pid, *below]:
            _signal(pid, signal.SIGKILL)  # a stopped process dies just the same
        return {"victims": [self.process], "pid": self.pid, **_inside(self.inside)}

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
        self.inflict()
        self.active = True
        return {"victims": [self.victim]}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.active = False
        self.undo()
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return self.record if self.active else None


def _inside(op: InFlight | None) -> dict[str, Any]:
    return {"inside": op.to_json()} if op is not None else {}


log = logging.getLogger("leasecheck.nemesis")

#: the longest a pause or kill waits for a worker to hold the op it aims at, in ttls (then it falls back)
AIM_WAIT_TTLS = 0.5


def aimed(ctx: FaultContext, rng: random.Random, fault: str, eligible: Callable[[Worker], bool]) -> tuple[Worker, InFlight] | None:
    """The worker holding an op of the kind drawn for ``fault`` (:func:`leasecheck.nemesis.inside.choose`), and that op;
    None when the run has no aiming or none came within :data:`AIM_WAIT_TTLS`."""
    aiming = ctx.aiming
    draw = choose(aiming, fault, rng) if aiming is not None else None
    if aiming is None or draw is None:
        return None
    landed = aiming.aim(draw.f, draw.at, draw.hold_ms, ctx.ttl_s(AIM_WAIT_TTLS))
    log.info("%s aimed inside a %s at request %d: %s", fault, draw.f, draw.at, landed or "none came in time")
    victim = next((w for w in ctx.workers() if landed is not None and w.process == landed.process and eligible(w)), None)
    if victim is None or landed is None:
        return None
    aiming.hit(fault).add(landed.f)
    return victim, landed


def make_pause(ctx: FaultContext, rng: random.Random) -> PauseProcess | None:
    """The catalogue's ``pause``: one ready worker, stopped inside an op of the kind drawn for it (:func:`aimed`); else
    one with a write in flight if any has (stopped between a store's check and its write, the write lands after
    another's claim), else one that holds a lease if any does (a zombie in the making).

    Never one that is stopped already: a paused worker keeps its write in flight, so it would be chosen again, and the
    first pause's SIGCONT would end both while the second's window, recorded open until its own heal, said the worker
    was stopped when it ran (ci: seed 3 of the attribution test met a resume with no pause of its own open)."""
    writing = ctx.writing()

    def running(w: Worker) -> bool:
        return w.pid is not None and not stopped(w.pid)

    inside = aimed(ctx, rng, "pause", running)
    if inside is not None and inside[0].pid is not None:
        return PauseProcess(inside[0].process, inside[0].pid, halted=ctx.halted, resuming=ctx.resuming, inside=inside[1])
    victim = ctx.pick_worker(rng, lambda w: running(w) and w.process in writing) if writing else None
    victim = victim or ctx.pick_holder(rng, running)
    if victim is None or victim.pid is None:
        return None
    return PauseProcess(victim.process, victim.pid, halted=ctx.halted, resuming=ctx.resuming)


def make_kill(ctx: FaultContext, rng: random.Random) -> KillProcess | None:
    """The catalogue's ``kill``: one ready worker, killed (the runner starts its replacement) inside an op of the kind
    drawn for it (:func:`aimed`); else one that holds a lease if any does: its lease is left to expire and be taken
    over, and a kill of an idle worker tests nothing (a short run whose kills all missed is ``unknown``)."""
    inside = aimed(ctx, rng, "kill", lambda w: w.pid is not None and not stopped(w.pid))
    if inside is not None and inside[0].pid is not None:
        return KillProcess(inside[0].process, inside[0].pid, inside=inside[1])
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
