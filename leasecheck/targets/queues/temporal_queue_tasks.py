"""Temporal's workflow, activity and worker for leasecheck's queue audit (imported by the worker processes).

Apart from :mod:`.temporal_queue` because ``@workflow.defn`` and
``@activity.defn`` need ``temporalio`` at import time, and because Temporal's
workflow sandbox re-imports the module that defines the workflow: the module
must be importable by name (not ``__main__``) and its leasecheck imports are
passed through the sandbox (they are used by the activity only).
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from leasecheck.targets.queues.task import ENV_SLOT, Identity, execute_async

#: the names Temporal knows them by (the client starts the workflow by name)
WORKFLOW, ACTIVITY = "LeasecheckJob", "leasecheck"
#: what the worker process reads (it is started by argv, not handed the config)
ENV_ADDRESS, ENV_NAMESPACE = "LEASECHECK_TEMPORAL_ADDRESS", "LEASECHECK_TEMPORAL_NAMESPACE"
ENV_QUEUE, ENV_TTL = "LEASECHECK_TEMPORAL_TASK_QUEUE", "LEASECHECK_TEMPORAL_TTL_MS"
#: the fenced task's refusal: failing the activity with it must not start yet another attempt
STALE = "StaleExecution"


def timeouts(ttl_ms: int) -> dict[str, timedelta]:
    """Temporal's timeouts for a ttl: the heartbeat timeout (the lease) judges a silent attempt; the rest are margins.

    ``start_to_close`` is ten ttl (past the longest stall, 3 ttl), so the
    heartbeat timeout alone times a stalled attempt out; the retry waits a tenth
    of a ttl (at most one ttl); a workflow task (and a sticky queue's) held by a
    stalled worker is given to another after one ttl (Temporal's default: 10 s)."""
    ttl = timedelta(milliseconds=ttl_ms)
    return {"heartbeat": ttl, "start_to_close": 10 * ttl, "retry_initial": ttl / 10, "retry_max": ttl,
            "workflow_task": max(ttl, timedelta(seconds=1)), "sticky": ttl}


#: heartbeat RPCs still running after their attempt was cancelled (asyncio keeps only weak references to tasks)
_in_flight: set[asyncio.Future[None]] = set()


def _settled(rpc: asyncio.Future[None]) -> None:
    """A heartbeat RPC is done: forget it, and mark its error (a cancelled attempt's: NotFound) as seen."""
    _in_flight.discard(rpc)
    if not rpc.cancelled():
        rpc.exception()


async def heartbeat() -> bool:
    """The attempt's heartbeat, and the server's answer to it (False: the server no longer knows this attempt).

    ``activity.heartbeat()`` is Temporal's documented call, and what gets a
    timed-out attempt cancelled: the SDK sends it in the background (throttled
    to 0.8 heartbeat timeout) and cancels the activity when the server answers
    that the attempt is gone. It tells the caller nothing, so a renew recorded
    ``ok`` from it alone would be a guess; the same RPC
    (``RecordActivityTaskHeartbeat``, keyed by the attempt's task token) sent
    once more through the client returns the server's verdict.

    That RPC is shielded from the attempt's cancellation, and has no deadline of
    its own: a request cancelled while the dev server's SQLite store runs its
    query interrupts the store's connection for good (every later operation
    fails with ``interrupted (9)``; modernc.org/sqlite v1.34.1 in Temporal
    Server 1.29.1, temporalio/temporal#8017), which a cancelled heartbeat did
    once in ~25 runs."""
    from temporalio.service import RPCError, RPCStatusCode

    activity.heartbeat()
    handle = activity.client().get_async_activity_handle(task_token=activity.info().task_token)
    rpc = asyncio.ensure_future(handle.heartbeat())
    _in_flight.add(rpc)
    rpc.add_done_callback(_settled)
    try:
        await asyncio.shield(rpc)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


@activity.defn(name=ACTIVITY)
async def run_job(job: str) -> str:
    """One attempt of ``job``: leasecheck's task, identified by Temporal's attempt number (1, 2, ... per workflow run)."""
    info = activity.info()
    return await execute_async(job, Identity(token=f"{info.workflow_run_id}/{info.attempt}", epoch=info.attempt),
                               heartbeat=heartbeat)


@workflow.defn(name=WORKFLOW)
class JobWorkflow:
    """A job: one activity, retried by Temporal after a timeout; its result is the workflow's."""

    @workflow.run
    async def run(self, job: str, ttl_ms: int) -> str:
        t = timeouts(ttl_ms)
        result: str = await workflow.execute_activity(
            run_job, job,
            start_to_close_timeout=t["start_to_close"],
            heartbeat_timeout=t["heartbeat"],
            retry_policy=RetryPolicy(initial_interval=t["retry_initial"], backoff_coefficient=2.0,
                                     maximum_interval=t["retry_max"], maximum_attempts=10,
                                     non_retryable_error_types=[STALE]),
        )
        return result


async def serve() -> None:
    """One worker: ``Worker(client, task_queue=..., workflows=..., activities=...).run()``, one activity at a time."""
    from temporalio.client import Client
    from temporalio.worker import Worker

    ttl_ms = int(os.environ[ENV_TTL])
    client = await Client.connect(os.environ[ENV_ADDRESS], namespace=os.environ[ENV_NAMESPACE])
    worker = Worker(
        client, task_queue=os.environ[ENV_QUEUE], workflows=[JobWorkflow], activities=[run_job],
        max_concurrent_activities=1,
        sticky_queue_schedule_to_start_timeout=timeouts(ttl_ms)["sticky"],
        identity=f"leasecheck-w{os.environ.get(ENV_SLOT, '?')}-{os.getpid()}",
    )
    await worker.run()


def main() -> None:
    """The worker process's entry (SIGTERM ends it, as a crash would: its attempt then times out)."""
    asyncio.run(serve())
