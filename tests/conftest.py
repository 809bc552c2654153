"""Hypothesis profiles for the whole suite (pick one with HYPOTHESIS_PROFILE) and the order it runs in.

``dev`` (default) is quick enough to run on every edit; ``ci`` runs more
examples, derandomized so that a red CI run is reproducible from the commit
alone, and without per-example deadlines (CI machines are slow and noisy).
Derandomized, CI runs the same examples on every push, so its count buys a
fixed set, not a search that grows with each run: 150 (not 300) kept the
whole suite within its 20 minutes beside two CPU-bound jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The suite's helpers (tests/support/) are imported by name from every tier folder: sim, stores, hostlab, ...
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    max_examples=150,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Every run in the suite (in-process or a `leasecheck` child, which inherits it) checks its history after the end
# as well, and fails when that verdict differs from the online checker's (leasecheck/run/judgement.py).
os.environ.setdefault("LEASECHECK_CROSSCHECK", "1")

# A failed test whose runs saw the host's wall clock step is said to be so, and run again (tests/support/clock_steps.py).
from clock_steps import pytest_runtest_call  # noqa: E402,F401

# The order tests are handed to xdist's workers in: the longest modules first (tests/support/schedule.py).
from schedule import DurationStore, known_durations, longest_modules_first  # noqa: E402

# Real store servers, shared by every test module of a session.
from stores import etcd_server, postgres_server, redis_server, store_for, zookeeper_server  # noqa: E402,F401

# The tiers by cost, a folder each: --tier pure runs the modules that start nothing, guarded (tests/support/tiers.py).
from tiers import TIERS, in_tier, starts_nothing  # noqa: E402,F401


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help="write each test's seconds to tests/durations.json (the suite's order reads it)")
    parser.addoption("--tier", choices=TIERS, default=None,
                     help="one tier folder (pure: the modules that start nothing, each test guarded), or rest: all but pure "
                          "(tests/support/tiers.py)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--store-durations"):
        config.pluginmanager.register(DurationStore(), "leasecheck-durations")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tier = config.getoption("--tier")
    if tier is not None:
        chosen = [item for item in items if in_tier(str(item.path), tier)]
        config.hook.pytest_deselected(items=[item for item in items if not in_tier(str(item.path), tier)])
        items[:] = chosen
        if tier == "pure":
            for item in items:
                item.fixturenames.insert(0, "starts_nothing")  # type: ignore[attr-defined]
    items[:] = longest_modules_first(items, known_durations())


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    """Five real processes for a fault to aim at (a pause is never aimed at one that is stopped, or gone); killed at
    the end."""
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(5)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
