"""SIGINT and SIGTERM during a run: one path for both, taken at points the runner chooses.

A terminal's Ctrl-C and a CI system's cancel (SIGTERM) must both end a run the
same way: heal, flush, check what was recorded, write results.json saying the
run was cut short, exit 1 or 128 + the signal. An exception raised wherever the
signal happens to land (Python's KeyboardInterrupt) could tear a worker's spawn
or a server's start in half, so the handler only records the signal and sets an
event; the runner's loops wait on that event.

Worker processes must not see these signals at all: a terminal sends Ctrl-C to
the whole foreground process group, and a ``spawn`` child would raise
KeyboardInterrupt while still importing. :func:`shielded` blocks both signals
around a child's start, so the child begins life with them blocked (the mask is
inherited across fork and exec); the worker ignores them and then unblocks
(:func:`ignore_in_child`). The harness tells its workers when to stop.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from leasecheck.exits import interrupted

#: the signals that end a run early
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Catches SIGINT / SIGTERM while installed (a context manager); ``signal`` names the first one."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: signal.Signals | None = None
        #: ``time.monotonic()`` when the first one arrived
        self.at: float | None = None
        self._previous: dict[signal.Signals, Any] = {}

    @property
    def name(self) -> str | None:
        """``"SIGINT"`` or ``"SIGTERM"``, or None when not interrupted."""
        return self.signal.name if self.signal is not None else None

    @property
    def exit_code(self) -> int | None:
        """128 + the signal (130, 143), or None."""
        return interrupted(self.signal) if self.signal is not None else None

    def interrupt(self, sig: signal.Signals) -> None:
        """Take the interrupt path as if ``sig`` had arrived (a KeyboardInterrupt raised in a callback)."""
        if self.signal is None:
            self.signal = sig
            self.at = time.monotonic()
        self.event.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.interrupt(signal.Signals(signum))

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # only the main thread may install handlers
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


@contextmanager
def shielded() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread while starting a child (a signal arriving meanwhile waits, it is not lost)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_in_child() -> None:
    """In a worker: ignore SIGINT and SIGTERM (discarding any pending one), then unblock them."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
