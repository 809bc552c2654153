"""huey (``huey`` 3.5, ``RedisHuey``): at most once; a timed-out task is killed and retried, a lost one is never re-run.

What huey promises, and how it recovers (huey 3.5.4 source):

* a task is a message popped off a Redis list (``BRPOP``, ``RedisStorage.dequeue``,
  ``huey/storage.py``): no acknowledgement, no visibility timeout, nothing that
  notices a consumer that died or froze with a task in hand. A task whose
  consumer is killed is gone; its docs say so ("When the consumer is shut down
  with SIGTERM, any tasks that are mid-execution are interrupted. By default,
  these tasks are lost", recipes: *Graceful Shutdown and Re-enqueueing
  Interrupted Tasks*, whose ``SIGNAL_INTERRUPTED`` handler re-enqueues only
  what a SIGTERM interrupted, never a SIGKILLed or frozen consumer's task).
* a stalled task is ended by its ``timeout``: with the ``process`` worker type
  the worker runs it under ``setitimer(ITIMER_REAL, seconds)`` whose SIGALRM
  handler raises ``TaskTimeout`` (``ProcessEnvironment.timeout``,
  ``huey/consumer.py``), so a blocking ``time.sleep`` is interrupted at the
  deadline and the execution ends there. A task with retries left is then
  requeued (``Huey._requeue_task``, ``huey/api.py``). With the default
  ``thread`` worker type the timeout is no more than a deadline the task may
  check (``Environment.timeout`` is a no-op; ``task.check_timeout()``), so a
  stalled task runs on and is never retried: the adapter uses ``-k process``.

So: ``timeout`` = the ttl (seconds, sub-second allowed), ``retries=5``, one
consumer per worker with one ``process`` worker (``-w 1 -k process -n``),
``store_intermediate_errors=False`` (an error in the result store is final).

Identity: huey hands the task (``context=True``) its ``Task``: its ``id`` is the
message's, the same for every execution, and ``retries`` counts down with
every retry; nothing else re-runs a task, so ``RETRIES - task.retries + 1`` is
the execution's attempt number (``identity = "attempt"``). No heartbeat.

The consumer loads its ``Huey`` from :mod:`.huey_tasks` (its name and Redis
URL from the environment, :meth:`HueyQueue.worker_env`); the adapter makes
its own with the same name and registers the same task to enqueue and read.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.queues.task import Identity, execute

#: the environment the consumer's Huey is made from (:mod:`.huey_tasks`)
ENV_NAME, ENV_URL = "LEASECHECK_HUEY_NAME", "LEASECHECK_HUEY_URL"
#: the task's name in huey's registry (both sides register it under this name)
TASK_NAME = "leasecheck_job"
#: retries a task gets (each timed-out execution uses one)
RETRIES = 5


def run_job(name: str, task: Any = None) -> str:
    """The task huey's worker calls: one execution of job ``name``, numbered by huey's retries left."""
    if task is None:
        raise RuntimeError("run_job needs huey's task (registered with context=True)")
    return execute(name, Identity(token=str(task.id), epoch=RETRIES - int(task.retries) + 1))


def make_huey(name: str, url: str) -> tuple[Any, Any]:
    """The run's ``RedisHuey`` and ``run_job`` registered with it (the consumer's and the adapter's alike)."""
    from huey import RedisHuey

    huey = RedisHuey(name, url=url, store_intermediate_errors=False)
    return huey, huey.task(context=True, name=TASK_NAME, retries=RETRIES)(run_job)


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "huey (process workers) ends an overdue task at its timeout and retries it; a killed consumer's task "
    "is lost for good (at most once): re-enqueue from your own record of what ran, fenced by the attempt."
)


class HueyQueue(QueueLibrary):
    """huey with RedisHuey, the process worker type, a task timeout and retries: no recovery of a lost task."""

    name = "huey"
    library = "huey"
    broker = "redis"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="huey", mode="documented",
            faults=(
                FaultAudit("none", "valid"),
                FaultAudit("pause", "valid"),
                FaultAudit("kill", "valid"),
                FaultAudit("pause-store", "valid"), FaultAudit("kill-store", "valid"), FaultAudit("partition", "valid"),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
        AuditPlan(
            library="huey", mode="fenced",
            faults=(
                FaultAudit("none", "valid"),
                FaultAudit("pause", "valid"),
                FaultAudit("pause-store", "valid"), FaultAudit("kill-store", "valid"), FaultAudit("partition", "valid"),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "attempt"
    heartbeat = False
    requires: ClassVar[tuple[str, ...]] = ("huey", "redis")

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        self._huey: Any = None
        self._task: Any = None

    @property
    def huey_name(self) -> str:
        return f"lc-{self.config.run_id}"

    @property
    def huey(self) -> Any:
        if self._huey is None:
            self._huey, self._task = make_huey(self.huey_name, self.config.url)
        return self._huey

    def setup(self) -> None:
        self.huey.storage.conn.ping()

    def worker_env(self) -> dict[str, str]:
        return {ENV_NAME: self.huey_name, ENV_URL: self.config.url}

    def worker_command(self, slot: int) -> list[str]:
        return [sys.executable, "-m", "huey.bin.huey_consumer", "leasecheck.targets.queues.huey_tasks.huey",
                "--workers", "1", "--worker-type", "process", "--no-periodic"]

    def enqueue(self, jobs: list[str]) -> None:
        huey = self.huey
        for job in jobs:
            huey.enqueue(self._task.s(job, id=job, retries=RETRIES, timeout=self.config.ttl_s))

    def state(self, job: str) -> JobState | None:
        """What huey knows: a stored result, or the job waiting in the queue or the schedule.

        A task being executed is in no store at all (popped off the list), and
        neither is a lost one: huey cannot tell them apart, so both are None."""
        from huey.utils import Error

        value = self.huey.get(job, peek=True)
        if isinstance(value, Error):
            return JobState("FAILED")
        if value is not None:
            return JobState("SUCCEEDED", str(value))
        if any(t.id == job for t in self.huey.pending()) or any(t.id == job for t in self.huey.scheduled()):
            return JobState("READY")
        return None

    def close(self) -> None:
        if self._huey is not None:
            self._huey.storage.conn.close()
            self._huey = self._task = None
