"""The Dramatiq broker and actor the workers of a ``dramatiq`` audit import (``dramatiq`` this module).

Apart from :mod:`.dramatiq_queue` because ``@dramatiq.actor`` registers with
the global broker at import time, and the broker needs the run's Redis, which
only the workers' environment says.
"""

from __future__ import annotations

import dramatiq
from dramatiq.middleware import CurrentMessage

from leasecheck.targets.queues.dramatiq_queue import ACTOR, QUEUE, broker_from_env
from leasecheck.targets.queues.task import Identity, execute

broker, options = broker_from_env()
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name=ACTOR, queue_name=QUEUE, **options)
def queue_task(job: str) -> str:
    """One execution of ``job``: its token is the message id and its retry count (the only number Dramatiq gives)."""
    message = CurrentMessage.get_current_message()
    assert message is not None, "the CurrentMessage middleware is installed by make_broker"
    return execute(job, Identity(token=f"{message.message_id}/{message.options.get('retries', 0)}"))
