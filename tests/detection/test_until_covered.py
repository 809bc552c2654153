"""``--until-covered``: a run that ends on evidence (every applicable situation reached N times), not on the clock.

Real runs of the SQLite reference backend from the command line, read back from
their results.json and their terminal summary; the goal's pieces (what is short,
the one line a green run says) on their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from leasecheck.checker.coverage import Coverage
from leasecheck.exits import Exit
from leasecheck.histories.vocabulary import SITUATIONS
from leasecheck.verdict.covered import covered_line
from leasecheck.verdict.situations import CoverageGoal

CLI = [sys.executable, "-m", "leasecheck"]


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    done = subprocess.run([*CLI, "run", "--seed", "1", "--store", str(tmp_path / "store"), *args],
                          capture_output=True, text=True, timeout=600)
    results = json.loads((tmp_path / "store" / "latest" / "results.json").read_text()) if done.returncode in (0, 1, 2) else {}
    return done, results


def _coverage(**counts: int) -> Coverage:
    return Coverage({s: counts.get(s.replace("-", "_"), 0) for s in SITUATIONS})


def test_the_goal_names_each_situation_short_of_its_count() -> None:
    goal = CoverageGoal(("claim-race-ready", "claim-while-held", "claim-after-expiry"), min_count=3)
    cov = _coverage(claim_race_ready=5, claim_while_held=2)
    assert goal.short(cov) == {"claim-while-held": 2, "claim-after-expiry": 0}
    assert goal.gaps(cov) == ["reached fewer than 3 times: claim-while-held (2), claim-after-expiry (0)"]
    assert goal.gaps(_coverage(claim_race_ready=3, claim_while_held=3, claim_after_expiry=9)) == []


def test_one_line_says_what_a_run_covered_and_why_it_ended() -> None:
    base = {"applicable": ["claim-race-ready", "claim-while-held", "claim-after-expiry"], "missing": ["claim-after-expiry"]}
    assert covered_line(base) == "coverage: 2/3 situations reached; never: claim-after-expiry"
    covered = {**base, "missing": [], "goal": {"min_count": 3, "short": {}, "covered_after_s": 12.34, "ended_by": "covered"}}
    assert covered_line(covered) == "coverage: 3/3 situations reached, each at least 3 times (after 12.3 s)"
    capped = {**base, "goal": {"min_count": 3, "short": {"claim-while-held": 1, "claim-after-expiry": 0}, "ran_s": 40.0,
                               "ended_by": "max-time"}}
    assert covered_line(capped) == ("coverage: 2/3 situations reached (the goal of 3 each not met in 40 s, the most --max-time"
                                    " allows); fewer than 3 times: claim-while-held (1); never: claim-after-expiry")
    stopped = {**capped, "goal": {**capped["goal"], "ended_by": "first anomaly"}}
    assert "(the goal of 3 each not met: stopped by first anomaly)" in covered_line(stopped)
    assert covered_line(None) == "coverage: not counted"


@pytest.mark.parametrize(("args", "said"), [
    (["--min-count", "5"], "--min-count is for --until-covered"),
    (["--max-time", "60", "--strict-coverage"], "--max-time, --strict-coverage are for --until-covered"),
    (["--until-covered", "--time-limit", "10", "--max-time", "5"],
     "--max-time 5 is less than --time-limit 10: the time limit is the least a run lasts"),
    (["--until-covered", "--min-count", "0"], "0 is not in the range x>=1"),
])
def test_goal_options_that_cannot_make_a_run_exit_3_with_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    done = subprocess.run([*CLI, "run", "--store", str(tmp_path / "store"), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == Exit.BAD_INPUT, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "store").exists()  # refused before anything started


def test_a_run_goes_on_past_its_time_limit_until_every_situation_was_reached_three_times(tmp_path: Path) -> None:
    done, results = _run(tmp_path, "--nemesis", "none", "--time-limit", "2", "--until-covered", "--max-time", "120")
    assert done.returncode == Exit.VALID, done.stderr[-2000:]
    cov = results["coverage"]
    goal = cov["goal"]
    assert goal["min_count"] == 3 and goal["short"] == {} and goal["ended_by"] == "covered"
    assert all(cov["counts"][s] >= 3 for s in cov["applicable"])
    # the time limit is the least: met after it, and the run ended at the first look after that
    assert 2 <= goal["covered_after_s"] <= goal["ran_s"] < goal["covered_after_s"] + 5 < goal["max_time_s"] == 120
    line = f"coverage: {len(cov['applicable'])}/{len(cov['applicable'])} situations reached, each at least 3 times (after "
    assert line in done.stdout


def test_at_the_cap_the_short_situations_are_named_and_strict_coverage_makes_it_unknown(tmp_path: Path) -> None:
    done, results = _run(tmp_path / "lenient", "--nemesis", "none", "--time-limit", "2", "--until-covered", "--min-count", "100000", "--max-time", "3")
    assert done.returncode == Exit.VALID, done.stderr[-2000:]
    goal = results["coverage"]["goal"]
    assert goal["ended_by"] == "max-time" and set(goal["short"]) == set(results["coverage"]["applicable"])
    assert "(the goal of 100000 each not met in 3 s, the most --max-time allows); fewer than 100000 times: " in done.stdout

    done, results = _run(tmp_path / "strict", "--nemesis", "none", "--time-limit", "2", "--until-covered", "--min-count", "100000", "--max-time", "3",
                         "--strict-coverage")
    assert done.returncode == Exit.UNKNOWN, done.stderr[-2000:]
    assert results["valid"] == "unknown"
    assert "the run did not test enough: reached fewer than 100000 times: " in results["reason"]
    assert results["coverage"]["goal"]["strict"] is True


def test_a_target_that_never_reads_its_resource_back_is_not_held_to_the_situations_of_that_read() -> None:
    """A pause can only land inside a ``read-resource`` of a target that has one: a gate must not wait for it."""
    from leasecheck.histories.vocabulary import RESOURCE_SITUATIONS
    from leasecheck.nemesis.catalogue import lookup
    from leasecheck.verdict.situations import applicable, coverage_goal

    kinds = lookup(("pause", "kill"))
    assert set(RESOURCE_SITUATIONS) == {"paused-inside-read-resource", "killed-inside-read-resource"}
    assert set(RESOURCE_SITUATIONS) <= set(applicable(kinds))
    without = applicable(kinds, resource_read=False)
    assert not set(RESOURCE_SITUATIONS) & set(without)
    assert set(applicable(kinds)) - set(without) == set(RESOURCE_SITUATIONS)
    assert coverage_goal(kinds, resource_read=False).situations == tuple(without)
