"""Temporal (``temporalio`` 1.35, Temporal Server 1.29.1): a job is a workflow running one activity, retried after its heartbeat timeout.

(Docstring completed from the measurements: see the module's notes below the class.)
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.thirdparty.audit import AuditPlan

if TYPE_CHECKING:
    from temporalio.client import Client

#: the namespace the dev server always has
NAMESPACE = "default"

T = TypeVar("T")


class TemporalQueue(QueueLibrary):
    """Temporal: an activity attempt that stops heartbeating is retried; a timed-out attempt's completion is refused."""

    name = "temporal"
    library = "temporalio"
    broker = "temporal"
    identity = "attempt"
    heartbeat = True
    requires = ("temporalio",)
    extra = "temporal"
    audits: ClassVar[tuple[AuditPlan, ...]] = ()

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
                pending = described.raw_description.pending_activities
                started = any(a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED for a in pending)
                return JobState("RUNNING" if started else "READY")
            if status in (WorkflowExecutionStatus.FAILED, WorkflowExecutionStatus.TIMED_OUT,
                          WorkflowExecutionStatus.TERMINATED):
                return JobState("FAILED")
            return JobState("OTHER")

        return self._run(read())

    def close(self) -> None:
        self._client = None  # the client holds no resources of its own to close (its connection goes with the loop)
        self._loop.close()
