"""The workers' zygote: multiprocessing's forkserver, warmed with the worker's imports, one per run.

Why: a ``spawn`` worker is a fresh interpreter that imports the workload and the
backend's client library (psycopg, redis, ...) itself; 64 of them take ~12 s on two
cores. The forkserver is one fresh interpreter that imports all that once and then
forks every worker from itself, so a worker costs a fork, not an interpreter.

What a forked worker keeps, exactly as a spawned one had it:

- *its own OS process*, and the pid the harness records is that process's (the
  forkserver reports it), so a pause or a kill by pid hits one worker alone;
- *no signal from the terminal*: a Ctrl-C goes to the whole foreground process
  group, the forkserver included. The forkserver is started with SIGINT and SIGTERM
  blocked (:func:`leasecheck.frame.interrupts.shielded`) and never unblocks them, and a
  fork inherits the mask: each worker starts with both blocked, as a spawned one
  did, until ``worker_main`` ignores them. A group's SIGTERM kills neither the
  forkserver (so no worker dies with it) nor a worker;
- *death with the harness*: the forkserver asks for SIGKILL when the harness thread
  that started it ends (a thread of this module's that lives as long as the harness
  process, as :func:`leasecheck.servers.base.popen`'s does), and each worker for
  SIGKILL when its parent, the forkserver, dies (``worker_main``'s
  ``die_with_parent``): a harness killed with ``kill -9`` leaves nothing behind;
- *its own connections*: the forkserver only imports. It holds no connection and
  no thread — it refuses to serve if an import started one (forking a process with
  threads can deadlock the child), and the pool then spawns instead — and each
  worker makes its backend client after the fork.

A run starts its forkserver at its first worker and stops it after its last
(:func:`acquire`, :func:`release`), so the preloaded modules and the environment
are the run's own, and no process outlives the run. Runs in one process at the same
time share one forkserver (counted; the first one's preloads and environment — the
other's workers import what is missing themselves); it stops when the last is done.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import multiprocessing.forkserver as mp_forkserver
import os
import signal
import sys
import threading
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from leasecheck.frame.interrupts import shielded
from leasecheck.servers.base import die_with_parent

#: what every worker imports: preloaded first (after this module, which sets the forkserver up)
WORKER_MODULES = ("leasecheck.run.workload",)
#: how long the forkserver may take to fork a worker, its first start (imports and all) included,
#: before it counts as stuck (an import that hangs): it is killed, and the pool spawns instead
FORK_TIMEOUT_S = 60.0


@dataclass
class _Users:
    """The runs of this process that use the forkserver, and the thread that starts it."""

    #: the process these belong to (a fork of it starts afresh: the thread is not there)
    pid: int = field(default_factory=os.getpid)
    count: int = 0
    starter: ThreadPoolExecutor | None = None


_lock = threading.Lock()
_users = _Users()


def _here() -> _Users:
    """This process's users (call with ``_lock`` held)."""
    global _users
    if _users.pid != os.getpid():
        _users = _Users()
    return _users


# -------------------------------------------------------------------- in the harness


def preloads(target_module: str | None, requires: tuple[str, ...] = ()) -> list[str]:
    """The modules the forkserver imports before its first fork, in order.

    This module first (it sets the forkserver up, see :func:`_serve_warm`), the
    worker's own modules, the backend's, the client libraries it ``requires``
    (its module imports them only where it uses them), and what the harness's ``__main__``
    imports: every forked child runs the main script or module again, as
    ``__mp_main__`` (as a spawned one does), which is cheap only if what it
    imports is already there — the ``leasecheck`` console script imports
    ``leasecheck.cli``.
    """
    names = [__name__, *WORKER_MODULES]
    if target_module:
        names.append(target_module)
    names.extend(requires)
    names.extend(_main_imports())
    return list(dict.fromkeys(names))


def _main_imports() -> list[str]:
    """The modules that the harness's ``__main__`` imported, if a child runs it again.

    Not ``__main__`` itself: a child runs it again under another name, and would
    warn of finding it imported already. Nothing when the child runs nothing again:
    ``python -m PACKAGE`` (its ``__main__``), ``python -c``, an interactive session.
    """
    main = sys.modules.get("__main__")
    if main is None:
        return []
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is None and getattr(main, "__file__", None) is None:
        return []
    if spec_name is not None and (spec_name == "__main__" or spec_name.endswith(".__main__")):
        return []
    out = []
    for key, value in vars(main).items():  # ``from leasecheck.cli import main`` -> leasecheck.cli
        if key.startswith("__"):  # the module's own __loader__, __builtins__, ...
            continue
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and name in sys.modules and name not in ("__main__", "builtins", spec_name):
            out.append(name)
    return out


#: set (to "1") in the forkserver's environment when :func:`_safe_path` set ``PYTHONSAFEPATH`` there, so it can take both out
_SAFE_PATH_MARK = "LEASECHECK_ZYGOTE_SAFE_PATH"


