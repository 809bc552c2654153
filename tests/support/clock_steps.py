"""A test that failed while the host's wall clock stepped is run again; one that failed without a step never is.

Why: Postgres and Redis judge a lease by the host's wall clock, so when that clock steps (a
virtual machine paused and resynced, as CI machines are), a correct store expires the leases
alive at that moment early, and the run says so: its verdict is ``unknown``, "the host's wall
clock stepped during the run (...); run again" (leasecheck/verdict/run_verdict.py), which a test
expecting ``valid`` reports as a failure. The CI machine on record stepped twice in fourteen
minutes (+1165 ms and +541 ms, each under a Redis run). The run is right and the test's
expectation assumed a steady clock, so the test is run again, as the verdict asks, and only then:
a failed test whose runs recorded a ``host-clock-step`` is re-raised as :class:`HostClockStepped`
(chained to the real failure, which the report still shows), and pyproject's addopts have
pytest-rerunfailures run exactly that exception again, twice at most. A test that fails three
times over stepped clocks is still red.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecheck.nemesis.host_clock import HOST_CLOCK_STEP
from leasecheck.rundir.runfolder import RunFolder

#: a file's time is the kernel's coarse clock, up to a tick (10 ms at HZ=100) behind time.time(): a history written
#: just after the test began may carry a time just before it
TICK_S = 0.01


class HostClockStepped(Exception):
    """The test failed, and during it the host's wall clock stepped: the failure may be the step's."""


def steps_since(root: Path, since: float) -> list[float]:
    """The ``delta_ms`` of every host-clock-step recorded in the run histories under ``root`` written since ``since``."""
    steps: list[float] = []
    for history in root.rglob(RunFolder.HISTORY):
        try:
            if history.stat().st_mtime < since:
                continue
            with history.open(encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    if HOST_CLOCK_STEP in line:
                        event = json.loads(line)
                        if event.get("f") == HOST_CLOCK_STEP:
                            steps.append(float((event.get("value") or {}).get("delta_ms", 0.0)))
        except (OSError, ValueError):
            continue
    return steps


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run the test; when it fails and a run it made saw the host's clock step, say so as :class:`HostClockStepped`."""
    began = time.time() - TICK_S
    try:
        return (yield)
    except (Exception, pytest.fail.Exception) as failure:
        root = item.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]  # every run a test makes is under it
        steps = steps_since(root, began)
        if not steps:
            raise
        said = ", ".join(f"{d:+g} ms" for d in steps)
        raise HostClockStepped(f"the host's wall clock stepped during this test ({said}): run again") from failure
