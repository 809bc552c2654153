"""The audited job queues by name, loaded only when used (a library's module imports it).

``leasecheck audit --list`` reads the names without importing any library; a
queue whose library is not installed says which extra installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

from leasecheck.targets.queues.base import QueueLibrary

#: name -> "module:Class"; one line per audited library
QUEUES: dict[str, str] = {
    "procrastinate": "leasecheck.targets.queues.procrastinate_queue:Procrastinate",
    "pgqueuer": "leasecheck.targets.queues.pgqueuer_queue:Pgqueuer",
    "rq": "leasecheck.targets.queues.rq:RQ",
    "huey": "leasecheck.targets.queues.huey_queue:HueyQueue",
    "celery": "leasecheck.targets.queues.celery_queue:CeleryQueue",
    "dramatiq": "leasecheck.targets.queues.dramatiq_queue:DramatiqQueue",
    "arq": "leasecheck.targets.queues.arq_queue:ArqQueue",
    "saq": "leasecheck.targets.queues.saq_queue:SaqQueue",
    "dbos": "leasecheck.targets.queues.dbos_queue:Dbos",
    "chancy": "leasecheck.targets.queues.chancy_queue:ChancyQueue",
    "temporal": "leasecheck.targets.queues.temporal_queue:TemporalQueue",
}


class QueueNotFound(Exception):
    """A queue name that names nothing loadable; ``str()`` says why in one line."""


def load(name: str) -> type[QueueLibrary]:
    """The adapter class of queue ``name``; :class:`QueueNotFound` if unknown or its library is missing."""
    where = QUEUES.get(name)
    if where is None:
        raise QueueNotFound(f"no audited queue {name!r} (audited queues: {', '.join(sorted(QUEUES)) or 'none'})")
    module, _, cls = where.partition(":")
    try:
        found: type[QueueLibrary] = getattr(importlib.import_module(module), cls)
    except ImportError as e:
        raise QueueNotFound(f"queue {name!r} needs {e.name or e}: pip install 'leasecheck[queues]'") from None
    for needed in found.requires:
        # found, not imported: listing the audits must not load a library (temporalio loads protobuf's C runtime,
        # after which python-etcd3's generated modules no longer load in the same process)
        if not _installed(needed):
            raise QueueNotFound(f"queue {name!r} needs {needed}: pip install 'leasecheck[{found.extra}]'")
    return found


def _installed(module: str) -> bool:
    """Can ``module`` be imported? Found, not imported; one already loaded counts (find_spec refuses a loaded
    module whose ``__spec__`` is None: kombu, once celery has loaded it)."""
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
