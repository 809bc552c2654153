"""A queue run's pauses aimed between a task's heartbeat and its write: the slot armed, the held tasks heard.

Why: a pause that picks its moment by the clock lands in a task's work or its
stall nearly always, and the library's heartbeat then catches the zombie before
it writes (Temporal's documented mode: invalid once in eight runs, a verdict
that changed from run to run). Aimed, the pause lands where a zombie is made:
the task has beaten, its next write is due, and it sleeps past its timeout.

The library's workers are not ours and have no pipe to the harness, so a held
task says so on an abstract Unix datagram socket named for the run
(:class:`~leasecheck.targets.queues.task.AimNote`); a thread here passes each
word to the run's :class:`~leasecheck.frame.aiming.Aimer` (made by
:meth:`~leasecheck.frame.aiming.Aimer.before_writes`), which the nemesis' pause
waits on as a lease run's does.

The pause then lasts until the job has run again (its next execution begun, read
from the resource's count of executions), never less than its drawn duration and
at most :data:`~leasecheck.nemesis.faults.OUTLAST_TTLS` ttl: the zombie wakes
into the window the run is after, on evidence rather than on a guess of how
long the library takes (its other workers may all be busy, or stalled).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from leasecheck.frame.aiming import Aimer
from leasecheck.nemesis.inside import InFlight
from leasecheck.targets.queues.resource import Resource
from leasecheck.targets.queues.task import AIM_FILE, AIMED, RESOURCE_FILE, AimNote

log = logging.getLogger("leasecheck.queue_run")


class AimNotes:
    """The aimer of a queue run, and the socket its held tasks tell it on (bound here, closed by :meth:`close`)."""

    def __init__(self, queue_dir: Path, run_id: str, start_ns: int) -> None:
        self.aimer = Aimer.before_writes(queue_dir / AIM_FILE, AIMED, self._outlast)
        self.resource = Resource(queue_dir / RESOURCE_FILE)
        #: (worker, history time of its hold) -> (job, execution number): what a pause that lands there waits for
        self._held: dict[tuple[int, int], tuple[str, int]] = {}
        #: the abstract socket's name (no file, no path length to mind); plan.json tells the tasks
        self.name = f"leasecheck-aim-{run_id}"
        self.start_ns = start_ns
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind("\0" + self.name)
        self._thread = threading.Thread(target=self._listen, name="aim-notes", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while True:
            try:
                data = self._sock.recv(4096)
            except OSError:  # closed
                return
            if not data:
                return
            try:
                note = AimNote.decode(data)
            except (ValueError, KeyError) as e:
                log.warning("an aim note that does not parse (%s): %r", e, data[:200])
                continue
            held_at = note.t - self.start_ns
            self._held[(note.process, held_at)] = (note.job, note.n)
            self.aimer.note(note.process, note.serial, note.f, 0, held_at)

    def _outlast(self, op: InFlight) -> Callable[[], bool] | None:
        """While its job has not begun an execution after the held one (the schedule's healer asks)."""
        held = self._held.get((op.process, op.invoked))
        if held is None:
            return None
        job, n = held
        return lambda: self.resource.executions(job) <= n

    def close(self) -> None:
        """Stop listening (a task that holds later finds nobody and goes on) and unmap the slot."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(timeout=5)
        self.aimer.close()


__all__ = ["AimNotes"]
