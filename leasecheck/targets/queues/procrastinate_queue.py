"""procrastinate (Postgres, psycopg 3): its workers retry stalled jobs only through a periodic task the user writes.

What procrastinate 3.10 promises and how it recovers (the installed code; its
docs' "Retry stalled jobs" how-to says the same):

* A worker that stops without a regular shutdown leaves its jobs ``doing``
  "forever": "if no specific action is taken, these *stalled* jobs will remain
  in the queue forever, and their execution will never resume" (the how-to).
* Every worker updates a heartbeat row of its own (``Worker._update_heartbeat``,
  worker.py:481-490, every ``update_heartbeat_interval``, default 10 s), on the
  worker's event loop. ``JobManager.get_stalled_jobs(seconds_since_heartbeat=…)``
  (manager.py:223-272) returns the ``doing`` jobs of workers whose heartbeat is
  older than that (default 30 s), and ``retry_job`` puts each back to ``todo``
  with ``attempts + 1`` (``procrastinate_retry_job_v2``, sql/schema.sql:364-402).
  Who calls them is the user's: the how-to's recipe is a periodic task of the
  app (``@app.periodic(...) @app.task(queueing_lock="retry_stalled_jobs", pass_context=True)``),
  which is what :mod:`.procrastinate_tasks` registers, scaled to the ttl: beat
  every ttl/4, stalled after one ttl without a beat, checked every
  ``max(1, ttl/2)`` s (cron's 6th column is seconds, blueprints.py:370), and
  deferred with a high priority so a backlog of older jobs cannot hold it back
  (``fetch_job_v2`` takes the highest priority, then the lowest id).
  ``stalled_worker_timeout`` (pruning of dead workers at a worker's start) is one
  ttl too, and ``fetch_job_polling_interval`` ttl/4: a retried job is an UPDATE,
  which sends no NOTIFY (only INSERT does, sql/schema.sql's triggers), so
  workers find it by polling.
* The beat is the worker's, not the job's: a *sync* task runs in a thread
  (``utils.sync_to_async``, worker.py:311) while the loop keeps beating, so a
  stalled sync task is never judged stalled (a lease held while the process
  runs). The task here is ``async`` (``execute_async``): its stall blocks the
  loop, beats and all, as a real pause of the worker does.
* Identity: ``context.job.attempts`` counts ended executions from 0 (``retry_job``
  and ``finish_job`` both add 1 when the job was ``doing``), and only a retried
  job is fetched again, so each execution of a job sees a larger number: the
  epoch is ``attempts + 1``.
* Finishing checks nothing about who finishes: ``procrastinate_finish_job_v1``
  (sql/schema.sql:264-292) is ``UPDATE … WHERE id = job_id AND status IN
  ('todo', 'doing')``, so a stale worker's finish is accepted while another
  worker runs the job (or while it waits, retried, in ``todo``), and the new
  owner's finish then raises "Job was not found or not in "doing" or "todo"
  status". The same holds for a failure (the fenced mode's refusal).
* Results: procrastinate stores no return value (the job row has none; the
  worker only logs it, worker.py:229-230). :meth:`Procrastinate.state` reports
  the status alone, ``result`` None.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from leasecheck.histories.vocabulary import Status
from leasecheck.targets.audits import REDELIVERED_JOB, AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary

if TYPE_CHECKING:
    import procrastinate

#: the environment variable carrying :class:`Settings` to the workers (JSON)
ENV = "LEASECHECK_PROCRASTINATE"
#: the task's name (what a job row names; the worker finds it in its app)
TASK = "leasecheck_task"
#: the stalled-job retry's name (the how-to's periodic task)
RETRY_TASK = "leasecheck_retry_stalled_jobs"
#: the module the worker's ``--app`` names
APP = "leasecheck.targets.queues.procrastinate_tasks.app"

#: procrastinate's job statuses as leasecheck reads them
STATUSES: dict[str, Status | Literal["FAILED"]] = {"todo": "READY", "doing": "RUNNING", "succeeded": "SUCCEEDED", "failed": "FAILED"}


@dataclass(frozen=True)
class Settings:
    """What the adapter tells its workers' app: where the database is, the run's schema and queue, the ttl."""

    dsn: str = ""
    schema: str = "public"
    queue: str = "leasecheck"
    ttl_s: float = 30.0

    @classmethod
    def from_env(cls) -> Settings:
        """The workers' settings (defaults when unset, so that importing the app never fails)."""
        raw = os.environ.get(ENV)
        return cls(**json.loads(raw)) if raw else cls()

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """psycopg's connection arguments: every query of the library runs in the run's schema."""
        return {"options": f"-c search_path={self.schema}"}

    @property
    def retry_every_s(self) -> int:
        """How often the stalled-job retry runs: half a ttl, in whole seconds (cron's finest step)."""
        return max(1, int(self.ttl_s / 2))


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "procrastinate's stalled-job retry runs the job again while the stalled worker may still run it, and "
    "finishing checks only that the job is todo or doing: a stale worker's finish is accepted and the "
    "current one's refused. Fencing the effects by attempts, and refusing to finish when a newer attempt "
    "wrote, held on every audited seed; a stale refusal can still be stored as the job's failure over the "
    "current attempt's success (seen outside the audit): finish through a conditional update of your own."
)


