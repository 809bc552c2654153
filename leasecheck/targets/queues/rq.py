"""RQ (``rq`` 3.0): ``rq worker`` runs each job in a forked work-horse, one at a time; a stalled job is killed and retried.

What RQ promises, and how it recovers (rq 3.0.0 source):

* a stalled job does not outlive its ``job_timeout``: the horse runs the job
  under ``UnixSignalDeathPenalty`` (``signal.alarm(timeout)``; its handler
  "raise[s] an exception after the timeout amount", ``rq/timeouts.py``), so a
  blocking ``time.sleep`` is interrupted by ``JobTimeoutException`` at the
  deadline and the execution ends there: it never wakes up to write again. The
  failure is then retried: ``handle_job_failure`` "Retries the job if it has
  retries left" (``rq/worker/base.py``), with ``Retry(max=...)`` given at
  enqueue; without intervals the job goes straight back on the queue.
* a worker that dies (or freezes) with a job in hand is found by the
  StartedJobRegistry's cleanup, run by every worker's maintenance ("Handles
  abandoned jobs whose execution expired ... Each one is retried if it has
  retries left", ``rq/registry.py``). An execution's entry there is kept alive
  by the worker's heartbeat, with a ttl of ``min(timeout, job_monitoring_interval)
  + 60`` seconds (``get_heartbeat_ttl``): the ``+ 60`` is RQ's, so an abandoned
  job is re-run no sooner than a minute after its worker died, whatever ttl.
  A pause (SIGSTOP) of the worker shorter than that re-runs nothing: on
  SIGCONT the horse's overdue alarm ends the execution, which is then retried.

The horse calls ``os.setpgrp()``: it is in no process group of the worker's,
so a ``killpg`` of the worker's group misses it (the nemesis signals the
process tree, which does include it).

A job whose horse has already handled its own failure can be retried a second
time by the worker (``monitor_work_horse``, ``rq/worker/worker_classes.py``): the
worker waits for its horse under ``signal.alarm(job_monitoring_interval)``
(``HorseMonitorTimeoutException``). If that alarm goes off after ``os.wait4`` has
reaped the horse but before the worker has its answer (the worker was not on a CPU
when the horse exited: a loaded machine), the answer is lost, the next ``wait4``
finds no child (``(None, None, None)``), and with ``ret_val`` None the worker
reads the job's status: the horse's own timeout handling has already put it back
on the queue (QUEUED, or STARTED elsewhere), not FINISHED or FAILED, so it logs
"Work-horse terminated unexpectedly; waitpid returned None" and retries the job
again. The job is then on the queue twice and runs twice, both results stored (the
second replaces the first), sometimes at once. This needs the monitor's alarm to
fall at a horse's end; a horse that timed out ends at the timeout.

So the adapter sets ``job_timeout`` to the ttl (whole seconds: ``signal.alarm``),
``Retry(max=5)``, and each worker's ``--job-monitoring-interval`` to RQ's default,
30 s, or 3 ttl if that is longer (:func:`monitoring_interval_s`): longer than any
horse of the run lives (the timeout, then its failure handling), so the monitor's
alarm never goes off while a horse ends, and the double retry above stays out of
the audit of the stalled task (AUDITS.md publishes it apart, with its condition).
Also ``--maintenance-interval 1`` and ``--worker-ttl 16`` (an idle worker's dequeue
wakes every ``worker_ttl - 15`` s, and runs maintenance then).

Identity: RQ 3 makes an :class:`rq.executions.Execution` for every run of a job
(a uuid4 hex id, in the job's execution registry with its worker's name); the
task finds its own by its worker's name (``RQ_WORKER_ID``, set in the horse). RQ hands no attempt number: ``job.retries_left`` only counts
down (``Retry(max) - retries_left + 1`` would be one), so ``identity = "id"``.
The heartbeat is the worker's, not the task's (the parent process beats for the
horse every ``job_monitoring_interval``; a heartbeat does not extend the
timeout), so ``heartbeat = False``.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, ClassVar, Literal

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.queues.task import Identity, execute

if TYPE_CHECKING:
    from redis import Redis

#: retries a job gets (each stall or abandoned execution uses one)
RETRIES = 5
#: how long RQ keeps a job's results and failures (a run is far shorter)
KEEP_S = 3600
#: RQ's own ``job_monitoring_interval`` (``rq/defaults.py``: ``DEFAULT_JOB_MONITORING_INTERVAL``)
RQ_MONITORING_S = 30


def monitoring_interval_s(ttl_ms: int) -> int:
    """The workers' ``--job-monitoring-interval``: RQ's default, or 3 ttl if longer (the module's docstring).

    The worker's alarm then never goes off while a horse of the run ends (a horse lives at most the job
    timeout, the ttl, and its failure handling), so the worker never loses a horse's exit status and retries
    a job its horse already retried. An execution's registry entry still outlives its horse:
    ``get_heartbeat_ttl`` gives it ``min(timeout, interval) + 60`` s at the start, the timeout + 60."""
    return max(RQ_MONITORING_S, 3 * ttl_ms // 1000)


def run_job(name: str) -> str:
    """The task RQ's work-horse calls: one execution of job ``name``, named by RQ's execution id."""
    from rq import get_current_job
    from rq.executions import Execution

    job = get_current_job()
    if job is None:
        raise RuntimeError("run_job runs only inside an RQ worker")
    worker = os.environ.get("RQ_WORKER_ID", "")
    for execution_id in job.execution_registry.get_execution_ids():
        try:  # not job.get_executions(): a dead worker's execution outlives its hash in the registry by 60 s
            execution = Execution.fetch(execution_id, job.id, job.connection)
        except ValueError:
            continue
        if execution.worker_name == worker:
            return execute(name, Identity(token=execution.id))
    raise RuntimeError(f"RQ lists no execution of job {job.id} by worker {worker!r}")


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "RQ ends an overdue execution itself (signal.alarm in the work-horse raises at the job_timeout), so "
    "a stalled task never wakes to write. But a job that timed out can be retried twice, and then runs twice "
    "(sometimes at once), the second result replacing the first: the worker waits for its work-horse under "
    "its own alarm (job_monitoring_interval), and if that alarm goes off as the horse ends (a worker kept off "
    "the CPU by load; likely also one paused past the timeout), the worker loses the horse's exit status and retries the job "
    "the horse had already retried ('Work-horse terminated unexpectedly; waitpid returned None'). Keep "
    "job_monitoring_interval (RQ's default: 30 s) well above your job timeouts, and fence every write with a "
    "number your own store hands out per execution."
)


class RQ(QueueLibrary):
    """RQ with its job timeout and Retry: a stalled job is killed at the timeout, then run again."""

    name = "rq"
    library = "rq"
    broker = "redis"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="rq", mode="documented",
            faults=(
                FaultAudit("none", "valid"),
                FaultAudit("kill", "valid"),
                FaultAudit("pause-store", "valid"), FaultAudit("kill-store", "valid"), FaultAudit("partition", "valid"),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "id"
    heartbeat = False
    requires: ClassVar[tuple[str, ...]] = ("rq", "redis")

    #: RQ's statuses as the harness's
    STATUSES: ClassVar[dict[str, Literal["READY", "RUNNING", "SUCCEEDED", "FAILED"]]] = {
        "created": "READY", "queued": "READY", "deferred": "READY", "scheduled": "READY",
        "ready_to_enqueue": "READY", "rate_limited": "READY", "started": "RUNNING",
        "finished": "SUCCEEDED", "failed": "FAILED",
    }

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        if ttl_ms < 1000 or ttl_ms % 1000:
            return f"RQ's job timeout is signal.alarm(whole seconds): --ttl must be a multiple of 1000 ms, not {ttl_ms}"
        return None

    def __init__(self, config: QueueConfig) -> None:
        if (problem := self.ttl_problem(config.ttl_ms)) is not None:
            raise ValueError(problem)
        super().__init__(config)
        self._redis: Redis | None = None

    @property
    def queue_name(self) -> str:
        return f"lc-{self.config.run_id}"

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            from redis import Redis

            self._redis = Redis.from_url(self.config.url)
        return self._redis

    def job_id(self, job: str) -> str:
        """The job's RQ id: the run's id and its name (RQ's ids are global to the Redis database)."""
        return re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.config.run_id}-{job}")

    def setup(self) -> None:
        self.redis.ping()

    def worker_command(self, slot: int) -> list[str]:
        return [sys.executable, "-m", "rq.cli", "worker", "--url", self.config.url,
                "--name", f"lc-{self.config.run_id}-w{slot}",
                "--job-monitoring-interval", str(monitoring_interval_s(self.config.ttl_ms)),
                "--maintenance-interval", "1", "--worker-ttl", "16",
                "--results-ttl", str(KEEP_S), self.queue_name]

    def enqueue(self, jobs: list[str]) -> None:
        from rq import Queue, Retry

        queue = Queue(self.queue_name, connection=self.redis)
        for job in jobs:
            queue.enqueue(run_job, job, job_id=self.job_id(job), job_timeout=self.config.ttl_ms // 1000,
                          retry=Retry(max=RETRIES), result_ttl=KEEP_S, failure_ttl=KEEP_S)

    def state(self, job: str) -> JobState | None:
        from rq.exceptions import NoSuchJobError
        from rq.job import Job

        try:
            found = Job.fetch(self.job_id(job), connection=self.redis)
        except NoSuchJobError:
            return None
        status = self.STATUSES.get(found.get_status(refresh=False).value)
        if status is None:  # stopped, canceled
            return JobState("OTHER")
        if status == "SUCCEEDED":
            value = found.return_value()
            return JobState("SUCCEEDED", None if value is None else str(value))
        return JobState(status)

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
            self._redis = None
