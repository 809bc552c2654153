"""Finding backends: by name (entry point group ``leasecheck.targets``) or ``module:Class``.

A third party plugs in a backend without touching leasecheck: either declare an
entry point in its own package::

    [project.entry-points."leasecheck.targets"]
    my-lock = "my_package.leasecheck_adapter:MyLockTarget"

or name the class on the command line: ``--target my_package.adapter:MyLockTarget``.
leasecheck's own backends are registered the same way, in its pyproject.toml.
A backend in another language is a command: ``--target exec:COMMAND`` (see
:mod:`leasecheck.targets.exec_target`).

A backend's module imports its client library only where it uses it, and the
class names it (``requires``, with the ``extra`` of leasecheck that installs
it): listing the backends imports no client library, and loading one whose
library is missing fails in one line that says what to install (:class:`NotInstalled`).

``module:Class`` is imported the way pytest finds a ``conftest.py``: the
current directory is searched too (appended to ``sys.path``, so it never
shadows an installed package), so ``leasecheck run --target acme_adapter:AcmeLock``
works from the adapter's own folder without ``PYTHONPATH=.``. Worker processes
start in the same directory and load the class the same way.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from typing import Any

from leasecheck.errors import BadInput
from leasecheck.targets.base import Target, TargetConfig
from leasecheck.targets.exec_target import EXEC_PREFIX, BadCommand, exec_target

ENTRY_POINT_GROUP = "leasecheck.targets"

#: leasecheck's extras by the client module each installs (pyproject.toml), so that an adapter
#: whose own import lacks one (``import psycopg`` at the top of a team's module) is told the extra too
EXTRA_OF_MODULE = {
    "psycopg": "postgres", "redis": "redis", "docker": "docker",
    "kazoo": "audit", "etcd3": "audit", "redis_lock": "audit", "portalocker": "audit", "filelock": "audit",
    "sqlalchemy": "audit", "sqlalchemy_dlock": "audit",
}


#: the client library leasecheck itself needs to start a store's server (it asks the server whether it is
#: ready through it: leasecheck.servers.readiness), and the extra that installs it
SERVER_CLIENTS: dict[str, tuple[str, str]] = {"postgres": ("psycopg", "postgres"), "redis": ("redis", "redis")}


class TargetNotFound(BadInput):
    """A ``--target`` that names nothing loadable; ``str()`` says why in one line."""


class NotInstalled(TargetNotFound):
    """A backend whose client library is not installed; ``str()`` says what to install."""


def missing(cls: type[Target]) -> tuple[str, ...]:
    """The modules of ``cls.requires`` that are not installed: looked up, not imported (cheap)."""
    return tuple(name for name in cls.requires if not installed(name))


def installed(module: str) -> bool:
    """Can ``module`` be imported? Found, not imported; one already loaded counts (find_spec refuses a loaded
    module whose ``__spec__`` is None: kombu, once celery has loaded it), one blocked (``sys.modules[name] = None``,
    as a test hides a library) does not. Both registries ask this."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module made unimportable
        return False


def install_command(cls: type[Target]) -> str:
    """What installs ``cls``'s client libraries: ``pip install 'leasecheck[EXTRA]'`` for ours."""
    if cls.extra:
        return f"pip install 'leasecheck[{cls.extra}]'"
    return f"install what provides {', '.join(missing(cls) or cls.requires)}"


def not_installed(cls: type[Target]) -> str | None:
    """What ``cls`` lacks and how to install it ("needs psycopg, which is not installed: pip install ..."), or None."""
    lacking = missing(cls)
    if not lacking:
        return None
    names = lacking[0] if len(lacking) == 1 else f"{', '.join(lacking[:-1])} and {lacking[-1]}"
    return f"needs {names}, which {'is' if len(lacking) == 1 else 'are'} not installed: {install_command(cls)}"


def server_not_installed(store: str | None) -> str | None:
    """Why leasecheck cannot start a ``store`` server here (the client library it asks it with is missing), or None."""
    if store not in SERVER_CLIENTS:
        return None
    module, extra = SERVER_CLIENTS[store]
    if installed(module):
        return None
    return f"starting a {store} server needs {module}, which is not installed: pip install 'leasecheck[{extra}]'"


def available() -> dict[str, str]:
    """Every registered backend: name -> ``module:Class`` (not imported yet)."""
    return {ep.name: ep.value for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)}


def _search_cwd() -> None:
    """Let ``module:Class`` name a module in the current directory (as pytest's rootdir does)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
        importlib.invalidate_caches()


def _import(spec: str) -> type[Target]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TargetNotFound(f"{spec!r}: expected module:Class")
    _search_cwd()
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        extra = EXTRA_OF_MODULE.get((e.name or "").partition(".")[0]) if isinstance(e, ModuleNotFoundError) else None
        hint = f": pip install 'leasecheck[{extra}]'" if extra else ""
        raise TargetNotFound(f"{spec!r}: cannot import {module_name} ({e}){hint}") from None
    except Exception as e:  # the adapter's module itself is broken: say so in one line
        raise TargetNotFound(f"{spec!r}: importing {module_name} failed: {type(e).__name__}: {e}") from None
    obj: object = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise TargetNotFound(f"{spec!r}: {module_name} has no {attr}")
    if not (isinstance(obj, type) and issubclass(obj, Target)):
        raise TargetNotFound(f"{spec!r}: {attr} is not a targets.Target subclass")
    if inspect.isabstract(obj):
        unwritten = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise TargetNotFound(f"{spec!r}: {attr} is abstract (it does not implement {unwritten}): name a concrete backend class")
    if not isinstance(getattr(obj, "name", None), str):
        raise TargetNotFound(f"{spec!r}: {attr} has no name (set the class attribute name = \"...\")")
    return obj


def registered() -> Iterator[tuple[str, str, type[Target] | TargetNotFound]]:
    """Every registered backend: its name, ``module:Class``, and its class or why that cannot be imported.

    Imports the backends' modules, never a client library (each module imports its
    own where it uses it): what a backend lacks is :func:`missing`.
    """
    for name, where in available().items():
        try:
            yield name, where, _import(where)
        except TargetNotFound as e:
            yield name, where, e


def load(spec: str) -> type[Target]:
    """The backend class named by ``spec``: a registered name, ``module:Class``, or ``exec:COMMAND``.

    :class:`NotInstalled` if a client library it ``requires`` is missing.
    """
    if spec.startswith(EXEC_PREFIX):
        try:
            return exec_target(spec.removeprefix(EXEC_PREFIX))
        except BadCommand as e:
            raise TargetNotFound(f"{spec!r}: {e}") from None
    registered = available()
    if spec in registered or ":" in spec:
        cls = _import(registered.get(spec, spec))
        if (lacking := not_installed(cls)) is not None:
            raise NotInstalled(f"{spec!r} {lacking}")
        return cls
    names = ", ".join(registered) or "none installed"
    raise TargetNotFound(f"unknown target {spec!r} (registered: {names}; or give module:Class, or exec:COMMAND)")


@dataclass(frozen=True)
class TargetSpec:
    """How to build a client of the backend in any process: registry name or module:Class, and config.

    Picklable (a name, not a class), so it travels to spawned worker processes,
    each of which builds its own client with :meth:`make`. An ``exec:COMMAND``
    target is the same string: each worker binds the command again.
    """

    target: str
    config: TargetConfig

    def make(self, **changes: Any) -> Target:
        """A new client; ``changes`` override fields of the config (e.g. another ``clock``)."""
        config = replace(self.config, **changes) if changes else self.config
        return load(self.target)(config)
