"""Celery with the Redis broker (kombu's Redis transport) and the Redis result backend, ``acks_late`` as documented.

Recovery: kombu's Redis transport emulates acknowledgements. A delivered
message is kept in the ``unacked`` hash, its delivery tag scored by delivery
time in ``unacked_index``, and every worker's event loop sweeps that index
(``QoS.restore_visible``, kombu 5.7.0 ``kombu/transport/redis.py:523``): an
entry older than ``visibility_timeout`` is pushed back on its queue, marked
``redelivered``. Celery's glossary: with late acknowledgment "the task will be
redelivered to another worker in the event of the machine losing power, or
the worker instance being killed mid-execution", and "in Redis/SQS the
transaction times out after a configurable amount of time (the
``visibility_timeout``)". The timeout counts from delivery, not from the last
sign of life: a task that merely runs (or stalls) longer than it is run again
while the first execution goes on, and the stalled one's late return is stored
and acked all the same.

Identity: nothing that Celery hands a task names one execution. ``request.id``
is the task id (the job); kombu's delivery tag is drawn once at publish
(``virtual/base.py:633``) and restored with the message, so every delivery of
a job has the same tag; ``delivery_info['redelivered']`` is a flag, not a
count; ``request.retries`` counts only ``Task.retry()``. The token is the
delivery tag at the worker that runs it (``delivery_tag@request.hostname``):
both are Celery's, and a redelivery goes to another worker while the stalled
one holds its own (one pool process each). The tag alone would name every
execution of a job alike, and the history could not tell the zombie from the
new holder. The shared tag is itself a finding: kombu acks by that tag
(``QoS.ack`` -> ``ZREM``/``HDEL``), so a stale execution's late ack deletes the
new holder's unacked entry too (observed: the new holder then killed, the job
never ran again).

Result: the Redis backend keeps the first ``SUCCESS``: ``_store_result`` reads
the stored meta and returns without writing when it is already ``SUCCESS``
(``celery/backends/base.py:1361-1370``, "we ignore any following update to the
state"; a read-then-``SET``, not atomic).

Observed (smoke runs, ttl 2 s): a stalled execution's job starts again on a
free worker ~2.05 s after its delivery; the zombie then writes its last effect
and returns, its result dropped if the new execution stored first. With a
stale execution acking while the new one still runs, kombu's ``unacked`` entry
is gone, and killing the new holder loses the job for good (a control run
without that ack redelivers it after the visibility timeout).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, ClassVar

from leasecheck.targets.audits import REDELIVERED_JOB, AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary

if TYPE_CHECKING:
    from celery import Celery

#: what the worker's tasks module reads to build the same app as the adapter
ENV_URL, ENV_TTL, ENV_RUN = "LEASECHECK_CELERY_URL", "LEASECHECK_CELERY_TTL_MS", "LEASECHECK_CELERY_RUN_ID"
#: the registered name of the task (the worker's tasks module defines it)
TASK_NAME = "leasecheck.queue_task"
TASKS_MODULE = "leasecheck.targets.queues.celery_queue_tasks"


def make_app(url: str, ttl_ms: int, run_id: str) -> Celery:
    """The Celery app of a run, the same in the adapter and in every worker: its settings are the audit's.

    ``visibility_timeout`` is the ttl (kombu's default is an hour); the sweep
    that restores expired deliveries runs every quarter ttl and scans on every
    call (``unacked_restore_throttle`` 1) instead of every 10th of 10 s, so a
    lost execution is re-run about one ttl after its delivery. Every key (the
    queue, ``unacked``, the results) is prefixed with the run id."""
    from celery import Celery

    ttl_s = ttl_ms / 1000
    prefix = f"lc-{run_id}:"
    app = Celery(f"leasecheck-{run_id}", broker=url, backend=url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,  # the documented way to have a lost execution redelivered
        worker_prefetch_multiplier=1,  # one unacked message per pool child, as the docs advise for long tasks
        task_track_started=True,  # STARTED in the backend: state() can say RUNNING
        task_default_queue=f"lc-{run_id}",
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": ttl_s,
            "unacked_restore_interval": max(ttl_s / 4, 0.05),
            "unacked_restore_throttle": 1,
            "global_keyprefix": prefix,
        },
        result_backend_transport_options={"global_keyprefix": prefix},
    )
    return app


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "Celery redelivers a task that is not acknowledged within the visibility timeout while the first "
    "execution still runs, and nothing stops the first one's writes (its late SUCCESS is dropped by the "
    "result backend, its late ack removes the new delivery's unacked entry). Fence every write with a "
    "number your own store hands out per execution; keep the visibility timeout far above the longest "
    "task."
)


class CeleryQueue(QueueLibrary):
    """Celery (Redis broker and results), acks_late and a visibility timeout of one ttl: kombu redelivers by age."""

    name = "celery"
    library = "celery"
    broker = "redis"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="celery", mode="documented",
            faults=(
                FaultAudit("none", "invalid", REDELIVERED_JOB),
                FaultAudit("pause", "invalid", REDELIVERED_JOB),
                FaultAudit("pause-store", "invalid", REDELIVERED_JOB),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "id"
    heartbeat = False
    requires = ("celery", "kombu", "redis")

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        self._app: Celery | None = None

    @property
    def app(self) -> Celery:
        """The run's app in the harness's process (made on first use: ``--list`` imports this module)."""
        if self._app is None:
            self._app = make_app(self.config.url, self.config.ttl_ms, self.config.run_id)
        return self._app

    def setup(self) -> None:
        """Nothing to install: the queue and the result keys appear with the first message."""

    def worker_env(self) -> dict[str, str]:
        return {ENV_URL: self.config.url, ENV_TTL: str(self.config.ttl_ms), ENV_RUN: self.config.run_id}

    def worker_command(self, slot: int) -> list[str]:
        """``celery -A … worker`` with one prefork child; a node name per slot (two workers on one host)."""
        return [sys.executable, "-m", "celery", "-A", TASKS_MODULE, "worker",
                "--pool", "prefork", "--concurrency", "1", "--hostname", f"lc{slot}@%h", "--loglevel", "INFO"]

    def enqueue(self, jobs: list[str]) -> None:
        for job in jobs:
            self.app.send_task(TASK_NAME, args=[job], task_id=job)

    def state(self, job: str) -> JobState | None:
        """The backend's meta, read afresh (Celery caches finished metas): PENDING is queued or unknown alike."""
        meta = self.app.backend.get_task_meta(job, cache=False)
        status = meta.get("status")
        if status == "SUCCESS":
            return JobState("SUCCEEDED", str(meta.get("result")))
        if status == "STARTED":
            return JobState("RUNNING")
        if status in ("PENDING", "RECEIVED", "RETRY"):
            return JobState("READY")
        if status == "FAILURE":
            return JobState("FAILED")
        return JobState("OTHER")

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


def app_from_env() -> Celery:
    """The worker's app, from what :meth:`CeleryQueue.worker_env` set."""
    return make_app(os.environ[ENV_URL], int(os.environ[ENV_TTL]), os.environ[ENV_RUN])
