"""SAQ (0.26) on Redis: the job's heartbeat, swept by the workers' ``sweep`` upkeep, ``job.attempts`` per execution.

SAQ's docs (``Job``'s docstring, ``saq/job.py:85-88``): "heartbeat (int): the
maximum amount of time a job can survive without a heartbeat in seconds,
defaults to 0 (disabled) a heartbeat can be triggered manually within a job by
calling await job.update()"; "timeout (int): the maximum amount of time a job
can run for"; "retries (int): the maximum number of attempts". The README
lists a "Heartbeat monitor for abandoned jobs" and "Sweeping stuck jobs".

Recovery: every worker runs ``queue.sweep`` every ``timers["sweep"]`` seconds
(``saq/worker.py:301``; a ``SETEX`` lock of the same length lets one worker
start a sweep per interval, so whole seconds). A sweep reads the jobs of the
``active`` list once and takes each as stuck when its status (as read then) is
not ``active`` or it is past ``timeout`` since ``started`` or past
``heartbeat`` since ``touched`` (``Job.stuck``, ``job.py:252-258``). One by
one it marks a stuck job ``aborting``, takes it off the active list, waits up
to 5 s (``sweep(abort=5.0)``, not a setting) for it to reach any terminal
status, then re-queues it if ``retries > attempts`` (``queue/redis.py:221-268``)
-- whatever status it reached, ``complete`` included. The owner's ``abort``
upkeep (every ``timers["abort"]`` s) cancels its task when the stored status is
``aborting``; a stalled worker checks nothing until it wakes.

Scaled: ``heartbeat`` is one ttl and the task beats (``job.update()``) between
slices of work; ``timeout`` is ten ttl, so the heartbeat alone judges;
``retries`` 5 (SAQ's default 1 never re-runs a swept job); sweep
(``options["sweep_s"]``, default 1) and abort checks every second, SAQ's
minimum. The 5 s wait stays SAQ's: with a sweep interval under it, sweeps
overlap and two sweepers re-queue the same job (twice queued, run twice at
once); with 6 s they do not.

Identity: ``job.attempts``, incremented on the stored job by the worker that
dequeues it (``worker.py:356-358``): an attempt number, but not a unique one.
Every write is of the writer's whole copy of the job: the heartbeat
(``_update``, ``queue/redis.py:278-284``: ``SET``, the stored status kept),
``finish`` (``_finish``, ``queue/redis.py:423-441``: ``SETEX``, and ``LREM`` of
the job id from the active list, whoever holds it) and the sweep's
``retry`` of the copy it read at its start. So a zombie's heartbeat or
result overwrites the newer execution's record, and a stale sweep writes back
an older ``attempts``: the next execution gets a number already used.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from leasecheck.targets.audits import REDELIVERED_JOB, AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.queues.task import Identity, execute_async

if TYPE_CHECKING:
    from saq.queue.base import Queue

#: what the worker process reads (the settings callable runs in it)
ENV_URL, ENV_QUEUE, ENV_SWEEP = "LEASECHECK_SAQ_URL", "LEASECHECK_SAQ_QUEUE", "LEASECHECK_SAQ_SWEEP_S"
#: the task's name in SAQ (the function registered with the worker)
FUNCTION = "leasecheck"
#: how many executions SAQ may start per job (``retryable``: ``retries > attempts``)
RETRIES = 5

T = TypeVar("T")


async def task(ctx: dict[str, Any], *, name: str) -> str:
    """SAQ's job: one execution of ``name``, numbered ``job.attempts``, beating with ``job.update()``."""
    job = ctx["job"]
    attempt = int(job.attempts)
    return await execute_async(name, Identity(token=str(attempt), epoch=attempt), heartbeat=job.update)


def settings() -> dict[str, Any]:
    """The worker settings (``saq <module>.settings``; a callable, as SAQ's README allows), from the environment."""
    from saq import Queue

    return {
        "queue": Queue.from_url(os.environ[ENV_URL], name=os.environ[ENV_QUEUE]),
        "functions": [(FUNCTION, task)],
        "concurrency": 1,
        "timers": {"schedule": 1, "worker_info": 10, "sweep": int(os.environ.get(ENV_SWEEP, "1")), "abort": 1},
    }


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "SAQ's sweep re-queues a job whose heartbeat went silent while it may still run, and a stale "
    "execution's finish overwrites the job by key. Fencing the effects by job.attempts does not hold: "
    "two executions of one job can carry the same attempt number (every write saves the writer's whole "
    "copy of the job), and a swept job that completed meanwhile is queued again. Fence with a number of "
    "your own per execution, drawn atomically when the task starts."
)


