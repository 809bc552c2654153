"""chancy (0.26): a Postgres job queue; its ``Recovery`` plugin re-queues the running jobs of workers whose heartbeat stopped.

What chancy promises, and when it runs a job again (chancy 0.26.0 source):

* Recovery is by worker, not by job: "Recovers jobs that appear to be abandoned
  by a worker. Typically, this happens when a worker is unexpectedly
  terminated, or has otherwise been lost which we recognize by checking the
  last seen timestamp of the worker heartbeat" (``plugins/recovery.py``). The
  leader's ``Recovery`` sets every ``running`` job whose ``taken_by`` worker
  has no ``last_seen`` within ``heartbeat_timeout`` back to ``pending``
  (``claim_id = NULL``, ``max_attempts = max_attempts + 1``). A job that is
  merely slow in a live worker is never taken away (there is no visibility
  timeout; a ``Limit.Type.TIME`` limit raises in the job, it does not hand it
  on).
* "Recovery invalidates the old execution's claim [...]. Late updates from the
  old claim are discarded even if it keeps running": every claim writes a
  fresh ``claim_id = gen_random_uuid()`` (``Worker.fetch_jobs``) and a job's
  update lands only ``WHERE id = … AND claim_id IS NOT DISTINCT FROM …``
  (``Worker.flush``). A zombie's completion (and its ``meta``) is refused; its
  effects are its own.

So the queue runs its jobs on the ``AsyncExecutor`` (the worker's own event
loop, one job at a time): the seed's stall blocks that loop, heartbeat and all,
as a pause of the process does, and the worker falls silent. Any worker
process that is silent (a pause) is judged the same way whatever the executor.

Identity: the execution's ``claim_id`` (``identity = "id"``). ``attempts`` is
no attempt number of the execution: it grows when an execution *finishes*
(``Executor.on_job_completed``: ``attempts=job.attempts + 1``), and recovery
leaves it alone, so a recovered job's second execution sees the same
``attempts`` as the lost one (observed: both 0).

Times, scaled to the ttl T (whole seconds: chancy's ``heartbeat_timeout`` is an
``INTERVAL`` of seconds): heartbeat every T/4, silent after T; leadership
renewed every T/4, lost after T/2 (a stalled leader must hand recovery over);
recovery polls every T/4; the queue polls every second (its
``polling_interval`` is an integer column).
"""

from __future__ import annotations

import asyncio
import math
import re
import sys
from typing import TYPE_CHECKING, Any, ClassVar

from leasecheck.targets.audits import REDELIVERED_JOB, AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary

if TYPE_CHECKING:
    from chancy import Chancy

#: chancy's job states as leasecheck reads them
_STATUS: dict[str, Any] = {"running": "RUNNING", "pending": "READY", "retrying": "READY", "failed": "FAILED"}
TASK = "leasecheck.targets.queues.chancy_queue_tasks.leasecheck_task"


def _app(url: str, prefix: str, ttl_s: float) -> Chancy:
    """The run's chancy application: its tables under ``prefix``, its recovery scaled to the ttl (the default plugins else)."""
    from chancy import Chancy
    from chancy.plugins.leadership import Leadership
    from chancy.plugins.recovery import Recovery

    return Chancy(url, prefix=prefix, plugins=[
        Leadership(poll_interval=ttl_s / 4, timeout=ttl_s / 2),  # float seconds work
        Recovery(poll_interval=ttl_s / 4),
    ])


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "chancy's leader resets the running jobs of a worker whose heartbeat went silent while it may still "
    "run them; its completion is fenced by claim_id, but the stale execution's effects are not. Fence "
    "every effect with a number of your own per execution."
)


