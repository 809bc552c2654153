"""Which coverage situations apply to a run, which it must reach, and ``--until-covered``'s goal.

The run verdict (:mod:`.run_verdict`) asks what a run *must* reach (each fault's own situations, ``--require``); a
report asks what *applies* (those, the workload's, and what the faults make likely); ``--until-covered`` waits for
every applicable situation a number of times. Written once here, so the deadline, the verdict, results.json and
``leasecheck check`` name the same situations for the same run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.checker.coverage import Coverage
from leasecheck.histories import Header
from leasecheck.histories.vocabulary import RESOURCE_SITUATIONS, SITUATIONS, WORKLOAD_SITUATIONS
from leasecheck.nemesis.catalogue import FAULTS, FaultKind


def required(kinds: Sequence[FaultKind], require: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """The situations a run must reach, by why: each requested fault's name (the situations it exists for), and
    ``--require`` (those the run was told to reach)."""
    out = {kind.name: tuple(kind.situations) for kind in kinds}
    if require:
        out["--require"] = tuple(require)
    return out


def coverage_gaps(cov: Coverage, kinds: Sequence[FaultKind], require: Sequence[str] = ()) -> list[str]:
    """The situations of :func:`required` that never happened: ``"pause: claim-after-expiry never happened"``."""
    out = []
    for why, situations in required(kinds, require).items():
        never = cov.missing(situations)
        if never:
            out.append(f"{why}: {', '.join(never)} never happened")
    return out


@dataclass(frozen=True)
class CoverageGoal:
    """``--until-covered``: every situation that applies to the run reached ``min_count`` times.

    Why counts and not "at least once": a situation reached once may have met the backend at one lucky moment; a
    gate that says what it tested should have seen each dangerous window a few times. The run goes on past its time
    limit while the goal is short (:mod:`leasecheck.run.deadline`); at its cap the short situations are named, and
    ``strict`` (``--strict-coverage``) makes that ``unknown``.
    """

    situations: tuple[str, ...]
    min_count: int = 3
    strict: bool = False

    def short(self, cov: Coverage) -> dict[str, int]:
        """The situations reached fewer than ``min_count`` times, with their counts, in vocabulary order."""
        return {s: n for s in self.situations if (n := cov.counts.get(s, 0)) < self.min_count}  # type: ignore[call-overload]

    def gaps(self, cov: Coverage) -> list[str]:
        """``["reached fewer than 3 times: claim-after-expiry (1), ..."]``, or nothing when the goal is met."""
        short = self.short(cov)
        if not short:
            return []
        return [f"reached fewer than {self.min_count} times: " + ", ".join(f"{s} ({n})" for s, n in short.items())]

    def to_json(self, cov: Coverage) -> dict[str, Any]:
        """results.json's ``coverage.goal`` (the run's clock figures are the runner's to add)."""
        return {"min_count": self.min_count, "strict": self.strict, "short": self.short(cov)}


#: what a job queue's own workers bring about (a queue run, ``lease_expiry: "queue"``): a redelivered job's earlier
#: execution writing or returning in each phase of the newer one. Its executions neither release nor read a job, and
#: its claims are bounded by the enqueue alone, so no claim is timed against a ttl (the library's timers are its own)
QUEUE_WORKLOAD_SITUATIONS = tuple(f"zombie-{f}-{phase}" for f in ("effect", "commit")
                                  for phase in ("before-new-effect", "while-new-runs", "after-new-ends"))


def applicable(kinds: Sequence[FaultKind], require: Sequence[str] = (), resource_read: bool = True,
               queue: bool = False) -> list[str]:
    """The situations a run with these faults should reach: the workload's, each fault's own (required) and those it
    makes likely (sought: reported when missing, not required), and those it was told to reach (``--require``), in
    vocabulary order. ``resource_read``: the target reads its protected resource back; without, the situations of a
    ``read-resource`` op cannot happen (:data:`RESOURCE_SITUATIONS`), and a run must not wait for them. ``queue``: a
    job queue's run, whose workload's are :data:`QUEUE_WORKLOAD_SITUATIONS`."""
    workload = QUEUE_WORKLOAD_SITUATIONS if queue else WORKLOAD_SITUATIONS
    wanted = set(workload) | {s for situations in required(kinds, require).values() for s in situations}
    wanted |= {s for kind in kinds for s in kind.seeks if resource_read or s not in RESOURCE_SITUATIONS}
    return [s for s in SITUATIONS if s in wanted]


def header_faults(header: Header) -> tuple[FaultKind, ...]:
    """The faults a history's header says its run asked for (``"nemesis"``; names this version does not know are left out)."""
    names = header.meta.get("nemesis")
    if not isinstance(names, list):
        return ()
    return tuple(FAULTS[name] for name in names if isinstance(name, str) and name in FAULTS)


def coverage_goal(kinds: Sequence[FaultKind], require: Sequence[str] = (), min_count: int = 3,
                  strict: bool = False, resource_read: bool = True) -> CoverageGoal:
    """The ``--until-covered`` goal of a run with these faults: every :func:`applicable` situation ``min_count`` times."""
    return CoverageGoal(tuple(applicable(kinds, require, resource_read)), min_count, strict)


def coverage_json(cov: Coverage, kinds: Sequence[FaultKind], require: Sequence[str] = (),
                  goal: dict[str, Any] | None = None, resource_read: bool = True, queue: bool = False) -> dict[str, Any]:
    """results.json's ``coverage``: every count, what applies to the run, what of that never happened, and why it
    applies (by fault; ``--require`` for those the run was told to reach; ``sought``: by fault, those it makes likely
    but does not require); ``goal``: with ``--until-covered``, its count, what stayed short of it and when it was met
    (null without); ``queue``: a job queue's run (:func:`applicable`)."""
    wanted = applicable(kinds, require, resource_read, queue)
    return {
        "counts": cov.to_json(),
        "applicable": wanted,
        "missing": cov.missing(wanted),
        "required": {why: list(situations) for why, situations in required(kinds, require).items()},
        "sought": {kind.name: list(kind.seeks) for kind in kinds if kind.seeks},
        "goal": goal,
    }
