"""Local store servers (Postgres, Redis) as child processes of leasecheck.

Tests and ``leasecheck run`` need real servers. Each one here is started from
the machine's installed binaries in a private directory on a free loopback
port, waited for until it answers, and stopped cleanly (SIGTERM, then SIGKILL
after a grace period) — only the process we started, by its pid. Its log stays
in its directory, and a start that fails raises :class:`EnvironmentFailure`
with the log's tail, so "the server did not start" never looks like a bug in
the backend under test. A user who already runs a server passes its DSN / URL
instead and none of this is used.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from leasecheck.errors import EnvironmentFailure
from leasecheck.machine.processes import signal_process, working_in
from leasecheck.waiting import poll

#: a path as callers give it (typeshed's name for it)
StrPath = str | os.PathLike[str]

#: the guard program (see :mod:`leasecheck.servers.guard`), run with ``python -m``; named,
#: not imported, since a module imported before ``-m`` runs it would be run as a second copy
GUARD_MODULE = "leasecheck.servers.guard"


#: where iproute2 keeps named network namespaces (:mod:`.hosts` makes them)
NETNS_DIR = Path("/run/netns")
#: ``setns(2)``'s flag for a network namespace
CLONE_NEWNET = 0x40000000


def enter_netns(netns: str) -> None:
    """Move the calling process into the network namespace ``netns`` (``setns``): for a cluster member's child, before it execs."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({netns}): {os.strerror(err)}")
    finally:
        os.close(fd)


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` (SIGKILL) to this process when its parent (the harness) dies.

    Even ``kill -9`` of the harness then leaves no worker or server behind —
    and none stopped by a pause it can no longer heal. Call it last in a child
    (a change of user id clears it).
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, sig)  # PR_SET_PDEATHSIG
    except OSError:
        pass


#: (pid of the process that made it, the executor): one spawning thread per process, made on first use
_spawner: tuple[int, ThreadPoolExecutor] | None = None
_spawner_lock = threading.Lock()


def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` from one thread that lives as long as this process.

    The kernel sends a child's parent-death signal (:func:`die_with_parent`) when
    the *thread* that forked it exits, not the process: a store server that the
    nemesis thread restarts (the heal of ``kill-store``) would be SIGKILLed the
    moment that thread ends, at the end of the run, before the final reads. So
    every server and guard is forked by this one long-lived thread.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid():  # made before a fork: its thread is not here
            _spawner = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasecheck-spawner"))
        executor = _spawner[1]
    def fork() -> subprocess.Popen[bytes]:
        return subprocess.Popen(*args, **kwargs)

    return executor.submit(fork).result()


def python_module(module: str) -> list[str]:
    """``python -P -m MODULE``: this interpreter running one of our modules, in a child.

    ``-P``: no current directory first on the child's ``sys.path``. Run from a
    leasecheck checkout's root, ``python -m leasecheck`` would otherwise import the
    source folder ``leasecheck/`` instead of the installed package (which maps
    ``checker/`` and the others in: the source folder alone has no
    ``leasecheck.checker``). ``PYTHONPATH`` still counts, and ``module:Class``
    targets still find the current directory (:mod:`leasecheck.targets.registry`
    appends it).
    """
    return [sys.executable, "-P", "-m", module]