@contextlib.contextmanager
def _safe_path() -> Iterator[None]:
    """Start the forkserver with ``PYTHONSAFEPATH=1``: no current directory first on its ``sys.path``.

    Why: CPython starts the forkserver as ``python -c ...``, which puts the current
    directory first on ``sys.path``, and imports its preloads before anything of ours
    can set the path right — the first is this module, so ``import leasecheck`` runs
    there. Run from a leasecheck checkout's root with a non-editable install, that
    found the source folder ``leasecheck/`` (not the installed package) and every
    worker died of ``No module named 'leasecheck.checker'``. Without the current
    directory the forkserver imports what the harness imported; :func:`_serve_warm`
    then gives it the harness's ``sys.path`` exactly, and takes the variable out of
    its environment again (a worker's own children, an ``exec:`` target's script,
    must see the current directory as usual).
    """
    if os.environ.get("PYTHONSAFEPATH"):  # the user's own: nothing to add, nothing to take out later
        yield
        return
    os.environ["PYTHONSAFEPATH"] = os.environ[_SAFE_PATH_MARK] = "1"
    try:
        yield
    finally:
        os.environ.pop("PYTHONSAFEPATH", None)
        os.environ.pop(_SAFE_PATH_MARK, None)


def _start(preload: list[str]) -> None:
    """Start the forkserver with ``preload`` unless it runs (in the starter thread)."""
    resource_tracker.ensure_running()  # its first start unblocks SIGINT / SIGTERM in this thread: outside the shield
    mp_forkserver.set_forkserver_preload(preload)
    with shielded(), _safe_path():  # the forkserver, and every worker it forks, starts with SIGINT / SIGTERM blocked
        mp_forkserver.ensure_running()


def ensure_running(preload: list[str]) -> None:
    """Make sure the forkserver runs (a no-op while it does), started by the long-lived starter thread.

    The forkserver's parent-death signal fires when the thread that started it
    ends, so that thread must live as long as the harness: one of this module's
    own, made on first use.
    """
    with _lock:
        users = _here()
        if users.starter is None:
            users.starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasecheck-zygote")
        starter = users.starter
    starter.submit(_start, preload).result()


def acquire(preload: list[str]) -> None:
    """One more run uses the forkserver; start it (with ``preload``) unless it runs."""
    with _lock:
        _here().count += 1
    try:
        ensure_running(preload)
    except BaseException:
        release()
        raise


def start(process: BaseProcess) -> None:
    """``process.start()`` through the forkserver, or EOFError / OSError if it cannot fork it.

    A forkserver that has not forked it within :data:`FORK_TIMEOUT_S` is killed, so
    that a stuck import fails the start (``start()`` waits for the child's pid
    with no timeout, and no Ctrl-C would end that wait) instead of hanging the run.
    """
    watchdog = threading.Timer(FORK_TIMEOUT_S, _kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        process.start()
    finally:
        watchdog.cancel()


def _kill() -> None:
    """SIGKILL the running forkserver, if any (it is reaped by the next start or by :func:`release`)."""
    pid = _server()._forkserver_pid
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _server() -> Any:
    """CPython's forkserver instance; not public: its pid, and ``_stop()`` (which its tests use) to close and reap it."""
    return mp_forkserver._forkserver


def release() -> None:
    """One run less; the last one stops the forkserver (its workers are gone by then: see ``WorkerPool.stop``).

    SIGKILL, not a request: the forkserver holds no state, and any worker it still
    has then dies with it (its parent-death signal), so stopping never waits.
    """
    with _lock:
        users = _here()
        if users.count <= 0:
            return
        users.count -= 1
        if users.count > 0:
            return
        server = _server()
        if server._forkserver_pid is None:
            return
        _kill()
        server._stop()


# -------------------------------------------------------------------- in the forkserver


def _forkserver_frame() -> FrameType | None:
    """The frame of ``multiprocessing.forkserver.main`` that is importing this module, if any."""
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        if frame.f_code is mp_forkserver.main.__code__:
            return frame
        frame = frame.f_back
    return None


def _threads() -> int:
    """This process's threads, native ones included (a C library may start its own)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _serve_warm(frame: FrameType) -> None:
    """Set the forkserver up, before it serves: the harness's ``sys.path``, death with the harness, every preload.

    Python 3.11's forkserver ignores the ``sys_path`` it is given, so a preload
    could find another module than the harness did. Each import is tried here,
    on its own: a module that fails is left to the worker, which reports it (the
    forkserver's own loop would die of any error but an ImportError).
    The imported objects are frozen out of the garbage collector, so a worker's
    collections do not write to (and copy) the pages it shares with the
    forkserver. A preload that started a thread makes the forkserver exit
    instead: the pool then starts its workers with ``spawn``.
    """
    die_with_parent()
    if os.environ.pop(_SAFE_PATH_MARK, None) is not None:  # see _safe_path: set for this process's start-up alone
        os.environ.pop("PYTHONSAFEPATH", None)
    sys_path = frame.f_locals.get("sys_path")
    if isinstance(sys_path, list):
        sys.path[:] = sys_path
    preload = frame.f_locals.get("preload")
    if isinstance(preload, list):
        for name in preload:
            if isinstance(name, str) and name not in (__name__, "__main__"):
                with contextlib.suppress(Exception):
                    importlib.import_module(name)
        # all imported (or left to the worker) here: main()'s own loop, at this module now, has nothing
        # left to import (it would import a failed module again, and die of anything but an ImportError)
        preload[:] = [__name__]
    if _threads() > 1:
        sys.stderr.write(f"leasecheck: a preloaded module started a thread ({threading.enumerate()}): "
                         "the workers are spawned instead of forked\n")
        os._exit(1)
    gc.collect()
    gc.freeze()


if (_frame := _forkserver_frame()) is not None:
    _serve_warm(_frame)
del _frame
