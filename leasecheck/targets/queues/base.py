"""What leasecheck needs from a job queue or durable-execution runtime: one small class per library.

A lock library is driven by leasecheck's workers (:class:`~leasecheck.targets.base.Target`);
a job queue is the other way round: the library's own worker processes take the
jobs and call the task, as its users run it. So the adapter says how to start one
of the library's real workers (:meth:`QueueLibrary.worker_command`), how to enqueue
jobs (:meth:`QueueLibrary.enqueue`) and how to read a job's state as the library
reports it (:meth:`QueueLibrary.state`); its task function, registered with the
library in the adapter's module, hands each execution to
:func:`leasecheck.targets.queues.task.execute` with the library's execution identity
(its attempt number, execution id or delivery tag). Everything else (recording,
effects, stalls, faults, the history) is leasecheck's and the same for every library.

Times are the library's: ``ttl_ms`` is the timeout after which the library
judges an execution lost and runs the job again (visibility timeout, heartbeat
timeout, abandoned-job sweep), and the adapter scales the library's settings to it.

This is a public protocol, as :mod:`leasecheck.targets.base` is for a lock: a queue
leasecheck does not ship is audited by a subclass in its own package, named on the
command line (``leasecheck audit my_package.queue:MyQueue``) or declared in the entry
point group ``leasecheck.queues`` (:mod:`leasecheck.targets.queues.registry`), with its
plans in ``audits`` (docs/auditing.md, "Auditing a job queue of your own").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from leasecheck.histories.vocabulary import Status
from leasecheck.targets.audits import AuditPlan

#: how a task uses the library: as documented, or with its effects and completion fenced by the library's number
Mode = Literal["documented", "fenced"]


@dataclass(frozen=True)
class QueueConfig:
    """Where the broker is and how the run's jobs behave, as the harness gives it to the adapter."""

    #: the broker's (or database's) address: ``redis://…``, a Postgres DSN or Temporal's ``host:port``
    url: str
    #: after how long the library judges a silent execution lost (its timeouts are scaled to this)
    ttl_ms: int
    mode: Mode = "documented"
    #: a name unique to this run: queue names, key prefixes and tables include it (a reused broker)
    run_id: str = "lc"
    #: where the library may keep files of its own (a SQLite broker, a worker's log)
    work_dir: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ttl_s(self) -> float:
        return self.ttl_ms / 1000


@dataclass(frozen=True)
class JobState:
    """A job as the library reports it. ``result`` is the task's return value when the library stored one."""

    status: Status | Literal["FAILED", "OTHER"]
    result: str | None = None


class QueueLibrary(ABC):
    """A job queue under audit. Subclass it (in your own package, or in ``leasecheck/targets/queues/`` for one
    leasecheck ships) and name it by ``module:Class`` or an entry point of the group ``leasecheck.queues``.

    ``broker`` names the server leasecheck starts for it (``redis``, ``postgres`` or ``temporal``).
    ``identity`` says what the library hands each execution: ``"attempt"`` (a
    number that grows with every execution of a job: it is the history's epoch,
    and the fenced mode fences with it) or ``"id"`` (an opaque execution id: the
    history's token; such a library has no fenced mode). ``heartbeat``: the task
    calls the library's own heartbeat while it works (recorded as ``renew``).
    """

    name: ClassVar[str]
    #: the distribution on PyPI (its installed version is published with each finding)
    library: ClassVar[str]
    broker: ClassVar[Literal["redis", "postgres", "temporal"]]
    identity: ClassVar[Literal["attempt", "id"]] = "id"
    heartbeat: ClassVar[bool] = False
    #: the import names the adapter needs, and the extra that installs them
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str] = "queues"
    #: one plan per mode (``documented`` first)
    audits: ClassVar[tuple[AuditPlan, ...]] = ()

    def __init__(self, config: QueueConfig) -> None:
        self.config = config

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        """Why this library cannot time out executions after ``ttl_ms`` (one line), or None."""
        return None

    @abstractmethod
    def setup(self) -> None:
        """Make the broker ready for this run (schema, queues); idempotent."""

    @abstractmethod
    def worker_command(self, slot: int) -> list[str]:
        """The argv of one of the library's real worker processes, as its docs start it (one job at a time).

        The harness runs it with the environment of :mod:`leasecheck.targets.queues.task` set, in its own
        process group, and stops it with SIGTERM (SIGKILL after a grace period)."""

    def worker_env(self) -> dict[str, str]:
        """Extra environment for the worker processes (settings the library reads from the environment)."""
        return {}

    @abstractmethod
    def enqueue(self, jobs: list[str]) -> None:
        """Enqueue one job per name, its task called with the name; each job's id is its name where the library allows."""

    @abstractmethod
    def state(self, job: str) -> JobState | None:
        """The job as the library reports it now (None: the library does not know it)."""

    def close(self) -> None:
        """Release connections."""

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else ""
