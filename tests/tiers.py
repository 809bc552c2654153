"""The suite's tiers by cost: the pure tier fails a broken core in a minute or two, not after twenty.

A *pure* test module starts nothing: no server, no run, no child process, no
second interpreter; it judges histories, builds values and reads files. Its
tests are listed here, and ``--tier pure`` runs only them with a guard that
makes any process start fail the test (``subprocess`` and :func:`os.fork`), so
the list cannot drift into something that starts a server. ``--tier rest`` runs
every other module. ``.ci/run`` runs ``pure`` with ``-x`` in a pytest of its own beside
``rest``, and stops the suite when it fails; a plain ``pytest`` runs both in one session,
longest first (tests/schedule.py).

Where a new test goes: into a module of the room it tests (tests/README.md's
map); a module that starts nothing belongs in :data:`PURE` (the guard says at
once if it does start something).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

#: the modules that start nothing (each held by the guard when run as ``--tier pure``)
PURE = (
    "test_bench_histories.py",
    "test_columns.py",
    "test_coverage_inside.py",
    "test_coverage_power.py",
    "test_fast_engine.py",
    "test_grant_order.py",
    "test_member_faults.py",
    "test_online.py",
    "test_outcome_words.py",
    "test_properties.py",
    "test_queue_assemble.py",
    "test_reader_reference.py",
    "test_resource_reads.py",
    "test_suite_order.py",
)
TIERS = ("pure", "rest")


def in_tier(path: str, tier: str) -> bool:
    """Is the test module at ``path`` in ``tier``?"""
    pure = os.path.basename(path) in PURE
    return pure if tier == "pure" else not pure


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a test of the pure tier started a process: move its module out of tests/tiers.py's PURE")


@pytest.fixture
def starts_nothing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While a pure-tier test runs, starting a process fails it."""
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse)
    monkeypatch.setattr(os, "fork", _refuse)
    monkeypatch.setattr(os, "posix_spawn", _refuse)
    yield


__all__ = ["PURE", "TIERS", "in_tier", "starts_nothing"]