def start_guard(pid: int, home: StrPath, unmount: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """Start a guard over ``pid``'s process tree and every process working in ``home`` (see :mod:`.guard`), which
    also takes off the mounts ``unmount`` (a power-loss layer's) once that tree is gone.

    In a session of its own, so that no signal meant for the harness's group reaches it.
    """
    return popen(
        [*python_module(GUARD_MODULE), str(pid), os.fspath(home), *unmount],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_guard(proc: subprocess.Popen[bytes] | None) -> None:
    """The server stopped on purpose: the guard has nothing left to do."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


def free_port(besides: int | None = None) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, other than ``besides`` (a second port of a server:
    two asks of the kernel may hand back the same free port)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != besides:
            return port


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Layer(Protocol):
    """A file system a server's directory is mounted on, whose power can be cut
    (:class:`leasecheck.servers.powerfs_layer.PowerLayer`)."""

    def mount(self) -> object: ...
    def unmount(self) -> None: ...
    def discard(self) -> None: ...
    def sync_once(self) -> None: ...
    def power_loss(self, torn: bool = False) -> dict[str, int]: ...


class LocalServer(ABC):
    """A store server we start, own and stop. Use it as a context manager.

    ``directory`` holds the data and ``log_path``; it is a fresh temporary
    directory unless given (give one to keep the data across restarts).
    """

    #: the kind of store, as ``Target.store`` names it
    kind: str = ""
    #: run a guard that kills the server's whole process tree with the harness
    #: (for servers whose children escape its process group: see :mod:`.guard`)
    guarded: bool = False
    #: the network namespace the server runs in, as a member of a cluster (:mod:`.hosts`); None: the machine's
    netns: str | None = None
    #: the power-loss layer its directory is mounted on (:func:`leasecheck.servers.powerfs_layer.on_powerfs`); None: none
    layer: Layer | None = None

    def __init__(self, directory: StrPath | None = None, port: int | None = None) -> None:
        self._owns_directory = directory is None
        self.directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix=f"leasecheck-{self.kind}-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._guard: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """In its directory; beside it when that is a power-loss layer (a log is no store's data to lose)."""
        if self.layer is not None:
            return self.directory.with_name(f"{self.directory.name}.log")
        return self.directory / f"{self.kind}.log"

    @property
    @abstractmethod
    def url(self) -> str:
        """The DSN / URL a backend connects with."""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    @abstractmethod
    def _command(self) -> list[str]:
        """The server's command line (after any one-time initialisation)."""

    def _launcher(self) -> list[str]:
        """The program ``_command`` runs under (env(1) with variables, for :mod:`.faketime`); none by default."""
        return []

    def _prepare(self) -> None:
        """One-time initialisation of ``directory`` (initdb, config); idempotent."""

    def _preexec(self) -> None:
        """Runs in the child before exec: its own process group, so signals reach only it."""
        os.setpgrp()

    def _child_setup(self) -> None:
        if self.netns is not None:  # first: entering a namespace needs root, which _preexec may give up
            enter_netns(self.netns)
        self._preexec()
        die_with_parent()

    @abstractmethod
    def _ready(self) -> bool:
        """Does the server answer a real request yet?"""

    def start(self, timeout: float = 30.0) -> LocalServer:
        """Start the server and wait until it answers; raise EnvironmentFailure if it doesn't."""
        if self.pid is not None:
            return self
        if self.layer is not None:
            self.layer.mount()
        self._prepare()
        command = self._launcher() + self._command()
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            try:
                process = self.process = popen(
                    command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=self._child_setup, cwd=self.directory,
                )
            except OSError as e:
                raise EnvironmentFailure(f"{self.kind}: cannot start {command[0]}: {e}") from None

        def answers() -> bool:
            if process.poll() is not None:
                raise EnvironmentFailure(
                    f"{self.kind} exited with code {process.returncode} while starting; log {self.log_path}:\n"
                    + log_tail(self.log_path)
                )
            return self._ready()

        if not poll(answers, timeout, every=0.05):
            self.stop()
            raise EnvironmentFailure(f"{self.kind} did not answer within {timeout:g} s; log {self.log_path}:\n" + log_tail(self.log_path))
        if self.guarded:
            stop_guard(self._guard)
            self._guard = start_guard(process.pid, self.directory)
        if self.layer is not None:  # what its first start wrote (a fresh cluster, its files) is on the disk before any
            self.layer.sync_once()  # fault: a store set up a while ago, not one whose folder was made a moment before
        return self

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (after SIGCONT, in case it is paused), then SIGKILL after ``grace`` seconds."""
        p = self.process
        if p is None or p.poll() is not None:
            return
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                return
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def restart(self) -> None:
        """Stop and start again on the same directory and port (durability tests)."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL the server (a crash); ``start()`` brings it back on the same data."""
        if self.process is not None and self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait()

    @property
    def on_layer(self) -> bool:
        """Does it run on a power-loss layer (can its power be cut)?"""
        return self.layer is not None

    def power_cut(self, torn: bool = False) -> dict[str, int]:
        """SIGKILL the server (and any child of it still working in its directory), then drop every write it never
        fsynced: what was dropped (``bytes``, ``files``, ``entries``; see :meth:`power_loss`). ``start()`` brings it
        back on what survived."""
        if self.layer is None:
            raise EnvironmentFailure(f"{self.kind}: no power-loss layer under {self.directory} (on_powerfs)")
        self.kill()
        for pid in working_in(os.path.realpath(self.directory)):  # a forked child (an AOF rewrite) writes on otherwise
            signal_process(pid, signal.SIGKILL)
        return self.layer.power_loss(torn)

    def power_loss(self, torn: bool = False) -> dict[str, int]:
        """A power cut (:meth:`power_cut`) and the server started again on what survived; what was dropped."""
        dropped = self.power_cut(torn)
        self.start()
        return dropped

    def pause(self) -> None:
        """SIGSTOP the server's process group (servers that fork children outside it override this)."""
        if self.pid is not None:
            os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.pid is not None:
            os.killpg(self.pid, signal.SIGCONT)

    def __enter__(self) -> LocalServer:
        return self.start()

    def cleanup(self) -> None:
        """Take its power-loss layer off, and delete the directory if this server made it (its data and log go with it)."""
        if self.pid is not None:
            return
        if self.layer is not None:
            self.layer.discard() if self._owns_directory else self.layer.unmount()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.log_path.unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()