class Procrastinate(QueueLibrary):
    """procrastinate with the docs' stalled-job retry as a periodic task, heartbeat-based, scaled to the ttl."""

    name = "procrastinate"
    library = "procrastinate"
    broker = "postgres"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="procrastinate", mode="documented",
            faults=(
                FaultAudit("none", "invalid", REDELIVERED_JOB),
                FaultAudit("pause-store", "invalid", REDELIVERED_JOB),
                FaultAudit("kill-store", "invalid", REDELIVERED_JOB), FaultAudit("partition", "invalid", REDELIVERED_JOB),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
        AuditPlan(
            library="procrastinate", mode="fenced",
            faults=(
                FaultAudit("none", "valid"),
                FaultAudit("pause-store", "valid"), FaultAudit("kill-store", "valid"), FaultAudit("partition", "valid"),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "attempt"
    heartbeat = False  # the worker beats on its own; nothing a task can call
    requires = ("procrastinate", "psycopg")

    #: the stalled-job retry's priority: above every job of the run (theirs is 0)
    RETRY_PRIORITY: ClassVar[int] = 100

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        if ttl_ms < 2000:
            return (f"procrastinate's periodic tasks (its stalled-job retry) run at most once a second, 0.5 s late: "
                    f"--ttl must be at least 2000 ms, not {ttl_ms}")
        return None

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        run = "".join(c if c.isalnum() else "_" for c in config.run_id.lower())
        self.settings = Settings(dsn=config.url, schema=f"lc_procrastinate_{run}", queue=f"lc_{run}",
                                 ttl_s=config.ttl_s)
        self._app: procrastinate.App | None = None
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()  # the watcher may read states from another thread

    def _open(self) -> procrastinate.App:
        if self._app is None:
            import procrastinate

            connector = procrastinate.SyncPsycopgConnector(conninfo=self.settings.dsn, kwargs=self.settings.connect_kwargs,
                                                           min_size=1, max_size=2)
            self._app = procrastinate.App(connector=connector).open()
        return self._app

    def setup(self) -> None:
        """The run's schema, with procrastinate's own schema applied in it (once)."""
        import psycopg

        with psycopg.connect(self.settings.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.settings.schema}")
        with self._lock:
            app = self._open()
            if app.connector.get_sync_connector().execute_query_one(
                    query="SELECT to_regclass('procrastinate_jobs') AS found")["found"] is None:
                app.schema_manager.apply_schema()

    def worker_env(self) -> dict[str, str]:
        return {ENV: self.settings.to_env()}

    def worker_command(self, slot: int) -> list[str]:
        """``procrastinate --app=… worker``, one job at a time; heartbeat timings are in the app's worker_defaults."""
        return [sys.executable, "-m", "procrastinate", "--log-level=info", f"--app={APP}", "worker",
                f"--name=w{slot}", f"--queues={self.settings.queue}", "--concurrency=1",
                f"--fetch-job-polling-interval={self.settings.ttl_s / 4}"]

    def enqueue(self, jobs: list[str]) -> None:
        """One job per name, its task called with ``job=name`` (procrastinate numbers its jobs itself)."""
        with self._lock:
            app = self._open()
            deferrer = app.configure_task(name=TASK, queue=self.settings.queue)
            for job in jobs:
                self._ids[job] = deferrer.defer(job=job)

    def _job_id(self, app: procrastinate.App, job: str) -> int | None:
        """The row of job ``job`` (another instance may have enqueued it: found by its task's argument, then kept)."""
        if job not in self._ids:
            row = app.connector.get_sync_connector().execute_query_one(
                query="SELECT max(id) AS id FROM procrastinate_jobs"
                      " WHERE queue_name = %(queue)s AND task_name = %(task)s AND args->>'job' = %(job)s",
                queue=self.settings.queue, task=TASK, job=job)
            if row["id"] is None:
                return None
            self._ids[job] = int(row["id"])
        return self._ids[job]

    def state(self, job: str) -> JobState | None:
        """The job's status as procrastinate lists it; procrastinate stores no result (``result`` None)."""
        with self._lock:
            app = self._open()
            job_id = self._job_id(app, job)
            found = app.job_manager.list_jobs(id=job_id) if job_id is not None else []
        if not found:
            return None
        return JobState(STATUSES.get(found[0].status or "", "OTHER"))

    def close(self) -> None:
        with self._lock:
            if self._app is not None:
                self._app.close()
                self._app = None
