"""The procrastinate app its workers load (``procrastinate --app=leasecheck.targets.queues.procrastinate_tasks.app worker``).

procrastinate's task decorators need the library at import time, so this tiny
module imports it at the top and only the workers import it; the adapter
(:mod:`.procrastinate_queue`) defers by task name. The settings (database,
the run's schema and queue, the ttl) come from the environment the adapter gives
its workers.

Two tasks: leasecheck's task, and the stalled-job retry of procrastinate's
"Retry stalled jobs" how-to, as a periodic task of the same app, scaled to the ttl.
"""

from __future__ import annotations

import procrastinate

from leasecheck.targets.queues.procrastinate_queue import RETRY_TASK, TASK, Procrastinate, Settings
from leasecheck.targets.queues.task import Identity, execute_async

settings = Settings.from_env()

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=settings.dsn, kwargs=settings.connect_kwargs),
    worker_defaults={
        # the worker's heartbeat, 4 per ttl; stalled after one ttl without one (below and at a worker's start)
        "update_heartbeat_interval": settings.ttl_s / 4,
        "stalled_worker_timeout": settings.ttl_s,
    },
)


@app.task(name=TASK, pass_context=True, queue=settings.queue)
async def leasecheck_task(context: procrastinate.JobContext, job: str) -> str:
    """leasecheck's task, async so that its stall stops the worker's loop (and heartbeat) as a pause would.

    ``attempts`` counts the job's ended executions (0 for the first run); the
    epoch is ``attempts + 1``, the token names the job row and that number."""
    attempts = context.job.attempts
    return await execute_async(job, Identity(token=f"{context.job.id}/{attempts}", epoch=attempts + 1))


@app.periodic(cron=f"* * * * * */{settings.retry_every_s}")
@app.task(name=RETRY_TASK, queueing_lock=f"{RETRY_TASK}/{settings.queue}", pass_context=True,
          queue=settings.queue, priority=Procrastinate.RETRY_PRIORITY)
async def retry_stalled_jobs(context: procrastinate.JobContext, timestamp: int) -> None:
    """The how-to's recipe: retry every ``doing`` job of a worker silent for a ttl."""
    stalled = await app.job_manager.get_stalled_jobs(queue=settings.queue, seconds_since_heartbeat=settings.ttl_s)
    for job in stalled:
        await app.job_manager.retry_job(job)
