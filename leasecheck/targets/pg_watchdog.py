"""Keeping a psycopg connection honest: a deadline on every statement, and a look for a hung-up server.

Apart from :mod:`leasecheck.targets.postgres_lease` because every Postgres
adapter needs the same two guards (the reference lease, the advisory-lock
audit, the standby's health checks): psycopg's synchronous calls wait for the
server without limit, and a connection the server closed while idle is only
found out by the next statement, whose outcome is then unknown.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # psycopg is imported where it is used: listing the backends must not load it
    import psycopg


class Watchdog:
    """Cuts a connection's socket when a statement outlives its deadline.

    psycopg's synchronous calls wait for the server without limit, and a paused
    (SIGSTOP) or partitioned server never answers — nor does it run its own
    ``statement_timeout``. Shutting the socket down makes the waiting call fail,
    which the caller reports as Indeterminate. One daemon thread per instance,
    started lazily (and again after a fork, which keeps only the calling
    thread), ended by :meth:`close`.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._fd: int | None = None
        self._deadline = 0.0
        self._thread: threading.Thread | None = None
        self._closed = False
        #: did the last guarded statement run out of time (so its error is ours, not the server's)?
        self.fired = False

    @contextmanager
    def guard(self, fd: int, seconds: float) -> Iterator[None]:
        """Watch ``fd`` for ``seconds``; disarmed before the caller may close the connection."""
        if self._thread is None or not self._thread.is_alive():
            self._closed = False
            self._thread = threading.Thread(target=self._run, name="postgres-lease-watchdog", daemon=True)
            self._thread.start()
        with self._cond:
            self._fd, self._deadline, self.fired = fd, time.monotonic() + seconds, False
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._fd = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._fd is None:
                    self._cond.wait()
                    continue
                remaining = self._deadline - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                _shutdown(self._fd)
                self._fd, self.fired = None, True


def _shutdown(fd: int) -> None:
    """Shut down the socket behind ``fd`` (through a duplicate, so the owner's fd stays valid)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def still_open(conn: psycopg.Connection[Any]) -> bool:
    """Has the server not closed this idle connection (a restart, a crash)?

    Between statements an autocommit connection has nothing to read; a socket
    that reads end-of-file, a reset or unprompted bytes was closed by the
    server. Looking before sending keeps the next op certain: it goes out on
    a fresh connection, instead of on a dead one where its outcome would be
    unknown (an ``info`` op that hides the rest of the node's history).
    """
    try:
        probe = socket.socket(fileno=os.dup(conn.pgconn.socket))
    except OSError:
        return False
    try:
        probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True  # nothing to read: the server has not hung up
    except OSError:
        return False
    finally:
        probe.close()
    return False  # end-of-file, or bytes nobody asked for: the server hung up
