"""The worker's side of aiming a fault inside an op: the op's requests counted, and the op held at the armed one.

An adapter's op may be several round trips to its store (BEGIN, a read, a
write, COMMIT; a lock, a counter, a record), and a fault must be able to land
between them. The worker cannot see inside the adapter, but it can watch it:
while an armed op runs (:mod:`leasecheck.nemesis.inside`), a profile hook
(:func:`sys.setprofile`, on this thread, for this op only) sees each request
the adapter sends: an SQLite statement or commit returning, a socket send
(redis-py, most clients), psycopg's ``execute`` returning to the adapter. After
the k-th, the hook tells the harness (``between`` k) and, at the armed boundary,
sleeps ``hold_s``: the op is held with k requests done and the next not sent,
and the fault lands there. An op that ends before the armed boundary (a
refused claim makes fewer requests than a granted one; a client whose requests
the hook cannot see, a C extension's own I/O, shows none) is held once the
adapter returns, after its last reply and before its completion is stamped (the
note says ``last``): still inside its recorded interval.

The hook runs only inside an armed op, once per aim and worker; every other op
runs as it always does.
"""

from __future__ import annotations

import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from leasecheck.machine.aim_slot import Arm

#: the C methods that send a request to a store, by the type of their object
_C_REQUESTS: tuple[tuple[type, frozenset[str]], ...] = (
    (sqlite3.Connection, frozenset({"execute", "executemany", "executescript", "commit", "rollback"})),
    (sqlite3.Cursor, frozenset({"execute", "executemany", "executescript"})),
    (socket.socket, frozenset({"send", "sendall", "sendmsg", "sendto"})),
)
#: Python functions whose return ends a request of a client doing its I/O in C (psycopg 3: the whole round trip)
_PY_REQUESTS = frozenset({"execute", "executemany", "commit", "rollback"})
_PY_CLIENTS = ("psycopg.", "psycopg_pool.")


def _is_c_request(fn: Any) -> bool:
    owner = getattr(fn, "__self__", None)
    if owner is None:
        return False
    name = getattr(fn, "__name__", "")
    return any(isinstance(owner, cls) and name in names for cls, names in _C_REQUESTS)


def _is_py_request(frame: FrameType) -> bool:
    """psycopg's execute returning to code outside psycopg (the adapter): one request done, whatever it called inside."""
    if frame.f_code.co_name not in _PY_REQUESTS or not str(frame.f_globals.get("__name__", "")).startswith(_PY_CLIENTS):
        return False
    caller = frame.f_back
    return caller is None or not str(caller.f_globals.get("__name__", "")).startswith(_PY_CLIENTS)


class Hold:
    """Count an armed op's requests and hold it at the armed boundary, or after its last reply when it ends short of
    it; ``note(k, last)`` is told each boundary first."""

    def __init__(self, arm: Arm, note: Callable[[int, bool], None], mark: Callable[[bool], None] = lambda held: None) -> None:
        self.arm = arm
        self.note = note
        #: set while the op is held (:class:`~leasecheck.machine.aim_slot.HoldMark`)
        self.mark = mark
        self.requests = 0
        self.held = False
        self._before: Any = None

    def __enter__(self) -> Hold:
        self._before = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(self._before)
        if not self.held:  # it ended short of the armed boundary: held after its last reply
            self.held = True
            self.mark(True)  # before the word that lets the harness stop it: a stop after the word finds the mark set
            self.note(self.requests, True)
            self._hold()

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if (event == "c_return" and _is_c_request(arg)) or (event == "return" and _is_py_request(frame)):
            self.requests += 1
            armed = self.requests == self.arm.at
            if armed:
                self.mark(True)  # as above: set before the word
            self.note(self.requests, False)
            if armed:
                self.held = True
                self._hold()  # the profile hook is not called again while it runs

    def _hold(self) -> None:
        """Sleep the hold out, marked (set before the note that announced it), then clear the mark."""
        time.sleep(self.arm.hold_s)
        self.mark(False)
