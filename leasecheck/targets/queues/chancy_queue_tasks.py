"""chancy's task for leasecheck, in a module of its own: chancy injects the job only into a parameter annotated with the real class.

``Executor.get_function_and_kwargs`` gives the running ``QueuedJob`` to a
keyword-only parameter whose annotation ``issubclass(..., QueuedJob)``; under
``from __future__ import annotations`` the annotation is a string and nothing
is injected, so this module keeps real annotations and imports chancy at its
top (the adapter module stays importable without chancy).
"""

from chancy.job import QueuedJob

from leasecheck.targets.queues.task import Identity, execute_async

#: where the result goes: chancy stores no return value, only the job's ``meta``
#: (chancy.contrib.django keeps a task's return value as ``context.meta["_django_return_value"]``)
RESULT_KEY = "leasecheck_result"


async def leasecheck_task(*, name: str, context: QueuedJob) -> str:
    """One execution of job ``name``, identified by its claim (a fresh uuid per claim, the fence of its updates)."""
    result = await execute_async(name, Identity(token=str(context.claim_id)))
    context.meta[RESULT_KEY] = result
    return result
