"""The library's own worker processes: started as its docs start them, replaced when killed, stopped on every exit.

Each worker is a process group of its own (``start_new_session``), so that its
children (RQ's work-horse, Celery's pool) are paused, killed and stopped with
it. A worker is what a fault sees (:class:`~leasecheck.nemesis.context.Worker`):
its ``slot`` and history ``process`` are the same number (the executions it runs
get history process numbers of their own, :mod:`.assemble` maps one to the
other), its ``pid`` the group's leader.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leasecheck.machine.processes import descendants, signal_process, start_time
from leasecheck.servers.base import start_guard, stop_guard
from leasecheck.targets.queues.base import QueueLibrary
from leasecheck.targets.queues.task import BUSY_DIR, ENV_DIR, ENV_SLOT


@dataclass
class QueueWorker:
    """One of the library's worker processes."""

    slot: int
    proc: subprocess.Popen[bytes]
    #: the process that kills this worker's tree if the harness dies (:mod:`leasecheck.servers.guard`)
    guard: subprocess.Popen[bytes] | None = None
    #: stopped by us (the run's end): its exit is no death to replace
    stopping: bool = False

    @property
    def process(self) -> int:
        return self.slot

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc.poll() is None else None


class QueueWorkers:
    """The run's workers: ``spawn`` one, ``live()`` for the nemesis, ``deaths()`` to replace, ``stop()`` them all."""

    def __init__(self, library: Callable[[int], QueueLibrary], queue_dir: Path, log_dir: Path,
                 extra_env: dict[str, str]) -> None:
        #: the adapter a worker's command and environment come from, by slot (its broker URL may be its own proxy's)
        self.library = library
        self.queue_dir = queue_dir
        self.log_dir = log_dir
        self.extra_env = extra_env
        self.workers: list[QueueWorker] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def spawn(self) -> QueueWorker:
        slot = len(self.workers)
        library = self.library(slot)
        env = {**os.environ, **self.extra_env, **library.worker_env(), ENV_DIR: str(self.queue_dir), ENV_SLOT: str(slot)}
        with (self.log_dir / f"worker-{slot}.log").open("ab") as log:
            proc = subprocess.Popen(library.worker_command(slot), env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=library.config.work_dir or None)
        # a guard takes the worker's whole tree down if the harness dies (even by SIGKILL): nothing left stopped
        worker = QueueWorker(slot, proc, guard=start_guard(proc.pid, self.queue_dir))
        self.workers.append(worker)
        return worker

    def live(self) -> list[QueueWorker]:
        return [w for w in self.workers if w.proc.poll() is None]

    def deaths(self) -> list[QueueWorker]:
        """Workers that exited since the last call, not stopped by us (each reported once)."""
        dead = [w for w in self.workers if not w.stopping and w.proc.poll() is not None]
        for w in dead:
            w.stopping = True
        return dead

    def busy(self) -> set[int]:
        """The slots that have a job in hand now (the task marks it in ``busy/``)."""
        found: set[int] = set()
        for entry in (self.queue_dir / BUSY_DIR).iterdir():
            slot, _, _ = entry.name.partition("-")
            if slot.isdigit():
                found.add(int(slot))
        return found

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM every live worker's group (continued first: a stopped one would not hear it), then SIGKILL the
        group and every process that was below the worker (RQ's work-horse leaves the group: ``os.setpgrp``)."""
        below: list[tuple[int, int | None]] = []
        for w in self.workers:
            w.stopping = True
            if w.proc.poll() is None:
                below += [(pid, start_time(pid)) for pid in descendants(w.proc.pid)[1:]]
                _group(w.proc.pid, signal.SIGCONT)
                _group(w.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for w in self.workers:
            try:
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for w in self.workers:  # the group too: a child the leader left behind
            _group(w.proc.pid, signal.SIGKILL)
            try:
                w.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for pid, started in below:  # the same process still (a recycled pid starts later): ours to kill
            if started is not None and start_time(pid) == started:
                signal_process(pid, signal.SIGKILL)
        for w in self.workers:
            stop_guard(w.guard)

    def log_tail(self, lines: int = 12) -> str:
        """The last lines of the most recent worker's log (why workers keep dying)."""
        if not self.workers:
            return ""
        path = self.log_dir / f"worker-{self.workers[-1].slot}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def worker_python_path(cls: type | None = None) -> dict[str, str]:
    """The workers import leasecheck's task as this process does (a source checkout run without installing), and the
    adapter's own module from where this process found it: a ``module:Class`` of the user's, found in the current
    directory, whose worker command imports its task (the workers start in the run's folder, not there)."""
    import leasecheck

    roots = [str(Path(leasecheck.__file__).resolve().parent.parent)]
    module = sys.modules.get(cls.__module__) if cls is not None else None
    if cls is not None and module is not None and getattr(module, "__file__", None):
        file = Path(str(module.__file__)).resolve()
        root = file.parents[cls.__module__.count(".") + (file.name == "__init__.py")]
        if not {"site-packages", "dist-packages"} & set(root.parts) and str(root) not in roots:
            roots.append(str(root))
    existing = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(roots) + (os.pathsep + existing if existing else "")}
