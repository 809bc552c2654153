"""The suite's order: the longest modules first, so no long test starts last and keeps two workers idle.

pytest-xdist hands tests out in collection order. In file order, a module of two-minute journeys that
sorts in the middle of the alphabet starts late, and a run's last minutes are one worker finishing it
while the others wait. Ordered by each module's measured time, longest first, the long tests start at
once and the suite ends on short ones, the longest-job-first rule that keeps workers evenly busy. It
takes ``--dist worksteal`` (.ci/run): a worker that runs dry takes half of another's queue, so the long
tests are shared out as the run goes; ``--dist load`` deals the first quarter of the tests (here, the
long ones) out once and for all, and one worker may run its share long after the others are done.

Whole modules move, in their own order: a module's fixtures (a real run, a server, a built wheel) are
set up once per worker as before, never once per test.

The times are measured, not guessed: ``python -m pytest -n 4 --store-durations`` writes every test's
seconds (setup, call and teardown) to ``tests/durations.json``, merged into what it held. A module
the file does not know yet runs after the known ones, in file order; a stale file only costs time,
never a test.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from paths import TESTS

DURATIONS = TESTS / "durations.json"


def known_durations(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test node id, as last stored (none if there is no file)."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
    except FileNotFoundError:
        return {}


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_modules_first(items: list[pytest.Item], durations: dict[str, float]) -> list[pytest.Item]:
    """``items`` grouped by module, the modules by their known total seconds (longest first), each in its own order.

    Unknown modules come last, in the order they were collected; the sort is stable, so every xdist worker
    collects the same order (xdist refuses workers whose collections differ).
    """
    totals: dict[str, float] = defaultdict(float)
    for nodeid, seconds in durations.items():
        totals[module_of(nodeid)] += seconds
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(module_of(item.nodeid), len(first_seen))
    return sorted(items, key=lambda item: (-totals.get(module_of(item.nodeid), 0.0), first_seen[module_of(item.nodeid)]))


class DurationStore:
    """Adds up each test's setup, call and teardown seconds; writes them at the session's end (controller only)."""

    def __init__(self, path: Path = DURATIONS) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller sees every report and writes
            return
        root = Path(session.config.rootpath)
        merged: dict[str, float] = {k: v for k, v in known_durations(self.path).items() if (root / module_of(k)).exists()}
        merged.update({k: round(v, 2) for k, v in self.seconds.items()})
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n", encoding="utf-8")
