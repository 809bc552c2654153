"""The ``leasecheck_run`` fixture's value: one ``leasecheck run`` child process per seed, judged against ``expect``.

:class:`LeasecheckRunner` merges the call with the test's marker and the
defaults, runs each seed as the CLI would (``python -m leasecheck run ... --json``),
stops a run that hangs (SIGTERM, so it heals, then SIGKILL), turns a run with no
verdict into :class:`~leasecheck.ci.plugin_results.LeasecheckError`, and fails the
test with the failure message when a verdict is not the one expected.

Imported when pytest loads the plugin: the standard library, pytest and the
plugin's own modules only; leasecheck's servers are imported when a run starts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from leasecheck.ci.plugin_args import (
    CALL_KEYS,
    DEFAULT_NEMESIS,
    DEFAULT_SEEDS,
    EXPECTATIONS,
    GATE_MAX_TIME_LIMITS,
    check_run_options,
    child_env,
    nemesis_arg,
    replay_command,
    run_args,
    seed_list,
)
from leasecheck.ci.plugin_results import Anomaly, LeasecheckError, LeasecheckResult, failure_message
from leasecheck.exits import SIGNALLED, Exit, verdict_word  # the standard library only, like the plugin

#: seconds a run may take beyond its time limit and evidence wait (servers' start, final reads, the check)
RUN_SLACK_S = 300.0
#: seconds a run gets to heal, record and check after SIGTERM before it is killed
GRACE_S = 60.0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(nothing on stderr)"


def _stop(proc: subprocess.Popen[str], first: signal.Signals, wait_s: float) -> tuple[str, str]:
    """Ask a run to end (it heals its faults and checks what it has), then kill it if it will not."""
    try:
        if proc.poll() is None:
            proc.send_signal(first)
        return proc.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def _exit_meaning(code: int) -> str:
    if code == Exit.BAD_INPUT:
        return "bad options"
    if code == Exit.ENVIRONMENT:
        return "the environment failed"
    if code > SIGNALLED:
        try:
            return f"interrupted by {signal.Signals(code - SIGNALLED).name}"
        except ValueError:
            pass
    if code < 0:
        return f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else "killed"
    return "no verdict"


def run_line(result: LeasecheckResult, elapsed: float) -> str:
    """A run's one line in pytest's output: its verdict, its anomalies' kinds, how long, what it covered."""
    from leasecheck.report.figures import run_seconds, seconds_text  # loaded once a run was made
    from leasecheck.verdict.covered import covered_line

    found = f" ({len(result.anomalies)} anomalies: {', '.join(result.kinds)})" if result.anomalies else ""
    seconds = run_seconds(result.results)  # the run's own figure, as its terminal and report say it
    return (f"leasecheck: {result.target} seed {result.seed}: {result.verdict}{found} in "
            f"{seconds_text(elapsed if seconds is None else seconds)}; "
            f"{covered_line(result.results.get('coverage'))}")


