"""Reading each job's state from the library while the run goes: the history's reads, and what completes commits.

A task's result is stored by the library after the task returns, with no hook
to tell when; the watcher reads every job's state over and over, stamping each
read before it asks and after the answer (the recorded interval contains the
real one). A read is kept when it shows a result the job did not show at its
last kept read: the first read of an execution's result is what completes that
execution's commit (:mod:`.assemble`), and a result that changes after the job
succeeded is the library overwriting a completion. Once a job was read
SUCCEEDED, a read that shows it in any other state (failed, queued or running
again) is kept too: the library lost a completion. Reads that show nothing new
are dropped: fewer observations are always sound.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from leasecheck.targets.queues.base import JobState, QueueLibrary


@dataclass(frozen=True)
class Read:
    """One kept read: the job, when it was asked and answered (CLOCK_MONOTONIC ns), what the library said."""

    job: str
    invoked: int
    completed: int
    state: JobState


class Watcher:
    """A thread that reads every job's state every ``interval_s`` and keeps the reads that show a new result."""

    def __init__(self, library: QueueLibrary, interval_s: float) -> None:
        self.library = library
        self.interval_s = interval_s
        self.reads: list[Read] = []
        self.finished: set[str] = set()
        self.errors = 0
        self._jobs: list[str] = []
        #: per job, the (status, result) of its last kept read; a job is here once a read showed it SUCCEEDED
        self._last: dict[str, tuple[str, str | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="queue-watcher", daemon=True)

    def add(self, jobs: list[str]) -> None:
        with self._lock:
            self._jobs.extend(jobs)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sweep()
            self._stop.wait(self.interval_s)

    def sweep(self) -> None:
        """Read every job once (the final reads call it after the workers are stopped)."""
        with self._lock:
            jobs = list(self._jobs)
        for job in jobs:
            invoked = time.monotonic_ns()
            try:
                state = self.library.state(job)
            except Exception:  # a read that failed tells nothing; the next sweep asks again
                self.errors += 1
                continue
            completed = time.monotonic_ns()
            if state is None:
                continue
            if state.status in ("SUCCEEDED", "FAILED"):
                self.finished.add(job)
            seen = (state.status, state.result)
            succeeded = job in self._last  # a result was kept before: any change after it is news
            if (state.status == "SUCCEEDED" or succeeded) and self._last.get(job) != seen:
                self._last[job] = seen
                self.reads.append(Read(job, invoked, completed, state))

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
