"""When a run's test proper ends: at its time limit, or later while its history lacks evidence.

With ``--until-covered`` the evidence includes the coverage goal: every situation that applies to the run's faults
reached ``--min-count`` times, up to ``--max-time``.

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
from typing import Any

from leasecheck.checker.coverage import Coverage
from leasecheck.nemesis.catalogue import FaultKind
from leasecheck.verdict.run_verdict import gaps
from leasecheck.verdict.situations import CoverageGoal, required
from leasecheck.verdict.tails import CoverageTail, HistoryTail

log = logging.getLogger("leasecheck.run")

#: how often the evidence is read while the run goes (past the time limit: at every look)
TAIL_EVERY_S = 1.0


class Deadline:
    """The end of a run's test proper: ``time_limit`` from ``now``, then on while evidence is missing, up to ``longest_s``.

    With a coverage ``goal`` (``--until-covered``) the evidence includes every applicable situation reached the
    goal's count; the run is watched from its start then, so that :attr:`covered_at` says when the goal was first met
    (what a gate pays for it: docs/coverage.md).
    """

    def __init__(self, history: Path, kinds: Sequence[FaultKind], require: Sequence[str],
                 time_limit: float, longest_s: float, now: float,
                 coverage: Callable[[], Coverage | None] | None = None, goal: CoverageGoal | None = None) -> None:
        """``longest_s``: the most the test proper lasts (the time limit and ``--evidence-wait``, or ``--max-time``);
        ``coverage``: the situations reached so far, from the checker following the run (None from it: it failed,
        count them from the file)."""
        self.kinds = kinds
        self.require = require
        self.goal = goal
        self.start = now
        self.limit = now + time_limit
        #: the latest end, however much is missing
        self.cap = now + max(time_limit, longest_s)
        #: the evidence of the history written so far (the runner's verdict reads it at the end)
        self.tail = HistoryTail(history)
        #: only worth counting when the run must reach a situation
        self.counts = goal is not None or any(required(kinds, require).values())
        self.coverage = coverage
        # a whole-history count from the file, recomputed now and then: when no checker follows the run
        self.situations = CoverageTail(history)
        self.extended = False
        #: seconds from the start until the goal was first met (None: not yet, or no goal)
        self.covered_at: float | None = None
        #: did the test proper end at the cap (however much was missing), rather than on its evidence?
        self.at_cap = False
        self._tail_due = now
        #: the goal's situations still short, past the time limit (what :meth:`hurry` reads, from the nemesis' thread)
        self._short: frozenset[str] = frozenset()
        #: told when what :meth:`hurry` says may have changed (the runner: the nemesis' ``repace``)
        self.on_pace: Callable[[], None] = lambda: None

    def passed(self, now: float) -> bool:
        """Is the test over at ``now``? Past the time limit, said once: going on, and while missing what."""
        if now < self.limit:
            if now >= self._tail_due:
                self.tail.poll()
                if self.goal is not None and self.covered_at is None:
                    reached = self.reached()
                    self._covered(now, reached)
                    self._pace(frozenset(self.goal.short(reached)))
                self._tail_due = now + TAIL_EVERY_S
            return False
        reached = self.reached() if self.counts and now < self.cap else Coverage()
        missing = gaps(self.tail.poll(), self.kinds, reached, self.require, goal=self.goal) if now < self.cap else []
        if self.goal is not None and now < self.cap:
            self._covered(now, reached)
            self._pace(frozenset(self.goal.short(reached)))
        if not missing and self.coverage is not None and now < self.cap:
            # the following checker's count would end the wait: the history's own count, the final verdict's, must
            # agree (a cluster's power-loss-all run ended 3 s past its limit on an online lease-expires-during-store-
            # fault that no prefix of its history, nor the verdict, had: unknown, ci)
            missing = gaps(self.tail.poll(), self.kinds, self.situations.poll(), self.require, goal=self.goal)
        if not missing:
            self.at_cap = now >= self.cap
            return True
        if not self.extended:
            self.extended = True
            log.info("time limit reached; going on up to %g s more while missing: %s", self.cap - now, "; ".join(missing))
        return False

    def hurry(self, kind: FaultKind) -> bool:
        """Does the run want ``kind``'s evidence sooner? In an ``--until-covered`` run, from its first count of the
        history on, while a situation the fault exists for or seeks is short of the goal: its faults then come faster
        (:attr:`leasecheck.nemesis.schedule.Nemesis.hurry`). Never without a goal: a fixed-time run keeps its pace.

        From the start, not only past the time limit: a default gate spent its first 10 s at one fault every 5 s
        (2 of the 42 landings inside ops its goal asks for) and ended at its cap short of them."""
        return not self._short.isdisjoint(kind.situations) or not self._short.isdisjoint(kind.seeks)

    def short(self) -> frozenset[str]:
        """The goal's situations short now (what the workload's steering reads: racing deliveries, a zombie's phase)."""
        return self._short

    def _pace(self, short: frozenset[str]) -> None:
        if short != self._short:
            self._short = short
            self.on_pace()

    def _covered(self, now: float, reached: Coverage) -> None:
        assert self.goal is not None
        if self.covered_at is None and not self.goal.short(reached):
            self.covered_at = now - self.start
            log.info("coverage goal met after %.1f s: every applicable situation reached %d times",
                     self.covered_at, self.goal.min_count)

    def goal_json(self, reached: Coverage, ended: float, stopped: str | None) -> dict[str, Any] | None:
        """results.json's ``coverage.goal``: the goal's count, what stayed short, when it was met, the cap, and why the
        test proper ended (``covered``, ``max-time``, or ``stopped``: what cut it short, a signal or the first
        anomaly), or None without a goal."""
        if self.goal is None:
            return None
        ended_by = stopped or ("max-time" if self.at_cap else "covered")
        return {**self.goal.to_json(reached), "covered_after_s": None if self.covered_at is None else round(self.covered_at, 3),
                "time_limit_s": round(self.limit - self.start, 3), "max_time_s": round(self.cap - self.start, 3),
                "ran_s": round(ended - self.start, 3), "ended_by": ended_by}

    def reached(self) -> Coverage:
        """The situations the history reached so far: the following checker's count, or the file's."""
        got = self.coverage() if self.coverage is not None else None
        return got if got is not None else self.situations.poll()