@dataclass
class LeasecheckRunner:
    """The ``leasecheck_run`` fixture's value: call it to run the target once per seed."""

    store: Path
    rootdir: Path
    default_time_limit: float
    #: ``--leasecheck-max-time``: the most a run expected valid goes on until covered (None: 10 × its time limit)
    default_max_time: float | None = None
    #: the test's ``@pytest.mark.leasecheck`` keyword arguments (closest marker wins)
    defaults: dict[str, Any] = field(default_factory=dict)
    #: every run made through this fixture so far, in order
    runs: list[LeasecheckResult] = field(default_factory=list, repr=False)
    #: the session's tally of verdicts (for the terminal summary)
    counts: Counter[str] | None = field(default=None, repr=False)
    #: the session's line per run (verdict and coverage), said at its end even when every test passed
    lines: list[str] | None = field(default=None, repr=False)
    #: the test's ``user_properties``: each run's line goes there too, so a JUnit file carries what a green run covered
    properties: list[tuple[str, object]] | None = field(default=None, repr=False)

    def __call__(self, target: str | None = None, nemesis: str | Iterable[str] | None = None,
                 seeds: int | Iterable[int] | None = None, time_limit: float | None = None,
                 expect: str | None = None, **run_options: Any) -> list[LeasecheckResult]:
        """Run ``target`` under ``nemesis`` once per seed; fail the test if a verdict is not ``expect``.

        Arguments not given come from the test's ``@pytest.mark.leasecheck``, then
        from the defaults (nemesis ``pause,kill``, 3 seeds, ``--leasecheck-time-limit``).
        ``run_options`` are ``leasecheck run`` flags (``ttl=500`` is ``--ttl 500``);
        ``evidence_wait`` defaults to the time limit, as ``leasecheck audit`` does, so
        a slow machine gives a late verdict rather than ``unknown``.
        ``expect`` is ``"valid"`` unless said (``"invalid"`` for a known-broken variant,
        ``"unknown"``); ``"any"`` judges nothing: the results are returned whatever they say.
        ``fail_fast`` is on unless said (``fail_fast=False``): a run stops at its first proven
        anomaly, so a red test is red within a second or two of the proof. A run expected valid
        goes on until covered unless said (``until_covered=False``): past its time limit, until every
        situation that applies to its faults was reached 3 times (``min_count``), up to 10 × the time
        limit (``max_time``, :data:`GATE_MAX_TIME_LIMITS`, or ``--leasecheck-max-time``); each run's line says what
        it covered and what it never reached.
        """
        __tracebackhide__ = True
        given = {"target": target, "nemesis": nemesis, "seeds": seeds, "time_limit": time_limit, "expect": expect}
        merged: dict[str, Any] = dict(self.defaults)
        merged.update({k: v for k, v in given.items() if v is not None})
        merged.update(run_options)
        call = {k: merged.pop(k) for k in CALL_KEYS if k in merged}
        check_run_options(merged)

        chosen_target = call.get("target")
        if not isinstance(chosen_target, str) or not chosen_target:
            raise TypeError("leasecheck_run: no target: pass target='module:Class' (or a registered name, see"
                            " `leasecheck targets`), or set it with @pytest.mark.leasecheck(target=...)")
        chosen_expect = call.get("expect", "valid")
        if chosen_expect not in EXPECTATIONS:
            raise ValueError(f"leasecheck_run: expect={chosen_expect!r}: one of {', '.join(repr(e) for e in EXPECTATIONS)}")
        faults = nemesis_arg(call.get("nemesis", DEFAULT_NEMESIS))
        limit = float(call.get("time_limit", self.default_time_limit))
        chosen_seeds = seed_list(call.get("seeds", DEFAULT_SEEDS))
        merged.setdefault("evidence_wait", limit)
        merged.setdefault("fail_fast", True)
        if chosen_expect == "valid":  # a green gate ends on evidence that it reached the dangerous windows
            merged.setdefault("until_covered", True)
        if merged.get("until_covered"):  # never less than the time limit, the least a run lasts
            merged.setdefault("max_time", max(limit, self.default_max_time) if self.default_max_time is not None
                              else GATE_MAX_TIME_LIMITS * limit)

        results = []
        for seed in chosen_seeds:
            results.append(self.run_one(chosen_target, faults, seed, limit, merged))
        if chosen_expect != "any":
            wrong = [r for r in results if r.verdict != chosen_expect]
            if wrong:
                pytest.fail(failure_message(chosen_target, faults, chosen_expect, wrong, len(results)), pytrace=False)
        return results

    def run_one(self, target: str, nemesis: str, seed: int, time_limit: float, options: Mapping[str, Any]) -> LeasecheckResult:
        """One ``leasecheck run`` in a child process; its results.json as a :class:`LeasecheckResult`."""
        __tracebackhide__ = True
        args = run_args(target, nemesis, seed, time_limit, options)
        command = replay_command(self.rootdir, args, self.store)
        from leasecheck.report.inputs import REPLAY_ENV  # the run keeps the line in test.json: its report shows it
        from leasecheck.rundir.runfolder import RunFolder  # not at the plugin's import, as these: msgspec comes with it
        from leasecheck.servers.base import python_module  # not at the plugin's import: every pytest session loads it

        argv = [*python_module("leasecheck"), *args, "--store", str(self.store), "--json"]
        longest = time_limit + float(options.get("evidence_wait") or 0)
        if options.get("until_covered"):
            longest = max(longest, float(options.get("max_time") or GATE_MAX_TIME_LIMITS * time_limit))
        timeout = longest + RUN_SLACK_S
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=self.rootdir, env={**child_env(), REPLAY_ENV: command}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = _stop(proc, signal.SIGTERM, GRACE_S)
            raise LeasecheckError(f"leasecheck run (seed {seed}) did not finish within {timeout:g} s and was stopped"
                                  f" (exit {proc.returncode}): {_last_line(err)}\n  replay: {command}") from None
        except BaseException:  # Ctrl-C (which the run got too) or any other way out: let it heal its faults first
            if proc.poll() is None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    _stop(proc, signal.SIGTERM, GRACE_S)
            raise
        elapsed = time.monotonic() - started
        code = proc.returncode
        if code not in (Exit.VALID, Exit.INVALID, Exit.UNKNOWN):
            raise LeasecheckError(f"leasecheck run (seed {seed}) gave no verdict: exit {code}, {_exit_meaning(code)}:"
                                  f" {_last_line(err)}\n  replay: {command}")
        try:
            results = json.loads(out)
            run_dir = Path(results["run_dir"])
        except (ValueError, KeyError, TypeError):
            raise LeasecheckError(f"leasecheck run (seed {seed}) exit {code} printed no results.json: {_last_line(err)}"
                                  f"\n  replay: {command}") from None
        result = LeasecheckResult(
            target=target, seed=seed, verdict=verdict_word(results.get("valid")), reason=results.get("reason"),
            anomalies=tuple(Anomaly.from_json(a) for a in results.get("anomalies") or ()), run_dir=run_dir,
            report=RunFolder(run_dir).report, command=command, exit_code=code, results=results,
        )
        self.runs.append(result)
        if self.counts is not None:
            self.counts[result.verdict] += 1
        line = run_line(result, elapsed)
        if self.lines is not None:
            self.lines.append(line)
        if self.properties is not None:
            self.properties.append((f"leasecheck seed {seed}", line))
        print(f"{line}, run folder {run_dir}", file=sys.stderr)
        return result
