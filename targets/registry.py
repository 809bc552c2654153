"""Finding backends: by name (entry point group ``leasecheck.targets``) or ``module:Class``.

A third party plugs in a backend without touching leasecheck: either declare an
entry point in its own package::

    [project.entry-points."leasecheck.targets"]
    my-lock = "my_package.leasecheck_adapter:MyLockTarget"

or name the class on the command line: ``--target my_package.adapter:MyLockTarget``.
leasecheck's own backends are registered the same way, in its pyproject.toml.
A backend in another language is a command: ``--target exec:COMMAND`` (see
:mod:`leasecheck.targets.exec_target`).

``module:Class`` is imported the way pytest finds a ``conftest.py``: the
current directory is searched too (appended to ``sys.path``, so it never
shadows an installed package), so ``leasecheck run --target acme_adapter:AcmeLock``
works from the adapter's own folder without ``PYTHONPATH=.``. Worker processes
start in the same directory and load the class the same way.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from typing import Any

from leasecheck.targets.base import Target, TargetConfig
from leasecheck.targets.exec_target import EXEC_PREFIX, BadCommand, exec_target

ENTRY_POINT_GROUP = "leasecheck.targets"


class TargetNotFound(Exception):
    """A ``--target`` that names nothing loadable; ``str()`` says why in one line."""


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
        raise TargetNotFound(f"{spec!r}: cannot import {module_name} ({e})") from None
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
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise TargetNotFound(f"{spec!r}: {attr} is abstract (it does not implement {missing}): name a concrete backend class")
    if not isinstance(getattr(obj, "name", None), str):
        raise TargetNotFound(f"{spec!r}: {attr} has no name (set the class attribute name = \"...\")")
    return obj


def load(spec: str) -> type[Target]:
    """The backend class named by ``spec``: a registered name, ``module:Class``, or ``exec:COMMAND``."""
    if spec.startswith(EXEC_PREFIX):
        try:
            return exec_target(spec.removeprefix(EXEC_PREFIX))
        except BadCommand as e:
            raise TargetNotFound(f"{spec!r}: {e}") from None
    registered = available()
    if spec in registered:
        return _import(registered[spec])
    if ":" in spec:
        return _import(spec)
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
