"""The Celery app and task the workers of a ``celery`` audit import (``celery -A`` this module).

Apart from :mod:`.celery_queue` because ``@app.task`` needs the app at import
time, and the app needs the run's broker, which only the workers' environment
says.
"""

from __future__ import annotations

from typing import Any

from leasecheck.targets.queues.celery_queue import TASK_NAME, app_from_env
from leasecheck.targets.queues.task import Identity, execute

app = app_from_env()


@app.task(name=TASK_NAME, bind=True, acks_late=True)
def queue_task(self: Any, job: str) -> str:
    """One execution of ``job``: its token is kombu's delivery tag at the worker running it (the tag alone is the
    same for every delivery of the job)."""
    tag = (self.request.properties or {}).get("delivery_tag") or self.request.id
    return execute(job, Identity(token=f"{tag}@{self.request.hostname}"))
