"""Finding job queues: by name (leasecheck's own, and the entry point group ``leasecheck.queues``) or ``module:Class``.

A third party plugs in a queue library without touching leasecheck, as it plugs in a
lock: either declare an entry point in its own package::

    [project.entry-points."leasecheck.queues"]
    my-queue = "my_package.leasecheck_queue:MyQueue"

or name the class on the command line: ``leasecheck audit my_package.leasecheck_queue:MyQueue``
(the current directory is searched too, as ``run --target`` searches it). The class is a
:class:`~leasecheck.targets.queues.base.QueueLibrary` with its audit plans.

An adapter's module imports its library only where it uses it, and the class names it
(``requires``, with the extra that installs it): ``leasecheck audit --list`` reads every
plan without importing a library (:func:`load_class`), and loading one whose library is
missing fails in one line that says what to install (:func:`load`).
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points

from leasecheck.errors import BadInput
from leasecheck.targets.queues.base import QueueLibrary
from leasecheck.targets.registry import _search_cwd, installed

#: the entry point group a package declares its queue adapters in (``name = "module:Class"``)
ENTRY_POINT_GROUP = "leasecheck.queues"

#: leasecheck's own audited libraries: name -> "module:Class"; one line per library (a third party's: the entry points)
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


class QueueNotFound(BadInput):
    """A queue name that names nothing loadable; ``str()`` says why in one line."""


def available() -> dict[str, str]:
    """Every queue known by name: leasecheck's own, then the entry point group's (not imported yet)."""
    found = dict(QUEUES)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        found.setdefault(ep.name, ep.value)
    return found


def is_queue_path(spec: str) -> bool:
    """Does ``spec`` name a class (``module:Class``) rather than a queue's name?"""
    return ":" in spec and spec not in available()


def load_class(name: str) -> type[QueueLibrary]:
    """The adapter class of queue ``name`` (a name or ``module:Class``), its library not asked for: its plans, its
    extra. :class:`QueueNotFound` if unknown, or its module does not import, or it is no concrete QueueLibrary."""
    known = available()
    where = known.get(name) or (name if ":" in name else None)
    if where is None:
        raise QueueNotFound(f"no audited queue {name!r} (audited queues: {', '.join(sorted(known))}; "
                            "or name a QueueLibrary of your own by module:Class)")
    module, _, attr = where.partition(":")
    if not module or not attr:
        raise QueueNotFound(f"{name!r}: expected module:Class")
    _search_cwd()
    try:
        found: object = getattr(importlib.import_module(module), attr, None)
    except ImportError as e:
        raise QueueNotFound(f"queue {name!r} needs {e.name or e}: pip install 'leasecheck[queues]'") from None
    except Exception as e:  # the adapter's module itself is broken: say so in one line
        raise QueueNotFound(f"{name!r}: importing {module} failed: {type(e).__name__}: {e}") from None
    if not (isinstance(found, type) and issubclass(found, QueueLibrary)):
        raise QueueNotFound(f"{name!r}: {attr} is no {module} class subclassing leasecheck.targets.queues.QueueLibrary")
    if inspect.isabstract(found):
        unwritten = ", ".join(sorted(getattr(found, "__abstractmethods__", ())))
        raise QueueNotFound(f"{name!r}: {attr} is abstract (it does not implement {unwritten})")
    for needed in ("name", "library", "broker"):
        if not isinstance(getattr(found, needed, None), str):
            raise QueueNotFound(f"{name!r}: {attr} has no {needed} (set the class attribute {needed} = \"...\")")
    return found


def lacking(cls: type[QueueLibrary], name: str) -> str | None:
    """Why the library of ``cls`` cannot run here (one line saying what to install), or None."""
    for needed in cls.requires:
        # found, not imported: listing the audits must not load a library (temporalio loads protobuf's C runtime,
        # after which python-etcd3's generated modules no longer load in the same process)
        if not installed(needed):
            ours = cls.__module__.startswith("leasecheck.")
            return f"queue {name!r} needs {needed}: pip install " + (f"'leasecheck[{cls.extra}]'" if ours else needed)
    return None


def load(name: str) -> type[QueueLibrary]:
    """The adapter class of queue ``name`` (a name or ``module:Class``); :class:`QueueNotFound` if unknown or its library
    is missing."""
    found = load_class(name)
    if (why := lacking(found, name)) is not None:
        raise QueueNotFound(why)
    return found


