"""The suite runs a failed test again only when the host's wall clock stepped under it (tests/support/clock_steps.py).

Each case is a small test module run by pytest in pytester's folder with this suite's hook and its
addopts: the inner test writes a real history (leasecheck's own writer) with or without a
``host-clock-step`` event, as a run does when the watch sees the clock step, and fails the first
time it runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from paths import SUPPORT

pytest_plugins = ["pytester"]

INNER = '''
from pathlib import Path
from leasecheck.histories.format import Header
from leasecheck.histories.writer import HistoryWriter
from leasecheck.nemesis.host_clock import HOST_CLOCK_STEP

def test_a_run(tmp_path_factory):
    attempts = tmp_path_factory.getbasetemp().parent / "attempts"
    attempts.mkdir(exist_ok=True)
    n = len(list(attempts.iterdir()))
    (attempts / str(n)).touch()
    run = tmp_path_factory.mktemp("run")
    with HistoryWriter(run / "history.jsonl", Header(1000, 0, {{"target": "redis"}})) as w:
        if {step}:
            w.nemesis(HOST_CLOCK_STEP, {{"delta_ms": 1165.11}})
    assert n >= {passes_at}, "unknown: the run's verdict"
'''


def run_inner(pytester: pytest.Pytester, step: bool, passes_at: int) -> pytest.RunResult:
    pytester.makeini("[pytest]\n")  # not this suite's addopts: the flags below are the case
    pytester.makeconftest("from clock_steps import pytest_runtest_call  # noqa: F401\n")
    pytester.makepyfile(test_inner=INNER.format(step=step, passes_at=passes_at))
    path = os.pathsep.join(p for p in (str(SUPPORT), os.environ.get("PYTHONPATH", "")) if p)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONPATH", path)  # the inner conftest imports the suite's hook
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--reruns", "2",
                                             "--only-rerun", "HostClockStepped", timeout=120)


def outcomes(result: pytest.RunResult) -> dict[str, int]:
    """The inner session's tally (pytest's own assert_outcomes knows no ``rerun``)."""
    return result.parseoutcomes()


def test_a_test_that_failed_while_the_clock_stepped_is_run_again(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, step=True, passes_at=1)
    assert outcomes(result) == {"passed": 1, "rerun": 1}


def test_a_test_that_fails_under_every_step_stays_red_and_says_why(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, step=True, passes_at=5)
    assert outcomes(result) == {"failed": 1, "rerun": 2}
    result.stdout.fnmatch_lines(["*HostClockStepped: the host's wall clock stepped during this test (+1165.11 ms*"])
    result.stdout.fnmatch_lines(["*unknown: the run's verdict*"])  # the real failure, chained


def test_a_test_that_failed_without_a_step_is_never_run_again(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, step=False, passes_at=1)
    assert outcomes(result) == {"failed": 1}


def test_a_plugin_gate_failed_on_a_clock_step_is_rerun_by_the_reason_docs_pytest_md_names(pytester: pytest.Pytester,
                                                                                          tmp_path: Path) -> None:
    """docs/pytest.md tells a team to rerun such a gate with ``--only-rerun "wall clock stepped during the run"``: that
    matches the plugin's own failure of a run whose verdict the step made unknown (the reason run_verdict gives)."""
    from leasecheck.ci.plugin_results import LeasecheckResult, failure_message
    from leasecheck.histories.format import Header
    from leasecheck.histories.writer import HistoryWriter
    from leasecheck.nemesis.host_clock import HOST_CLOCK_STEP
    from leasecheck.verdict.run_verdict import evidence_of, history_coverage, run_verdict

    history = tmp_path / "history.jsonl"
    with HistoryWriter(history, Header(1000, 10, {"target": "redis"})) as w:
        w.nemesis(HOST_CLOCK_STEP, {"delta_ms": 1165.11})
    lines = history.read_bytes().splitlines()
    valid, reason = run_verdict(False, evidence_of(lines), (), history_coverage(lines)[1], found=["premature-expiry"])
    assert valid == "unknown" and reason is not None
    result = LeasecheckResult("redis", 1, "unknown", reason, (), tmp_path, tmp_path / "report.html", "leasecheck run",
                              2, {})
    message = failure_message("redis", "pause,kill", "valid", [result], 3)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_gate=f'''
import pytest
from pathlib import Path

def test_gate(tmp_path_factory):
    seen = tmp_path_factory.getbasetemp().parent / "seen"
    if not seen.exists():
        seen.touch()
        pytest.fail({message!r}, pytrace=False)
''')
    got = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "--reruns", "2", "--only-rerun",
                                        "wall clock stepped during the run", timeout=120)
    assert outcomes(got) == {"passed": 1, "rerun": 1}