class ChancyQueue(QueueLibrary):
    """chancy with its Recovery plugin: the running jobs of a worker silent for a ttl go back to pending; stale claims' updates dropped."""

    name = "chancy"
    library = "chancy"
    broker = "postgres"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="chancy", mode="documented",
            faults=(
                FaultAudit("none", "invalid", REDELIVERED_JOB),
                FaultAudit("pause", "invalid", REDELIVERED_JOB),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "id"
    requires = ("chancy",)

    #: the queue every worker also declares for itself at start (``Worker.start``: ``declare(Queue(name="default"))``,
    #: which leaves an existing one as it is): ours, so no worker starts a second executor
    QUEUE: ClassVar[str] = "default"

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        if ttl_ms < 1000 or ttl_ms % 1000:
            return f"chancy's heartbeat timeout is whole seconds: --ttl must be a multiple of 1000 ms, not {ttl_ms}"
        return None

    def __init__(self, config: QueueConfig) -> None:
        if (problem := self.ttl_problem(config.ttl_ms)) is not None:
            raise ValueError(problem)
        super().__init__(config)
        self.prefix = "lc_" + re.sub(r"\W", "_", config.run_id).lower() + "_"
        self._chancy: Chancy | None = None

    def chancy(self) -> Chancy:
        """A synchronous handle (chancy's ``sync_*`` calls) for enqueue and state."""
        if self._chancy is None:
            self._chancy = _app(self.config.url, self.prefix, self.config.ttl_s)
            self._chancy.sync_pool.open()
        return self._chancy

    def setup(self) -> None:
        """``chancy.migrate()`` (core and plugin tables) and the queue: one job at a time on the worker's event loop."""
        from chancy import Chancy, Queue

        async def prepare() -> None:
            async with _app(self.config.url, self.prefix, self.config.ttl_s) as chancy:
                await chancy.migrate()
                await chancy.declare(Queue(name=self.QUEUE, concurrency=1, executor=Chancy.Executor.Async,
                                           polling_interval=1), upsert=True)

        asyncio.run(prepare())

    def worker_command(self, slot: int) -> list[str]:
        code = (f"from leasecheck.targets.queues.chancy_queue import serve; "
                f"serve({self.config.url!r}, {self.prefix!r}, {self.config.ttl_ms})")
        return [sys.executable, "-c", code]

    def enqueue(self, jobs: list[str]) -> None:
        from chancy import Job

        chancy = self.chancy()
        for name in jobs:  # chancy's ids are its own uuids: the name is the job's unique key
            chancy.sync_push(Job(func=TASK, kwargs={"name": name}, queue=self.QUEUE, unique_key=name))

    def state(self, job: str) -> JobState | None:
        """The job as ``sync_get_job`` reads it, found by its unique key (the watcher is another instance than the producer)."""
        from chancy import Reference
        from psycopg import sql

        from leasecheck.targets.queues.chancy_queue_tasks import RESULT_KEY

        chancy = self.chancy()
        query = sql.SQL("SELECT id FROM {} WHERE unique_key = %s ORDER BY created_at DESC LIMIT 1").format(
            sql.Identifier(f"{self.prefix}jobs"))
        with chancy.sync_pool.connection() as conn:
            row = conn.execute(query, (job,)).fetchone()
        found = chancy.sync_get_job(Reference(row[0])) if row is not None else None
        if found is None:
            return None
        if found.state.value == "succeeded":
            result = found.meta.get(RESULT_KEY)
            return JobState("SUCCEEDED", None if result is None else str(result))
        return JobState(_STATUS.get(found.state.value, "OTHER"))

    def close(self) -> None:
        if self._chancy is not None:
            self._chancy.sync_pool.close()
            self._chancy = None


def serve(url: str, prefix: str, ttl_ms: int) -> None:
    """One worker process, as chancy's ``Worker`` docs start one (``async with Worker(chancy) as worker``).

    Not ``chancy worker start``: that CLI takes no heartbeat settings. The worker
    id is chancy's default, a fresh uuid per process, so a restarted slot is a
    new worker and its predecessor's jobs are judged by the old id's silence.
    SIGTERM starts chancy's own graceful stop."""
    from chancy import Worker

    ttl_s = ttl_ms / 1000

    async def main() -> None:
        async with _app(url, prefix, ttl_s) as chancy, Worker(
            chancy,
            heartbeat_poll_interval=ttl_s / 4,  # float seconds work
            heartbeat_timeout=math.ceil(ttl_s),
            queue_change_poll_interval=1,
            shutdown_timeout=math.ceil(ttl_s),
        ) as worker:
            await worker.wait_for_shutdown()

    asyncio.run(main())
