"""What an audit of a third-party library is: the published settings ``leasecheck audit`` runs.

A plan belongs to the adapter class it audits (``Target.audit``), so a library's
adapter, its mode and the verdict leasecheck publishes for it live in one
module, and ``leasecheck audit --list`` is read off the registered targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from leasecheck.histories.vocabulary import AnomalyKind, Situation

#: ``unknown`` is published too where a fault cannot test the library (a lock with no deadline under
#: pause: nothing is ever taken over); the run verdict's reason then says what never happened
Expected = Literal["valid", "invalid", "unknown"]


#: what a job queue that runs one job twice shows (a stalled execution redelivered while it still ran, both writing
#: and completing): the kinds most queue audits publish, named once
REDELIVERED_JOB: tuple[AnomalyKind, ...] = ("stale-effect", "stale-commit", "duplicate-commit", "lost-commit", "non-linearizable")


@dataclass(frozen=True)
class FaultAudit:
    """One fault of an audit (a ``--nemesis`` value) and the verdict every seed must reach under it."""

    nemesis: str
    expected: Expected
    #: kinds an ``invalid`` run must show: each such run shows at least one of them, and none outside them
    kinds: tuple[AnomalyKind, ...] = ()
    #: for ``unknown``: words the run verdict's reason must contain (what the fault never brought about)
    reason: str = ""
    #: coverage situations a run of this fault must reach before its verdict counts (``--require``): the finding
    #: needs them, and a run that never reached them tested nothing of it, so it goes on past its time limit while
    #: they are missing and ends ``unknown`` without them, never ``valid`` (a loaded machine reaches them later)
    require: tuple[Situation, ...] = ()
    #: run the fault on this cluster of the library's store (``--cluster``: ``zookeeper-ensemble``), not one server
    cluster: str | None = None

    @property
    def key(self) -> str:
        """How ``leasecheck audit --fault`` and AUDITS.md name it: ``pause``, or ``failover@zookeeper-ensemble`` on a cluster."""
        return f"{self.nemesis}@{self.cluster}" if self.cluster else self.nemesis


def faults_of(key: str) -> str:
    """The ``--nemesis`` part of a fault's key: ``failover@zookeeper-ensemble`` -> ``failover``."""
    return key.partition("@")[0]


@dataclass(frozen=True)
class AuditPlan:
    """One mode of one library's audit: what to run and what leasecheck found (AUDITS.md)."""

    #: the library's distribution name on PyPI (its installed version is read from it)
    library: str
    #: how the library is used: ``documented`` (as its README says) or a fenced way of using it
    mode: str
    #: the faults that matter for this library, each run on its own (one run per fault and seed)
    faults: tuple[FaultAudit, ...]
    #: the seeds of the published audit (the test suite runs the first, AUDITS.md's figures all)
    seeds: tuple[int, ...] = (1, 2, 3)
    #: the advice a finding ends with (or why the valid verdict holds)
    fix: str = ""
    #: seconds per run
    time_limit: float = 8.0
    #: other ``leasecheck run`` options (``ttl_ms``, ``concurrency``, ``dup_rate``, ...) as RunOptions fields;
    #: ``workload`` as a dict of Workload fields (``{"stall_rate": 0.0, "late_rate": 0.0}``: a library whose heartbeat
    #: runs on a thread of its own keeps its lock through the workload's own stalls and late writes, which stop only the
    #: worker's code)
    options: dict[str, Any] = field(default_factory=dict)
