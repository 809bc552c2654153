"""Temporal (``temporalio`` 1.35, Temporal Server 1.29.1): a job is a workflow running one activity, retried after its heartbeat timeout.

What Temporal promises (docs.temporal.io): an Activity "can be non-deterministic.
We recommend that it be idempotent, so retries can be processed without
duplicate side effects"; "Heartbeats are used to detect Worker failure.
Cancellations are delivered via Heartbeats"; an Activity receives Cancellation
when "the Activity was considered failed by the Server because any of the
Activity timeouts have triggered (for example, the Server didn't receive a
heartbeat within the Activity's Heartbeat timeout)", and "Activities can only
receive Cancellation if they emit Heartbeats".

Recovery: the server times an attempt out when no heartbeat came for
``heartbeat_timeout`` (one ttl) and schedules the next attempt after the retry
policy's backoff, on any worker of the task queue; ``activity.info().attempt``
grows by one per attempt: the attempt number (identity ``attempt``). Each
attempt's task token names its attempt, and the server answers a heartbeat or
a completion of an attempt it has timed out with ``NotFound: invalid activityID
or activity already timed out or invoking workflow is completed`` (observed in
the workers' logs, ``temporalio_sdk_core::worker::activities: Activity not found
on completion``): the stale completion is refused, the workflow's result is the
current attempt's. A heartbeat refused that way makes the SDK cancel the attempt
(``worker/_activity.py:219-236``: ``ActivityCancellationDetails.not_found``), so a
stalled attempt that wakes and beats is cancelled at its next ``await``. Not
fenced: what an attempt does before it next beats, e.g. a worker paused (not the
task's own stall) after its last heartbeat writes its effect on waking, before
the refused completion: observed once before the next attempt started, and once
(a fresh-clone CI run, loaded) after it, a proven ``stale-effect``. That is why
``pause`` is measured, not published, for the documented mode (AUDITS.md): its
verdict changes from seed to seed and run to run.

Scaled: heartbeat timeout one ttl, ``start_to_close`` ten ttl (never reached by
a 1.5-3 ttl stall: the heartbeat alone judges), retries after ttl/10 doubling to
one ttl, at most 10 attempts, ``StaleExecution`` (the fenced task's refusal) not
retried; a workflow task held by a stalled worker (the stall blocks its event
loop, and the SDK's core takes workflow tasks all the same) times out after one
ttl (Temporal's default: 10 s), and so does a workflow task waiting on a stalled
worker's sticky queue. Each worker (:mod:`.temporal_queue_tasks`) is
``Worker(client, task_queue=..., workflows=..., activities=...).run()`` with
``max_concurrent_activities=1``; the task queue is named with the run's id.

Heartbeat: the task calls ``activity.heartbeat()``, which is fire-and-forget
(sent in the background, throttled to 0.8 heartbeat timeout); the renew it
records is the server's answer to the same RPC sent through the client (see
:func:`~leasecheck.targets.queues.temporal_queue_tasks.heartbeat`): a zombie's
renew is recorded refused, not guessed ok.

The broker is ``temporal server start-dev`` (:mod:`leasecheck.servers.temporal`),
built by ``scripts/install-temporal.sh``.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary

if TYPE_CHECKING:
    from temporalio.client import Client

#: the namespace the dev server always has
NAMESPACE = "default"

T = TypeVar("T")

#: the advice (here: why the valid verdict holds) the audit's finding ends with (AUDITS.md)
FIX = (
    "Temporal times out an attempt that stops heartbeating and runs the next attempt elsewhere; the server "
    "refuses the timed-out attempt's heartbeats and completion (its task token names its attempt), and the "
    "refused heartbeat cancels the zombie at its next await. Side effects before its next heartbeat are not "
    "fenced: make them idempotent, or fence them with activity.info().attempt."
)


class TemporalQueue(QueueLibrary):
    """Temporal: an activity attempt that stops heartbeating is retried; a timed-out attempt's completion is refused."""

    name = "temporal"
    library = "temporalio"
    broker = "temporal"
    identity = "attempt"
    heartbeat = True
    requires = ("temporalio",)
    extra = "temporal"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="temporalio", mode="documented",
            # ``pause`` is aimed between an attempt's heartbeat and its next write and lasts until the next attempt
            # began (leasecheck.queue_run.aim_notes): the paused attempt wakes and writes unfenced (stale-effect).
            # Unaimed, the pause met that window in 1 run of 8; 25 s gives the aim a few ticks beside the stalls
            faults=(
                FaultAudit("none", "valid"),
                FaultAudit("pause", "invalid", kinds=("stale-effect",)),
            ),
            seeds=(1, 2, 3), time_limit=25.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
        AuditPlan(
            library="temporalio", mode="fenced",
            faults=(
                FaultAudit("none", "valid"),
                FaultAudit("pause", "valid"),
            ),
            seeds=(1, 2, 3), time_limit=25.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        self.task_queue = f"lc-{config.run_id}"
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._client: Client | None = None

    def job_id(self, job: str) -> str:
        """The workflow id: the job's name (it already carries the run's id)."""
        return job

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            return self._loop.run_until_complete(coro)

    async def _connect(self) -> Client:
        from temporalio.client import Client

        if self._client is None:
            self._client = await Client.connect(self.config.url, namespace=NAMESPACE)
        return self._client

    def setup(self) -> None:
        """Connect (the namespace exists on the dev server; task queues appear when polled)."""
        self._run(self._connect())

    def worker_command(self, slot: int) -> list[str]:
        return [sys.executable, "-c", "from leasecheck.targets.queues.temporal_queue_tasks import main; main()"]

    def worker_env(self) -> dict[str, str]:
        from leasecheck.targets.queues import temporal_queue_tasks as t

        return {t.ENV_ADDRESS: self.config.url, t.ENV_NAMESPACE: NAMESPACE, t.ENV_QUEUE: self.task_queue,
                t.ENV_TTL: str(self.config.ttl_ms)}

    def enqueue(self, jobs: list[str]) -> None:
        from leasecheck.targets.queues.temporal_queue_tasks import WORKFLOW, timeouts

        async def start() -> None:
            client = await self._connect()
            for job in jobs:
                await client.start_workflow(WORKFLOW, args=[job, self.config.ttl_ms], id=self.job_id(job),
                                            task_queue=self.task_queue,
                                            task_timeout=timeouts(self.config.ttl_ms)["workflow_task"])

        self._run(start())

    def state(self, job: str) -> JobState | None:
        from temporalio.api.enums.v1 import PendingActivityState
        from temporalio.client import WorkflowExecutionStatus
        from temporalio.service import RPCError, RPCStatusCode

        async def read() -> JobState | None:
            handle = (await self._connect()).get_workflow_handle(self.job_id(job))
            try:
                described = await handle.describe()
            except RPCError as e:
                if e.status == RPCStatusCode.NOT_FOUND:
                    return None
                raise
            status = described.status
            if status == WorkflowExecutionStatus.COMPLETED:
                return JobState("SUCCEEDED", str(await handle.result()))
            if status == WorkflowExecutionStatus.RUNNING:
                # READY: the activity not scheduled yet (history shorter than its ActivityTaskScheduled, event 5)
                # or waiting for a worker or its retry; RUNNING: an attempt started, or done and being recorded
                pending = described.raw_description.pending_activities
                if any(a.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED for a in pending):
                    return JobState("READY")
                return JobState("RUNNING" if pending or (described.history_length or 0) >= 5 else "READY")
            if status in (WorkflowExecutionStatus.FAILED, WorkflowExecutionStatus.TIMED_OUT,
                          WorkflowExecutionStatus.TERMINATED):
                return JobState("FAILED")
            return JobState("OTHER")

        return self._run(read())

    def close(self) -> None:
        self._client = None  # the client holds no resources of its own to close (its connection goes with the loop)
        self._loop.close()
