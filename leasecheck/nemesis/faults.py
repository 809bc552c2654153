"""Process faults: pause (SIGSTOP / SIGCONT) and kill (SIGKILL), of workers or of a store server.

Each fault names its victims for the history and knows how to undo itself. A
killed worker cannot be undone, only replaced, so its heal is a no-op (the
runner starts a replacement under a new process number); a killed store server
is healed by starting it again on the same data.

Each follows :class:`~leasecheck.nemesis.protocol.Fault`; the ``make_*``
functions are the catalogue's factories (:mod:`leasecheck.nemesis.catalogue`).
"""

from __future__ import annotations

import random
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leasecheck.nemesis.context import FaultContext, Worker
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

    def start(self) -> dict[str, Any]:
        below = freeze(self.pid)  # the worker first, so that it starts no child we would miss
        self.paused = below is not None
        self.stopped = [self.pid] + [child for child in below if _signal(child, signal.SIGSTOP)] if below is not None else []
        if self.paused and stopped(self.pid):
            self.halted(self.process)
        return {"victims": [self.process], "pid": self.pid}

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

    def start(self) -> dict[str, Any]:
        below = freeze(self.pid) or []
        for pid in [self.pid, *below]:
            _signal(pid, signal.SIGKILL)  # a stopped process dies just the same
        return {"victims": [self.process], "pid": self.pid}

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


def make_pause(ctx: FaultContext, rng: random.Random) -> PauseProcess | None:
    """The catalogue's ``pause``: one ready worker, stopped; one with a write in flight if any has (stopped between a
    store's check and its write, the write lands after another's claim), else one that holds a lease if any does (a
    zombie in the making).

    Never one that is stopped already: a paused worker keeps its write in flight, so it would be chosen again, and the
    first pause's SIGCONT would end both while the second's window, recorded open until its own heal, said the worker
    was stopped when it ran (ci: seed 3 of the attribution test met a resume with no pause of its own open)."""
    writing = ctx.writing()

    def running(w: Worker) -> bool:
        return w.pid is not None and not stopped(w.pid)

    victim = ctx.pick_worker(rng, lambda w: running(w) and w.process in writing) if writing else None
    victim = victim or ctx.pick_holder(rng, running)
    if victim is None or victim.pid is None:
        return None
    return PauseProcess(victim.process, victim.pid, halted=ctx.halted, resuming=ctx.resuming)


def make_kill(ctx: FaultContext, rng: random.Random) -> KillProcess | None:
    """The catalogue's ``kill``: one ready worker, killed (the runner starts its replacement); one that holds a
    lease if any does: its lease is left to expire and be taken over, and a kill of an idle worker tests nothing (a
    short run whose kills all missed is ``unknown``)."""
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
