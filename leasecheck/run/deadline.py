"""When a run's test proper ends: at its time limit, or later while its history lacks evidence.

A run that stops at ``--time-limit`` before its faults were healed, before a
claim was contended or before a situation it must reach happened is judged
``unknown`` (:mod:`leasecheck.verdict.run_verdict`): it tested too little. So
past the time limit the run goes on, up to ``--evidence-wait`` more, as long as
the history written so far lacks any of that, and ends as soon as it lacks
nothing. The history is watched as it grows (:mod:`leasecheck.verdict.tails`);
its evidence is the same the run verdict judges at the end. The evidence is
read as the file grows (so that a soak's end reads only its last second), and
the situations reached are asked of the checker that follows the run, when there
is one: counting them from the file would hold a soak's whole history at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from leasecheck.checker.coverage import Coverage
from leasecheck.nemesis.catalogue import FaultKind
from leasecheck.verdict.run_verdict import gaps, required
from leasecheck.verdict.tails import CoverageTail, HistoryTail

log = logging.getLogger("leasecheck.run")

#: how often the evidence is read while the run goes (past the time limit: at every look)
TAIL_EVERY_S = 1.0


class Deadline:
    """The end of a run's test proper: ``time_limit`` from ``now``, then up to ``evidence_wait_s`` more while evidence is missing."""

    def __init__(self, history: Path, kinds: Sequence[FaultKind], require: Sequence[str],
                 time_limit: float, evidence_wait_s: float, now: float,
                 coverage: Callable[[], Coverage | None] | None = None) -> None:
        """``coverage``: the situations reached so far, from the checker following the run (None from it: it failed,
        count them from the file)."""
        self.kinds = kinds
        self.require = require
        self.limit = now + time_limit
        #: the latest end, however much is missing
        self.cap = now + time_limit + evidence_wait_s
        #: the evidence of the history written so far (the runner's verdict reads it at the end)
        self.tail = HistoryTail(history)
        #: only worth counting when the run must reach a situation
        self.counts = any(required(kinds, require).values())
        self.coverage = coverage
        # a whole-history count from the file, recomputed now and then: when no checker follows the run
        self.situations = CoverageTail(history)
        self.extended = False
        self._tail_due = now

    def passed(self, now: float) -> bool:
        """Is the test over at ``now``? Past the time limit, said once: going on, and while missing what."""
        if now < self.limit:
            if now >= self._tail_due:
                self.tail.poll()
                self._tail_due = now + TAIL_EVERY_S
            return False
        reached = self.reached() if self.counts and now < self.cap else Coverage()
        missing = gaps(self.tail.poll(), self.kinds, reached, self.require) if now < self.cap else []
        if not missing:
            return True
        if not self.extended:
            self.extended = True
            log.info("time limit reached; going on up to %g s more while missing: %s", self.cap - now, "; ".join(missing))
        return False

    def reached(self) -> Coverage:
        """The situations the history reached so far: the following checker's count, or the file's."""
        got = self.coverage() if self.coverage is not None else None
        return got if got is not None else self.situations.poll()
