"""A history watched as it grows: what the run verdict would say of it so far, while the run goes on.

The runner goes on past its time limit (up to ``--evidence-wait``) while the
history lacks what the run verdict needs. It asks often, so the evidence is fed
only the lines appended since it last asked (:class:`HistoryTail`: the same
:class:`~leasecheck.verdict.run_verdict.Evidence` that judges the whole history
at the end); coverage is a function of the whole history, so it is recomputed
from the file now and then (:class:`CoverageTail`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import msgspec

from leasecheck.checker.coverage import Coverage
from leasecheck.histories import HistoryError
from leasecheck.histories.format import Event
from leasecheck.verdict.read_back import ReadBack
from leasecheck.verdict.run_verdict import Evidence, history_coverage

#: how much of the file one read of :meth:`HistoryTail.poll` takes at most
TAIL_CHUNK = 1 << 20


class HistoryTail:
    """Feeds :class:`Evidence` and :class:`~leasecheck.verdict.read_back.ReadBack` from a history file as it grows
    (whole lines only; the header skipped)."""

    def __init__(self, path: str | os.PathLike[str], evidence: Evidence | None = None) -> None:
        self.path = path
        self.evidence = evidence if evidence is not None else Evidence()
        #: which nodes the history read back once their last write was done (the run names the others)
        self.read_back = ReadBack()
        self._offset = 0
        self._header_seen = False
        self._decode = msgspec.json.Decoder(Event).decode

    def poll(self) -> Evidence:
        """Read what was appended since the last poll."""
        try:
            with open(self.path, "rb") as f:
                while True:
                    f.seek(self._offset)  # where the last whole line ended
                    if not self._feed(f.read(TAIL_CHUNK)):
                        break
        except FileNotFoundError:
            pass
        return self.evidence

    def _feed(self, data: bytes) -> bool:
        """Feed the whole lines of ``data`` (read from the offset); False once there is nothing more to read.

        A chunk at a time: a history read in one poll (a run's whose deadline did not watch it) must not be held whole.
        """
        end = data.rfind(b"\n") + 1
        if not end:
            return False
        self._offset += end
        for line in data[:end].splitlines():
            if not self._header_seen:
                self._header_seen = True
                self.evidence.take_header(line)
                continue
            try:
                event = self._decode(line)
            except msgspec.MsgspecError:
                continue  # not an event (the checker reports bad lines; here they prove nothing)
            self.evidence.feed(event)
            self.read_back.feed(event)
        return len(data) == TAIL_CHUNK


class CoverageTail:
    """A growing history's coverage, recomputed from the file at most every max(1 s, 2 × the last computation)."""

    def __init__(self, path: str | os.PathLike[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.coverage = Coverage()
        self._clock = clock
        self._due = -math.inf

    def poll(self) -> Coverage:
        """The coverage as of the last computation, recomputed first when that is due."""
        began = self._clock()
        if began < self._due:
            return self.coverage
        try:
            _, self.coverage = history_coverage(self.path)
        except HistoryError:
            pass  # no header written yet: keep what was reached so far (nothing)
        self._due = began + max(1.0, 2 * (self._clock() - began))
        return self.coverage
