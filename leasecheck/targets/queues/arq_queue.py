"""arq (0.28) on Redis: "pessimistic execution", the in-progress key's expiry the only recovery of a stalled job.

arq's docs (``docs/index.rst``): "jobs aren't removed from the queue until
they've either succeeded or failed. If the worker shuts down, the job will be
cancelled immediately and will remain in the queue to be run again [...] All
*arq* jobs should therefore be designed to cope with being called repeatedly";
"*arq* favours multiple times over zero times".

Recovery: a running job stays in the queue's sorted set; what keeps other
workers off it is ``arq:in-progress:<job_id>``, set once with
``PSETEX in_progress_timeout_s`` when a worker starts it (``arq/worker.py:465``)
and never renewed. ``in_progress_timeout_s`` is ``job_timeout + 10`` s
(``worker.py:276-277``). ``job_timeout`` is ``asyncio.wait_for``, which cannot
interrupt a task that blocks the event loop (``time.sleep``, a GC pause): a
stalled job is run again only when its in-progress key expires and another
worker's poll (``worker.py:450-465``) finds it still queued. No health check,
heartbeat or sweep takes part (the health-check key is a status report only).

Scaled: the in-progress key lives one ttl (arq's fixed 10 s margin would never
let a 1.5-3 ttl stall outlast it at a few-second ttl), ``job_timeout`` is half
of it (arq keeps the key longer than the timeout, so a live task is cancelled
before its key lapses), ``poll_delay`` a tenth (at most arq's 0.5 s). The
worker is arq's ``Worker`` built from the settings as ``arq <settings>`` builds
it (``create_worker``), with ``in_progress_timeout_s`` set before ``run()``:
it has no setting of its own.

Identity: ``ctx['job_try']``, ``INCR arq:retry:<job_id>`` at every start
(``worker.py:482``): an attempt number. Result: ``arq:result:<job_id>``, a
plain ``SET`` by whichever execution finishes (``finish_job``,
``worker.py:682-711``), which also deletes the in-progress key, the job and the
retry counter and removes the job from the queue, whoever holds them now
(observed: a zombie finishing while the re-run runs leaves the job
``complete`` with the zombie's result, no in-progress key; the re-run's finish
then overwrites it, or, finishing last, the zombie overwrites the re-run's).
The stored result keeps the finishing execution's ``job_try`` (``t``), result,
success flag, args and start/finish times. ``job_timeout`` does not stop a
zombie whose code after the pause runs to its return within one turn of the
event loop (this task's does: the task is done before the timeout's callback
runs), so its return is stored; one that awaits I/O after waking is cancelled
(observed: a 50 ms sleep) and arq stores a ``TimeoutError`` failure, with the
same deletions.
"""

from __future__ import annotations

import asyncio
import logging.config
import os
import sys
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from leasecheck.targets.audits import REDELIVERED_JOB, AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.queues.task import Identity, execute_async

if TYPE_CHECKING:
    from arq.connections import ArqRedis

#: what the worker process reads (it is started by argv, not handed the config)
ENV_URL, ENV_QUEUE, ENV_TTL = "LEASECHECK_ARQ_URL", "LEASECHECK_ARQ_QUEUE", "LEASECHECK_ARQ_TTL_MS"
#: the task's name in arq (the function registered with the worker)
FUNCTION = "leasecheck"

T = TypeVar("T")


async def task(ctx: dict[str, Any], name: str) -> str:
    """arq's job: one execution of ``name``, its attempt number ``job_try`` (grows with every start)."""
    attempt = int(ctx["job_try"])
    return await execute_async(name, Identity(token=str(attempt), epoch=attempt))


def timings(ttl_s: float) -> dict[str, float]:
    """arq's timeouts for a ttl: the in-progress key's life (the lease), the job timeout, the poll delay."""
    return {"in_progress": ttl_s, "job_timeout": ttl_s / 2, "poll_delay": min(0.5, ttl_s / 10)}


def worker_settings() -> dict[str, Any]:
    """The ``WorkerSettings`` of the run (from the worker's environment), as ``arq <settings>`` reads them."""
    from arq.connections import RedisSettings
    from arq.worker import func

    t = timings(int(os.environ[ENV_TTL]) / 1000)
    return {
        "functions": [func(task, name=FUNCTION)],
        "queue_name": os.environ[ENV_QUEUE],
        "redis_settings": RedisSettings.from_dsn(os.environ[ENV_URL]),
        "max_jobs": 1,
        "job_timeout": t["job_timeout"],
        "poll_delay": t["poll_delay"],
    }


