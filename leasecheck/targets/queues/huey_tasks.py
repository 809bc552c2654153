"""The ``Huey`` instance ``huey_consumer`` loads (``leasecheck.targets.queues.huey_tasks.huey``).

A separate module because the consumer needs the instance at import time, made
from the run's name and Redis URL, which only the environment the harness gives
the worker carries (:meth:`~leasecheck.targets.queues.huey_queue.HueyQueue.worker_env`).
"""

from __future__ import annotations

import os
from typing import Any

from leasecheck.targets.queues.huey_queue import ENV_NAME, ENV_URL, make_huey

huey: Any = make_huey(os.environ[ENV_NAME], os.environ[ENV_URL])[0]
