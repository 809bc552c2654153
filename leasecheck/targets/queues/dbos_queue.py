"""DBOS Transact (``dbos`` 3.4): a workflow on a DBOS queue, run by ``DBOS.launch()`` worker processes on Postgres.

What DBOS promises, and when it runs a workflow again (docs.dbos.dev, "Workflow
Recovery" and "Concurrent Executions"; source of dbos 3.4.0):

* Nothing times an execution out. "If hosting an application on a single server
  without Conductor, each time you restart your application's process, DBOS
  recovers all workflows that were executing before the restart (all PENDING
  workflows)"; in a distributed setting "When an application with an executor
  ID restarts, it only recovers pending workflows assigned to that executor ID"
  (``DBOS._launch``: ``get_pending_workflows(GlobalParams.executor_id, ...)``).
  Another executor takes over a live or stalled one's workflows only when
  Conductor (a hosted service) "detects that an executor is unhealthy" (its
  connection gone for the executor timeout, 60 s by default); the admin
  server's ``/dbos-workflow-recovery`` that self-hosters used is gone from
  DBOS Python 3.0 (dbos-transact-py#853), and ``DBOS._recover_pending_workflows``
  is "Internal". A stalled task (the seed's ``time.sleep``) is therefore never
  re-run: its own execution finishes late, and a paused worker's too. Only the
  ``kill`` fault makes DBOS run a job again: the harness's replacement worker
  takes over the dead one's executor id (:func:`claim_executor_id`, what a
  supervisor does), so at launch it re-enqueues the workflows that id had
  PENDING ("Recovery re-enqueues rather than executing directly",
  ``_recovery.py``) and any worker of the queue takes them.
* "steps get at-least-once guarantees and workflow outcomes are persisted
  exactly-once": each dispatch writes a fresh ``owner_xid`` to the workflow's
  row, and a step's checkpoint and the workflow's outcome are written only
  while that token still owns the row (``SystemDatabase._check_owner_txn``,
  ``update_workflow_outcome``: "The write applies only to a PENDING row still
  owned by owner_xid"). A zombie's result is refused, its effects are not.

The task body (leasecheck's effects and its result) is one DBOS step, as DBOS
wants anything with side effects or a nondeterministic value (the result is a
fresh execution key) in a step; the workflow returns the step's output, which
DBOS stores as the workflow's output. The execution's identity is the
workflow's ``recovery_attempts``, which every dispatch raises by one (the
claim's ``recovery_attempts + 1``: "Count this dispatch against the DLQ
limit"): the attempt number.

Each worker runs one workflow at a time (``worker_concurrency=1``), polls the
queue every ttl/10 (at most 1 s: DBOS's default), and uses the run's own system
schema, application name and version, so a reused database is fine.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.queues.task import Identity, execute

if TYPE_CHECKING:
    from dbos import DBOSClient

#: the workflow's registered name (enqueue names it; recovery looks it up by it)
WORKFLOW = "leasecheck_task"
#: DBOS's workflow statuses as leasecheck reads them
_STATUS: dict[str, Any] = {
    "PENDING": "RUNNING",
    "ENQUEUED": "READY",
    "DELAYED": "READY",
    "ERROR": "FAILED",
    "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "FAILED",
    "CANCELLED": "OTHER",
}


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "DBOS resumes a workflow only when its executor restarts (a killed worker's replacement with its "
    "executor id): no live zombie, and the step's record is written only while the execution owns the "
    "workflow. A stalled executor is never taken over without DBOS Conductor."
)



#: DBOS under the broker's faults: no workflow was ever run again (none refused, none granted over an earlier one), so a
#: fault of Postgres tested nothing of its recovery and the run says so (bench/bench_queue_faults.py, seeds 1-3)
BROKER_UNTESTED = tuple(FaultAudit(fault, "unknown", reason="no contended claim")
                        for fault in ("pause-store", "kill-store", "partition"))

class Dbos(QueueLibrary):
    """DBOS Transact: a queued workflow whose body is one step; a worker's PENDING workflows recovered when it restarts."""

    name = "dbos"
    library = "dbos"
    broker = "postgres"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="dbos", mode="documented",
            faults=(
                FaultAudit("kill", "valid"),
                *BROKER_UNTESTED,
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
        AuditPlan(
            library="dbos", mode="fenced",
            faults=(
                FaultAudit("kill", "valid"),
                *BROKER_UNTESTED,
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "attempt"
    requires = ("dbos",)

    #: how long a worker waits between polls of the queue at most (DBOS's default)
    MAX_POLL_S: ClassVar[float] = 1.0

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        self._client: DBOSClient | None = None

    # the run's names: one DBOS application, schema and queue per run
    @property
    def app(self) -> str:
        return f"leasecheck-{self.config.run_id}"

    @property
    def schema(self) -> str:
        return "lc_dbos_" + re.sub(r"\W", "_", self.config.run_id).lower()

    @property
    def queue(self) -> str:
        return f"lc-{self.config.run_id}"

    @property
    def poll_s(self) -> float:
        return max(0.05, min(self.MAX_POLL_S, self.config.ttl_s / 10))

    def client(self) -> DBOSClient:
        if self._client is None:
            from dbos import DBOSClient

            self._client = DBOSClient(system_database_url=self.config.url, dbos_system_schema=self.schema,
                                      application_name=self.app)
        return self._client

    def setup(self) -> None:
        """The system schema (``DBOS.migrate``, what ``dbos migrate`` runs) and the queue (one workflow per worker)."""
        from dbos import DBOS

        DBOS.migrate(self.config.url, schema=self.schema)
        self.client().register_queue(self.queue, worker_concurrency=1, polling_interval_sec=self.poll_s,
                                     application_name=self.app)

    def worker_command(self, slot: int) -> list[str]:
        locks = str(Path(self.config.work_dir or tempfile.gettempdir()) / f"dbos-executors-{self.config.run_id}")
        args = [self.config.url, self.schema, self.app, self.queue, f"{self.config.run_id}-e", locks]
        code = f"from leasecheck.targets.queues.dbos_queue import serve; serve(*{args!r})"
        return [sys.executable, "-c", code]

    def enqueue(self, jobs: list[str]) -> None:
        client = self.client()
        for job in jobs:
            client.enqueue({"queue_name": self.queue, "workflow_name": WORKFLOW, "workflow_id": job}, job)

    def state(self, job: str) -> JobState | None:
        found = self.client().list_workflows(workflow_ids=[job], load_input=False)
        if not found:
            return None
        status = found[0]
        if status.status == "SUCCESS":
            return JobState("SUCCEEDED", None if status.output is None else str(status.output))
        return JobState(_STATUS.get(status.status, "OTHER"))

    def close(self) -> None:
        if self._client is not None:
            self._client.destroy()
            self._client = None


def _body(job: str) -> str:
    """The DBOS step: one execution of leasecheck's task, identified by the workflow's dispatch count."""
    from dbos import DBOS

    workflow_id = DBOS.workflow_id
    assert workflow_id is not None
    status = DBOS.get_workflow_status(workflow_id)  # inside a step: read as is, not checkpointed
    attempt = status.recovery_attempts if status is not None else None
    if attempt is None:
        raise RuntimeError(f"DBOS reports no recovery_attempts for workflow {workflow_id}")
    return execute(job, Identity(token=f"{workflow_id}#{attempt}", epoch=int(attempt)))


def _workflow(job: str) -> str:
    """The DBOS workflow: its output is the step's (the result of the execution whose checkpoint landed)."""
    from dbos import DBOS

    result: str = DBOS.run_step({"name": "leasecheck_body"}, _body, job)
    return result


def claim_executor_id(prefix: str, locks: str) -> tuple[str, int]:
    """The first executor id no live worker holds (``prefix`` + n), and the open lock file that holds it.

    What a supervisor does for DBOS ("assign each executor [...] an executor
    ID"; a restarted process keeps it): the harness replaces a killed worker
    with a new slot, and the new process takes over the dead one's id, whose
    lock the kernel released, so DBOS's start-up recovery finds its PENDING
    workflows. A paused worker keeps its lock, and its id."""
    folder = Path(locks)
    folder.mkdir(parents=True, exist_ok=True)
    for n in itertools.count():
        fd = os.open(folder / f"{n}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return f"{prefix}{n}", fd
    raise AssertionError("unreachable")


def serve(url: str, schema: str, app: str, queue: str, executor_prefix: str, locks: str) -> None:
    """One worker process, as DBOS's docs start one: configure, register, ``DBOS.launch()``, then live until signalled.

    Its executor id is a dead worker's if there is one (:func:`claim_executor_id`):
    its start-up recovery then re-enqueues what that worker left PENDING.
    SIGTERM ends the process at once (Python's default), leaving its workflows
    PENDING, as a crash would."""
    from dbos import DBOS

    executor_id, _held = claim_executor_id(executor_prefix, locks)
    DBOS(config={
        "name": app,
        "system_database_url": url,
        "dbos_system_schema": schema,
        "executor_id": executor_id,
        "application_version": app,  # one version for every worker: recovery and dequeue match on it
        "run_migrations": False,  # setup() migrated
    })
    DBOS.workflow(name=WORKFLOW)(_workflow)
    DBOS.listen_queues([queue])
    DBOS.launch()
    threading.Event().wait()