def main() -> None:
    """One arq worker process: ``arq``'s CLI path (log config, ``create_worker``, ``run``), the lease scaled."""
    from arq.logs import default_log_config
    from arq.worker import create_worker

    logging.config.dictConfig(default_log_config(verbose=False))
    worker = create_worker(worker_settings())
    worker.in_progress_timeout_s = timings(int(os.environ[ENV_TTL]) / 1000)["in_progress"]
    worker.run()


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "arq re-runs a job whose in-progress key expired while the first execution still runs; the first to "
    "finish deletes the in-progress key and the job, and the last result stored wins. Fencing the effects "
    "by ctx['job_try'] stops the stale writes, but a stale execution's refusal is stored as the job's "
    "failure over the newer success: arq itself must refuse the stale finish."
)


class ArqQueue(QueueLibrary):
    """arq: a stalled job is run again once its in-progress key expires; the last to finish writes the result."""

    name = "arq"
    library = "arq"
    broker = "redis"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="arq", mode="documented",
            faults=(
                FaultAudit("none", "invalid", REDELIVERED_JOB),
                FaultAudit("pause", "invalid", REDELIVERED_JOB),
                FaultAudit("pause-store", "invalid", REDELIVERED_JOB),
                FaultAudit("kill-store", "invalid", REDELIVERED_JOB), FaultAudit("partition", "invalid", REDELIVERED_JOB),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
        AuditPlan(
            library="arq", mode="fenced",
            faults=(
                FaultAudit("none", "invalid", REDELIVERED_JOB),
                FaultAudit("pause-store", "invalid", REDELIVERED_JOB),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "attempt"
    heartbeat = False
    requires = ("arq",)
    #: arq 0.28 pins redis<6; ``pip install --no-deps arq`` runs it on the redis-py the rest needs
    extra = "arq"

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        self.queue = f"lc-{config.run_id}:arq:queue"
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._redis: ArqRedis | None = None

    def job_id(self, job: str) -> str:
        """arq's job keys (``arq:job:``, ``arq:result:``) are global, not per queue: the run's id names them."""
        return f"lc-{self.config.run_id}:{job}"

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            return self._loop.run_until_complete(coro)

    async def _pool(self) -> ArqRedis:
        from arq.connections import RedisSettings, create_pool

        if self._redis is None:
            self._redis = await create_pool(RedisSettings.from_dsn(self.config.url), default_queue_name=self.queue)
        return self._redis

    def setup(self) -> None:
        async def ping() -> None:
            await (await self._pool()).ping()

        self._run(ping())

    def worker_command(self, slot: int) -> list[str]:
        return [sys.executable, "-c", f"from {__name__} import main; main()"]

    def worker_env(self) -> dict[str, str]:
        return {ENV_URL: self.config.url, ENV_QUEUE: self.queue, ENV_TTL: str(self.config.ttl_ms)}

    def enqueue(self, jobs: list[str]) -> None:
        async def put() -> None:
            redis = await self._pool()
            for job in jobs:
                if await redis.enqueue_job(FUNCTION, job, _job_id=self.job_id(job), _queue_name=self.queue) is None:
                    raise RuntimeError(f"arq refused job {self.job_id(job)!r}: a job or result with that id exists")

        self._run(put())

    def state(self, job: str) -> JobState | None:
        from arq.jobs import Job, JobStatus

        async def read() -> JobState | None:
            j = Job(self.job_id(job), await self._pool(), _queue_name=self.queue)
            info = await j.result_info()
            if info is not None:
                return JobState("SUCCEEDED", str(info.result)) if info.success else JobState("FAILED", repr(info.result))
            status = await j.status()
            if status == JobStatus.in_progress:
                return JobState("RUNNING")
            if status in (JobStatus.queued, JobStatus.deferred):
                return JobState("READY")
            return None

        return self._run(read())

    def close(self) -> None:
        if self._redis is not None:
            self._run(self._redis.aclose())
            self._redis = None
        self._loop.close()
