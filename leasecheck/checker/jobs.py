"""Worker processes that check a history's partitions side by side, the calling process one of them.

Nodes are independent, so a history split by node
(:mod:`leasecheck.checker.partitioned`) can be checked on every core. This
module only runs picklable tasks: :class:`Workers` starts ``jobs - 1``
processes at once (their start-up overlaps whatever the caller does next), and
:meth:`Workers.map` hands tasks to them and to the caller itself, one at a
time, so that a slow partition never leaves a core idle for long.

The workers are forked when this process has no other thread (the CLI's
``check``, which starts them before it reads anything: they copy a small heap
and are up in milliseconds); else they are plain ``spawn`` children (a fork of
a process with threads may copy a lock another thread held) that import the
checker and nothing else: the ``leasecheck`` console script, which
multiprocessing would otherwise re-run in every child, is hidden while they
start. They ignore SIGINT: a terminal's Ctrl-C reaches the whole process
group, and it is the caller's to handle (the CLI prints one line and exits
130); the caller then stops them. A worker whose parent died without stopping
it (SIGKILL) exits within a second.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from leasecheck.checker.split import forks
from leasecheck.exits import interrupted

T = TypeVar("T")
R = TypeVar("R")

#: how often an idle or busy worker looks whether its parent is still there
_ORPHAN_POLL_S = 1.0


class WorkerFailed(RuntimeError):
    """A worker process died, or a task raised something that could not be sent back as it was."""


@contextmanager
def _without_main_script() -> Iterator[None]:
    """Start children that do not re-run the parent's main script.

    multiprocessing runs the parent's ``__main__`` again in every spawned child,
    in case a task is a function defined there. Ours live in the checker's
    modules, and the ``leasecheck`` console script's ``__main__`` would import
    the whole CLI into every worker.
    """
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__, no __spec__: nothing to re-run
    try:
        yield
    finally:
        sys.modules["__main__"] = real


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """Block SIGINT while a child starts: it begins life with it blocked, until it ignores it (the mask is inherited)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def sigterm_exits() -> Iterator[None]:
    """Let SIGTERM unwind the caller like an exception (exit 143), so that its ``finally`` blocks run.

    By default SIGTERM ends a process on the spot, leaving its workers (for up
    to a second) and its temporary files behind. Only when nobody handles
    SIGTERM already, and only in the main thread (the runner has its own handler).
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(interrupted(signum))

    signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _watch_parent(parent: int) -> None:
    """Exit when the parent is gone (re-parented): nobody would read this worker's result."""
    while True:
        time.sleep(_ORPHAN_POLL_S)
        if os.getppid() != parent:
            os._exit(1)


def _sendable(e: BaseException) -> BaseException:
    """``e`` if it survives pickling, else a :class:`WorkerFailed` that tells what it was and where."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        where = "".join(traceback.format_exception(e)).strip().splitlines()
        return WorkerFailed(f"{type(e).__name__}: {e} (in a checker worker; {where[-2].strip() if len(where) > 1 else ''})")


def _serve(conn: Connection, parent: int) -> None:
    """A worker's life: run ``(fn, task)`` requests until told to stop (None) or the parent hangs up.

    Whatever goes wrong is sent back as an exception: a worker never prints a
    traceback of its own (the CLI's contract is one line).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        except BaseException as e:  # a task that cannot be unpickled here
            request = (_raise, e)
        if request is None:
            return
        fn, task = request
        try:
            reply: tuple[bool, Any] = (True, fn(task))
        except BaseException as e:
            reply = (False, _sendable(e))
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except BaseException as e:  # a result that cannot be pickled
            conn.send((False, _sendable(e)))


def _raise(e: BaseException) -> None:
    raise e


class _Worker:
    """One child process and the parent's end of its pipe."""

    def __init__(self, ctx: Any, number: int) -> None:
        self.conn, child = ctx.Pipe()
        self.process: BaseProcess = ctx.Process(
            target=_serve, args=(child, os.getpid()), name=f"leasecheck-checker-{number}", daemon=True
        )
        self.process.start()
        child.close()

    def stop(self, grace_s: float) -> None:
        try:
            self.conn.send(None)
        except (EOFError, OSError):
            pass
        self.process.join(grace_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


class Workers(Generic[T, R]):
    """``jobs - 1`` worker processes, started on entering, stopped on leaving; the caller is the ``jobs``-th."""

    def __init__(self, jobs: int, fork: bool | None = None) -> None:
        self.jobs = max(1, jobs)
        #: fork the workers (None: when :func:`~leasecheck.checker.split.forks` says it is safe)
        self.fork = fork
        self._workers: list[_Worker] = []

    def __enter__(self) -> Workers[T, R]:
        if self.jobs > 1:
            fork = forks() if self.fork is None else self.fork
            ctx = mp.get_context("fork" if fork else "spawn")  # forked: up in milliseconds, the checker imported
            if not fork:
                resource_tracker.ensure_running()  # its first start unblocks signals in this thread: outside the block
            with _without_main_script(), _signals_blocked():
                for i in range(self.jobs - 1):
                    self._workers.append(_Worker(ctx, i))
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        for w in self._workers:
            if kind is None:
                w.stop(grace_s=5)
            else:  # interrupted or failed: nobody wants their results
                w.kill()
        self._workers.clear()

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """``fn(task)`` for every task, in the workers and in this process; the results in task order.

        ``fn`` must be a module-level function of the checker (the workers
        import it by name). The first exception a task raises is raised here,
        after every worker has finished what it was doing.
        """
        results: list[Any] = [None] * len(tasks)
        pending = iter(range(len(tasks)))
        lock = threading.Lock()
        failures: list[BaseException] = []

        def take() -> int | None:
            with lock:
                return None if failures else next(pending, None)

        def fail(e: BaseException) -> None:
            with lock:
                failures.append(e)

        def feed(w: _Worker) -> None:
            while (i := take()) is not None:
                try:
                    w.conn.send((fn, tasks[i]))
                    ok, value = w.conn.recv()
                except (EOFError, OSError):
                    w.process.join(5)  # it hung up: it is dying, or dead
                    fail(WorkerFailed(f"a checker worker died (exit code {w.process.exitcode})"))
                    return
                except BaseException as e:  # a result this process cannot unpickle: raised by the caller, not here
                    fail(e)
                    return
                if not ok:
                    fail(value)
                    return
                results[i] = value

        threads = [threading.Thread(target=feed, args=(w,), daemon=True) for w in self._workers]
        for t in threads:
            t.start()
        try:
            while (i := take()) is not None:
                results[i] = fn(tasks[i])
        except BaseException as e:
            fail(e)
            for w in self._workers:  # nobody wants their results: free the feeders blocked on them
                w.kill()
            raise
        finally:
            for t in threads:
                t.join()
        if failures:
            raise failures[0]
        return results