class SaqQueue(QueueLibrary):
    """SAQ: a heartbeat-stale job is aborted, waited for 5 s and re-queued; whoever writes last is the stored job."""

    name = "saq"
    library = "saq"
    broker = "redis"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="saq", mode="documented",
            faults=(
                FaultAudit("none", "invalid", (*REDELIVERED_JOB, "duplicate-epoch", "stale-renew")),
                FaultAudit("pause-store", "invalid", (*REDELIVERED_JOB, "duplicate-epoch", "stale-renew")),
                FaultAudit("kill-store", "invalid", (*REDELIVERED_JOB, "duplicate-epoch", "stale-renew")),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 3000, "workers": 3, "nemesis_interval": 4.0, "options": {"sweep_s": 6}},
        ),
        AuditPlan(
            library="saq", mode="fenced",
            faults=(
                FaultAudit("none", "invalid", (*REDELIVERED_JOB, "duplicate-epoch", "stale-renew")),
                FaultAudit("pause-store", "invalid", (*REDELIVERED_JOB, "duplicate-epoch", "stale-renew")),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 3000, "workers": 3, "nemesis_interval": 4.0, "options": {"sweep_s": 6}},
        ),
    )
    identity = "attempt"
    heartbeat = True
    requires = ("saq", "redis")

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        if ttl_ms < 1000:
            return f"SAQ sweeps at most once a second (its sweep lock is a SETEX in seconds): --ttl of 1000 ms or more, not {ttl_ms}"
        return None

    def __init__(self, config: QueueConfig) -> None:
        if (problem := self.ttl_problem(config.ttl_ms)) is not None:
            raise ValueError(problem)
        super().__init__(config)
        self.queue_name = f"lc-{config.run_id}"
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._queue: Queue | None = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            return self._loop.run_until_complete(coro)

    async def _q(self) -> Queue:
        from saq import Queue

        if self._queue is None:
            self._queue = Queue.from_url(self.config.url, name=self.queue_name)
            await self._queue.connect()
        return self._queue

    def _seconds(self, factor: int) -> int | float:
        """``factor`` ttl in seconds; whole where it can be (SAQ's fields are typed ``int``)."""
        ms = self.config.ttl_ms * factor
        return ms // 1000 if ms % 1000 == 0 else ms / 1000

    def setup(self) -> None:
        async def ping() -> None:
            await (await self._q()).count("queued")

        self._run(ping())

    def worker_command(self, slot: int) -> list[str]:
        return [sys.executable, "-m", "saq", f"{__name__}.settings", "-v"]

    def worker_env(self) -> dict[str, str]:
        return {ENV_URL: self.config.url, ENV_QUEUE: self.queue_name,
                ENV_SWEEP: str(int(self.config.options.get("sweep_s", 1)))}

    def enqueue(self, jobs: list[str]) -> None:
        async def put() -> None:
            queue = await self._q()
            for job in jobs:
                done = await queue.enqueue(FUNCTION, key=job, name=job, heartbeat=self._seconds(1),
                                           timeout=self._seconds(10), retries=RETRIES)
                if done is None:
                    raise RuntimeError(f"SAQ refused job {job!r} on queue {self.queue_name!r}: it is queued already")

        self._run(put())

    def state(self, job: str) -> JobState | None:
        from saq import Status

        async def read() -> JobState | None:
            found = await (await self._q()).job(job)
            if found is None:
                return None
            if found.status == Status.COMPLETE:
                return JobState("SUCCEEDED", None if found.result is None else str(found.result))
            if found.status in (Status.NEW, Status.QUEUED):
                return JobState("READY")
            if found.status in (Status.ACTIVE, Status.ABORTING):  # aborting: swept, its execution may still run
                return JobState("RUNNING")
            return JobState("FAILED", found.error)

        return self._run(read())

    def close(self) -> None:
        if self._queue is not None:
            self._run(self._queue.disconnect())
            self._queue = None
        self._loop.close()
