"""pgqueuer (Postgres): a job whose heartbeat goes stale is re-picked by any worker; the job row's id is all it checks.

What pgqueuer 1.6.0 does (the installed code; its guides "Heartbeat Monitoring"
and "Reliability Model" describe the same under the older per-entrypoint name
``retry_timer``, which 1.6.0 no longer has):

* While a job is ``picked``, the worker's ``Heartbeat`` task (core/heartbeat.py)
  beats every ``heartbeat_timeout / 2`` through a buffer flushed every
  ``heartbeat_timeout / 8`` (core/qm.py:427-435, 549-553), on the worker's event
  loop. The dequeue query also claims "Stale picked jobs whose heartbeat timed
  out" (``next_stale``: ``status = 'picked' AND heartbeat < NOW() -
  heartbeat_timeout``, adapters/persistence/qb.py:424-438): ``pgq run
  --heartbeat-timeout`` is "Seconds without a heartbeat before a job is re-picked
  by another worker" (adapters/cli/cli.py:557-561, default 30). The guide warns:
  "A job recovered via ``retry_timer`` **will run again from the start**."
  Here the heartbeat timeout is one ttl, and the dequeue timeout ttl/4: a
  stale job sends no NOTIFY, workers find it when they poll. The workers run as
  ``pgq run`` runs them, through ``pgqueuer.run`` (:func:`run_worker`: the CLI
  itself fails under typer 0.29).
* One job at a time is not possible: ``QueueManager.run`` refuses
  ``max_concurrent_tasks`` below twice the batch size ("max_concurrent_tasks must
  be at least twice the batch size.", core/qm.py:419-420), and without it a
  worker takes every queued job. The closest is ``--batch-size 1
  --max-concurrent-tasks 2``: a worker holds at most two jobs, and a stall of
  one (a blocked loop) stalls the other too, which is then re-picked as well.
* Entrypoints must be ``async`` (core/executors.py:82-89); the stall of
  ``execute_async`` blocks the loop, heartbeats and all, as a pause does.
* Identity: none per execution. A re-pick sets ``queue_manager_id`` (the
  worker's uuid) and ``updated`` and leaves ``attempts`` alone (only
  ``RetryRequested`` adds 1), so the token is ``<job id>/<queue_manager_id>/<updated>``:
  no fenced mode. The worker's uuid alone would not do: a worker re-picks a job
  it has just run when the row's heartbeat is stale and the completion is still
  in its status buffer (``JobStatusLogBuffer``; the job's context is already
  forgotten, core/qm.py:152-163, 471-480): as it wakes from a stall, or when the
  loop stalls on its other job before the buffer is flushed. The job then runs
  a second time in that worker (seen in the smoke runs and the harness).
* Heartbeat and completion are by job id alone: ``UPDATE … SET heartbeat = NOW()
  WHERE id = ANY($1)`` (qb.py:752-753), and completion deletes the row ``WHERE id
  = ANY(…)`` and logs the status (``build_log_job_query``, qb.py:677-713),
  whoever holds the job now. A zombie's beats keep the new owner's row fresh,
  and the first of the two to finish removes the job; the other's completion
  finds no row and is dropped without a word (the log INSERT joins on the
  deleted rows).
* Results: none. An entrypoint returns ``None`` (``AsyncEntrypoint``); the log
  table ``pgqueuer_log`` keeps (job_id, status, created), the statistics table
  counts. :meth:`Pgqueuer.state` reads the job's latest log status with the
  library's own query (``build_job_status_query``), ``result`` None.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from leasecheck.histories.vocabulary import Status
from leasecheck.targets.audits import REDELIVERED_JOB, AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.queues.task import Identity, execute_async

if TYPE_CHECKING:
    import psycopg
    from pgqueuer.adapters.persistence.qb import DBSettings

#: the entrypoint leasecheck's jobs name
ENTRYPOINT = "leasecheck_task"
#: the factory ``pgq run`` loads in each worker
FACTORY = "leasecheck.targets.queues.pgqueuer_queue:create_pgqueuer"
#: the workers' database (pgqueuer's own variable name; the schema and channel are its PGQUEUER_SCHEMA/_CHANNEL)
DSN_ENV = "PGQUEUER_DSN"

#: pgqueuer's log statuses as leasecheck reads them
STATUSES: dict[str, Status | Literal["FAILED"]] = {
    "queued": "READY", "picked": "RUNNING", "successful": "SUCCEEDED", "exception": "FAILED", "failed": "FAILED",
}


async def leasecheck_task(job: Any) -> None:
    """leasecheck's task for one execution of a pgqueuer job (its payload is the job's name).

    The token is what the library knows of this pick: the row, the worker that
    picked it (``queue_manager_id``) and when (``updated``, set by every claim);
    a worker may pick its own job again. Nothing is returned: a pgqueuer
    entrypoint returns ``None`` and nothing would store a result."""
    token = f"{job.id}/{job.queue_manager_id}/{job.updated.isoformat()}"
    await execute_async(job.payload.decode(), Identity(token=token))


@asynccontextmanager
async def create_pgqueuer() -> AsyncIterator[Any]:
    """The worker's ``PgQueuer``, as the docs' factories make it (psycopg, autocommit), with the task registered."""
    import psycopg
    from pgqueuer import PgQueuer

    async with await psycopg.AsyncConnection.connect(os.environ[DSN_ENV], autocommit=True) as conn:
        pgq = PgQueuer.from_psycopg_connection(conn)
        pgq.entrypoint(ENTRYPOINT, accepts_context=False)(leasecheck_task)
        yield pgq


def run_worker(ttl_s: float) -> None:
    """One worker, exactly as ``pgq run FACTORY --batch-size 1 --max-concurrent-tasks 2 --heartbeat-timeout <ttl>
    --dequeue-timeout <ttl/4>`` runs it (adapters/cli/cli.py:599-617: its logger, its event loop, ``pgqueuer.run``).

    Not the CLI itself: under typer 0.29 ``pgq run`` fails before it starts (its ``--log-level`` option reaches
    ``setup_fancy_logger`` as a str: "'str' object has no attribute 'name'"); typer 0.28 and older are fine."""
    from datetime import timedelta

    import pgqueuer
    from pgqueuer.adapters.cli.cli import asyncio_run
    from pgqueuer.core import logconfig

    logconfig.setup_fancy_logger(logconfig.LogLevel.INFO)
    asyncio_run(pgqueuer.run(FACTORY, batch_size=1, max_concurrent_tasks=2, heartbeat_timeout=timedelta(seconds=ttl_s),
                             dequeue_timeout=timedelta(seconds=ttl_s / 4)))


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "pgqueuer retries a job whose heartbeat stopped while it may still run, and its heartbeat and "
    "completion update by job id alone: a stale worker's completion ends the new owner's execution and "
    "its heartbeat keeps a frozen owner's job alive. Fence every write with a number of your own per "
    "execution."
)


class Pgqueuer(QueueLibrary):
    """pgqueuer re-picking jobs whose heartbeat is a ttl old (``pgq run --heartbeat-timeout``)."""

    name = "pgqueuer"
    library = "pgqueuer"
    broker = "postgres"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="pgqueuer", mode="documented",
            faults=(
                FaultAudit("none", "invalid", REDELIVERED_JOB),
                FaultAudit("pause-store", "invalid", REDELIVERED_JOB),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "id"
    heartbeat = False  # the worker beats for every job it holds; nothing a task can call
    requires = ("pgqueuer", "psycopg")

    #: leasecheck's own table (in the run's schema): job name → pgqueuer's job id
    IDS: ClassVar[str] = "leasecheck_job_ids"

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        run = "".join(c if c.isalnum() else "_" for c in config.run_id.lower())
        self.schema = f"lc_pgqueuer_{run}"
        self.channel = f"lc_pgqueuer_{run}"
        self._conn: psycopg.Connection[Any] | None = None
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()  # the watcher may read states from another thread

    def _settings(self) -> DBSettings:
        from pgqueuer.adapters.persistence.qb import DBSettings
        from pgqueuer.domain.types import Channel

        return DBSettings(db_schema=self.schema, channel=Channel(self.channel))

    def _connection(self) -> psycopg.Connection[Any]:
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.config.url, autocommit=True)
        return self._conn

    def setup(self) -> None:
        """pgqueuer's schema in the run's own Postgres schema (``Queries.install``, as ``pgq install`` does; once).

        Plus a table of leasecheck's own, ``name → job id``: pgqueuer deletes a finished job's row (payload and
        all) and its log keeps only the id, so any instance of the adapter finds a job's id there."""

        async def install() -> None:
            import psycopg
            from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
            from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment, QueryQueueBuilder
            from pgqueuer.adapters.persistence.queries import Queries

            settings = self._settings()
            async with await psycopg.AsyncConnection.connect(self.config.url, autocommit=True) as conn:
                queries = Queries(PsycopgDriver(conn), qbe=QueryBuilderEnvironment(settings),
                                  qbq=QueryQueueBuilder(settings))
                if not await queries.schema_is_installed():
                    await queries.install(create_schema=True)
                await conn.execute(f"CREATE TABLE IF NOT EXISTS {self.schema}.{self.IDS} "
                                   "(name text PRIMARY KEY, job_id bigint NOT NULL)")

        asyncio.run(install())

    def worker_env(self) -> dict[str, str]:
        return {DSN_ENV: self.config.url, "PGQUEUER_SCHEMA": self.schema, "PGQUEUER_CHANNEL": self.channel}

    def worker_command(self, slot: int) -> list[str]:
        """What ``pgq run <factory>`` runs (:func:`run_worker`): one job per dequeue, at most two held, re-picked a ttl after the last beat."""
        return [sys.executable, "-c", f"from {__name__} import run_worker; run_worker({self.config.ttl_s!r})"]

    def enqueue(self, jobs: list[str]) -> None:
        """One job per name, the name as payload; the ids noted in the same transaction (pgqueuer numbers its jobs)."""
        from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
        from pgqueuer.adapters.persistence.qb import QueryQueueBuilder
        from pgqueuer.adapters.persistence.queries import SyncQueries

        with self._lock:
            conn = self._connection()
            with conn.transaction():
                queries = SyncQueries(SyncPsycopgDriver(conn), qbq=QueryQueueBuilder(self._settings()))
                ids = queries.enqueue([ENTRYPOINT] * len(jobs), [job.encode() for job in jobs], [0] * len(jobs))
                with conn.cursor() as cur:
                    cur.executemany(f"INSERT INTO {self.schema}.{self.IDS} (name, job_id) VALUES (%s, %s)",
                                    list(zip(jobs, ids)))
            self._ids.update(zip(jobs, ids))

    def _job_id(self, job: str) -> int | None:
        if job not in self._ids:
            row = self._connection().execute(f"SELECT job_id FROM {self.schema}.{self.IDS} WHERE name = %s",
                                             (job,)).fetchone()
            if row is None:
                return None
            self._ids[job] = int(row[0])
        return self._ids[job]

    def state(self, job: str) -> JobState | None:
        """The job's latest status in pgqueuer's log (its ``job_status`` query); pgqueuer stores no result."""
        from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
        from pgqueuer.adapters.persistence.qb import QueryQueueBuilder

        with self._lock:
            job_id = self._job_id(job)
            if job_id is None:
                return None
            rows = SyncPsycopgDriver(self._connection()).fetch(
                QueryQueueBuilder(self._settings()).build_job_status_query(), [job_id])
        if not rows:
            return None
        return JobState(STATUSES.get(str(rows[0]["status"]), "OTHER"))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
