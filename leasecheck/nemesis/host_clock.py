"""The host's wall clock watched against its monotonic clock: a step is a clock fault nobody scheduled.

Why: Postgres and Redis judge a lease by the host's wall clock (``clock_timestamp()``,
``TIME``), while the history is stamped on CLOCK_MONOTONIC. When the wall clock
steps (a virtual machine restored from a snapshot or forked, a laptop resumed, an
administrator's ``date``), every lease alive at that moment expires early or late by
the step, as if a ``clock-store`` fault had struck; a correct store then refuses a
renew "expired" a few hundred ms after granting it, and the timing checks call that
``premature-expiry`` or ``overlapping-lease``. The watch samples the two clocks every
20 ms and records each step larger than ``threshold_ms`` as a ``host-clock-step``
event of the history (``{"delta_ms": +D}``: the wall clock jumped D ms ahead of the
monotonic one), so that the run verdict can say the step, not the store, may be
what its timing findings show (:func:`leasecheck.verdict.run_verdict.run_verdict`).

A sample reads monotonic, wall, monotonic; one whose two monotonic reads are more
than :data:`SAMPLE_SLACK_NS` apart (the thread was preempted between them) is
dropped, so a loaded machine does not make steps out of scheduling delays.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

#: the event's name in the history (a nemesis event: process "nemesis", type "info")
HOST_CLOCK_STEP = "host-clock-step"
#: how often the clocks are compared, s
PERIOD_S = 0.02
#: the most two monotonic reads around the wall read may differ for a sample to count, ns
SAMPLE_SLACK_NS = 500_000


def offset_ns() -> int | None:
    """Wall clock minus monotonic clock now, ns; None when the read was preempted (see the module docstring)."""
    before = time.monotonic_ns()
    wall = time.time_ns()
    after = time.monotonic_ns()
    if after - before > SAMPLE_SLACK_NS:
        return None
    return wall - (before + after) // 2


class ClockWatch:
    """A daemon thread recording every step of the host's wall clock larger than ``threshold_ms``."""

    def __init__(self, record: Callable[[str, Any], None], threshold_ms: float) -> None:
        self.record = record
        self.threshold_ns = max(1_000_000, int(threshold_ms * 1_000_000))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-clock", daemon=True)

    @classmethod
    def started(cls, record: Callable[[str, Any], None], threshold_ms: float) -> ClockWatch:
        watch = cls(record, threshold_ms)
        watch._thread.start()
        return watch

    def _run(self) -> None:
        last = None
        while last is None:
            last = offset_ns()
        while not self._stop.wait(PERIOD_S):
            now = offset_ns()
            if now is None:
                continue
            if abs(now - last) > self.threshold_ns:
                self.record(HOST_CLOCK_STEP, {"delta_ms": round((now - last) / 1_000_000, 3)})
            last = now

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(5)
