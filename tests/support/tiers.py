"""The suite's tiers by cost, one folder each: the pure tier fails a broken core in a minute or two, not after twenty.

A test module's folder under ``tests/`` is its tier, cheapest first:

* ``pure/ROOM/``: starts nothing (no server, no run, no child process, no second
  interpreter); judges histories, builds values, reads files. Its folders mirror
  the package's rooms (``pure/checker/`` holds ``leasecheck/checker/``'s), plus
  ``root`` (the package's own modules), ``bench`` and ``suite`` (the suite's own
  machinery). ``--tier pure`` runs it with a guard that makes any process start
  fail the test (``subprocess``, :func:`os.fork`), so the folder cannot drift into
  something that starts a server.
* ``local/``: starts processes but no server: the CLI on files, a child
  interpreter, a wheel build, the linters.
* ``servers/``: starts servers, clusters, hosts or file systems, and talks to
  them directly (stores, backends, faults, transports).
* ``runs/``: whole runs (``leasecheck run``, the plugin, a matrix, the journeys).
* ``audits/``: the audits of third-party libraries, as AUDITS.md publishes them.
* ``detection/``: the detection matrix and the coverage of the dangerous interleavings.

``--tier NAME`` runs one folder; ``--tier rest`` every folder but ``pure``.
``.ci/run`` runs ``pure`` with ``-x`` in a pytest of its own beside ``rest``, and
stops the suite when it fails; a plain ``pytest`` runs all in one session,
longest first (tests/support/schedule.py). The suite's helpers are in
``support/`` (on ``sys.path``, from tests/conftest.py).

Where a new test goes: tests/README.md.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paths import TESTS

#: the tier folders under tests/, cheapest first
FOLDERS = ("pure", "local", "servers", "runs", "audits", "detection")
#: what ``--tier`` takes: a folder, or ``rest`` (every folder but ``pure``)
TIERS = (*FOLDERS, "rest")
#: pure/'s folders that are not a room of the package: its root modules, the benchmarks, the suite itself
NOT_ROOMS = ("root", "bench", "suite")


def tier_of(path: str | Path) -> str | None:
    """The tier folder a test module at ``path`` is in (None: not in one, as a helper in support/ is not)."""
    try:
        first = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in FOLDERS else None


def in_tier(path: str | Path, tier: str) -> bool:
    """Is the test module at ``path`` in ``tier`` (a folder of :data:`FOLDERS`, or ``rest``)?"""
    folder = tier_of(path)
    return folder is not None and folder != "pure" if tier == "rest" else folder == tier


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a test of the pure tier started a process: move its module out of tests/pure/")


@pytest.fixture
def starts_nothing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While a pure-tier test runs, starting a process fails it."""
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse)
    monkeypatch.setattr(os, "fork", _refuse)
    monkeypatch.setattr(os, "posix_spawn", _refuse)
    yield


__all__ = ["FOLDERS", "NOT_ROOMS", "TIERS", "in_tier", "starts_nothing", "tier_of"]
