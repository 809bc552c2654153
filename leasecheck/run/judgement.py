"""A finished run's judgement: the checker's verdict on its history under the run verdict, and its report.

The checker says whether the history is consistent; the run verdict
(:mod:`leasecheck.verdict.run_verdict`) whether the run tested enough for that to
mean anything; an interrupted run says it was cut short, by which signal and
when. The run report (report.html, the plots) is written last, and can only
warn: the verdict is in results.json already.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from leasecheck.checker import Verdict, check_source
from leasecheck.checker.coverage import Coverage
from leasecheck.frame.ending import RunResult, draw_report, last_word, write_results
from leasecheck.frame.interrupts import Interrupts
from leasecheck.nemesis.catalogue import FaultKind
from leasecheck.run.following import Following
from leasecheck.run.options import RunOptions
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.attribution import fault_victims
from leasecheck.verdict.read_back import read_back_gap
from leasecheck.verdict.run_verdict import fault_windows, run_verdict
from leasecheck.verdict.situations import CoverageGoal, coverage_json
from leasecheck.verdict.tails import HistoryTail

log = logging.getLogger("leasecheck.run")


#: set (to anything but "" or "0") to check every run's history after the end as well, and fail the run when that
#: verdict differs from the online checker's: the test suite sets it, so that every run in it holds the two together
CROSSCHECK_ENV = "LEASECHECK_CROSSCHECK"


class OnlineMismatch(AssertionError):
    """The online checker's verdict differs from ``leasecheck check``'s of the same history: a bug of ours."""


def judge(history: Path, opts: RunOptions, kinds: Sequence[FaultKind], tail: HistoryTail | None,
          interrupts: Interrupts, started: float | None, online: Verdict | None = None,
          goal: CoverageGoal | None = None) -> tuple[Verdict, str | None, Coverage]:
    """(verdict, its reason, the coverage reached) of a run's history; ``tail``: its evidence watched so far, if any;
    ``goal``: the run's ``--until-covered`` goal (a strict one short at the end makes the run ``unknown``).

    ``online``: the verdict of the checker that followed the run (:mod:`leasecheck.run.following`); None: check
    the file now (the checker failed, or the run did not record).
    """
    reason: str | None
    reached = Coverage()
    if opts.record:
        checked = online if online is not None else offline(history, opts)
        if online is not None and os.environ.get(CROSSCHECK_ENV, "") not in ("", "0"):
            crosscheck(online, offline(history, opts), history)
        evidence = (tail or HistoryTail(history)).poll()
        reached = checked.coverage or reached
        valid, reason = run_verdict(checked.valid, evidence, kinds, reached, opts.require,
                                    found=[a.kind for a in checked.anomalies], goal=goal)
        if valid is True and tail is not None:  # no node read back: no last word on any (verdict/read_back.py)
            gap = read_back_gap(len(tail.read_back.unread()), int(checked.stats.get("nodes", 0)))
            valid, reason = ("unknown", gap) if gap is not None else (valid, reason)
        valid, reason = last_word(valid, reason, checked.cut, interrupts, started)  # cut short, or a cut history
        verdict = replace(checked, valid=valid)
    else:  # the recorder-overhead baseline: workers ran without recording, nothing to judge
        reason = "recording was off: no history to check"
        verdict = Verdict("unknown", [], {"ops": 0, "nodes": 0}, [reason])
    if reason is not None:
        log.info("verdict %s: %s", verdict.valid, reason)
    return verdict, reason, reached


def offline(history: Path, opts: RunOptions) -> Verdict:
    """``leasecheck check``'s verdict of the history, with the coverage and the faults' attribution the run reports."""
    return check_source(history, budget=opts.check_budget, windows=fault_windows, faults=fault_victims)


def crosscheck(online: Verdict, checked: Verdict, history: Path) -> None:
    """Raise :class:`OnlineMismatch` unless the two verdicts agree: anomalies (with attribution), stats, cited ops, coverage.

    The message names each differing entry with both values (a coverage count, a stat, a cited op), not the two whole
    faces: a CI log keeps the cause even when the run folder is gone."""
    def face(v: Verdict) -> dict[str, Any]:
        return {"verdict": v.to_json(), "cited": sorted(v.cited), "coverage": v.coverage.to_json() if v.coverage else None}

    a, b = face(online), face(checked)
    if a != b:
        raise OnlineMismatch(f"{history}: the online checker's verdict differs from `leasecheck check`'s: "
                             + "; ".join(differences(a, b))[:4000])


def differences(online: Any, offline: Any, at: str = "") -> list[str]:
    """``["coverage.claim-after-power-loss: online 5, offline 6", ...]``: where two JSON faces differ, leaf by leaf."""
    if isinstance(online, dict) and isinstance(offline, dict):
        return [d for k in sorted(set(online) | set(offline), key=str)
                for d in differences(online.get(k), offline.get(k), f"{at}.{k}" if at else str(k))]
    if isinstance(online, list) and isinstance(offline, list) and not all(isinstance(x, dict) for x in online + offline):
        only_on, only_off = [x for x in online if x not in offline], [x for x in offline if x not in online]
        if not only_on and not only_off:
            return [] if online == offline else [f"{at}: same items, another order"]
        return [f"{at}: online only {json.dumps(only_on)[:600]}, offline only {json.dumps(only_off)[:600]}"]
    if online == offline:
        return []
    return [f"{at}: online {json.dumps(online)[:1200]}, offline {json.dumps(offline)[:1200]}"]


def write_report(run_dir: Path, in_child: bool = False) -> None:
    """report.html and the plots, next to results.json; a failure is logged and warned about, never a verdict.

    ``in_child``: drawn by a child process (a soak's: the plots read the whole history, which must not weigh
    on the harness's memory); it says its own warnings on stderr.
    """
    if in_child:
        try:
            subprocess.run(report_child(run_dir), stdin=subprocess.DEVNULL, timeout=3600, check=True)
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("the run report could not be drawn: %s", e)
            print(f"warning: the run report could not be drawn ({e}); see {RunFolder(run_dir).log}", file=sys.stderr)
        return
    from leasecheck.run.flags import replay_flags

    draw_report(run_dir, replay_flags())


def report_child(run_dir: Path) -> list[str]:
    """The command of a child process that draws ``run_dir``'s report (a soak's, and each snapshot's)."""
    code = f"from pathlib import Path; from leasecheck.run.judgement import write_report; write_report(Path({str(run_dir)!r}))"
    return [sys.executable, "-c", code]


def run_stats(run: Any, seconds: float) -> dict[str, Any]:
    """The ``run`` figures of results.json (a :class:`~leasecheck.run.runner.Run`'s tallies after ``seconds``)."""
    t = run.recorder.tally
    return {
        "seconds": round(seconds, 3), "ops": t.ops, "ok": t.ok, "fail": t.fail, "info": t.info,
        "fail_reasons": dict(t.by_reason), "deliveries": run.deliveries.delivered,
        "duplicate_deliveries": run.deliveries.duplicated, "runs": run.deliveries.runs,
        "faults": run.nemesis.started if hasattr(run, "nemesis") else 0,
        "worker_processes": run.pool.spawned if run.pool is not None else 0,
        "resource_read": run.writer.header.meta.get("resource_read", False) if getattr(run, "writer", None) else False,
        **({"stopped_at_first_anomaly": True} if run.stopped_early else {}),
        **({"checker_cpu_s": round(run.following.cpu_s, 3)} if run.following is not None and run.following.cpu_s else {}),
        **({"nodes_closed_while_running": run.closer.closed} if getattr(run, "closer", None) is not None else {}),
        **({"refusals": run.following.refusals} if run.following is not None and run.following.refusals else {}),
    }


def progress_of(run: Any, started: float) -> dict[str, Any]:
    """What the progress display shows of a run going on (a :class:`~leasecheck.run.runner.Run`, started at ``started``)."""
    t = run.recorder.tally
    return {
        "elapsed": time.monotonic() - started, "ops": t.ops, "ok": t.ok, "fail": t.fail, "info": t.info,
        "ops_per_s": t.ops / max(1e-9, time.monotonic() - t.started),
        "faults": run.nemesis.active_names(), "workers": len(run.recorder.live()),
        **({"anomalies": len(run.following.said)} if run.following is not None else {}),
    }


class Snapshots:
    """results.json and the report written every ``every_s`` seconds while the run goes: a soak's verdict so far.

    The snapshot says ``"snapshot": true``; its ``valid`` is False once an anomaly
    is proven, else ``"unknown"`` (the run is not over), and its ``anomalies`` are
    those said so far. The report is drawn by a child process, so that reading a
    night's history for the plots never weighs on the harness's memory.
    """

    def __init__(self, run_dir: Path, every_s: float, following: Following | None, now: float) -> None:
        self.run_dir = run_dir
        self.every_s = every_s
        self.following = following
        self.next = now + every_s if every_s > 0 else math.inf
        self.child: subprocess.Popen[bytes] | None = None
        self.written = 0

    def due(self, now: float, run: Any) -> None:
        """Write a snapshot if one is due (``run``: the :class:`~leasecheck.run.runner.Run`, for its figures)."""
        if now < self.next:
            return
        self.next = now + self.every_s
        self.written += 1
        said = list(self.following.said) if self.following is not None else []
        started = run.started if run.started is not None else now
        RunFolder(self.run_dir).write_results({
            "snapshot": True, "valid": False if said else "unknown", "anomalies": [p.anomaly.to_json() for p in said],
            "stats": {"nodes_judged": self.following.judged if self.following is not None else 0},
            "reason": "the run is still going: this is a snapshot", "target": run.opts.target,
            "nemesis": list(run.opts.nemesis), "seed": run.seed, "run_dir": str(self.run_dir),
            "run": run_stats(run, now - started),
        })
        drawing = ""
        if self.child is None or self.child.poll() is not None:  # else the last one is still being drawn: skip this one
            self.child = subprocess.Popen(report_child(self.run_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL)
            drawing = f"; the report is being drawn (pid {self.child.pid})"
        log.info("snapshot %d of results.json written%s", self.written, drawing)

    def close(self) -> None:
        """Wait for a report still being drawn (the final one is written after it)."""
        if self.child is not None:
            try:
                self.child.wait(60)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()


def finish(run: Any) -> RunResult:
    """A finished run's verdict, results.json and report (a :class:`~leasecheck.run.runner.Run` whose workers are gone
    and whose history is closed): what :meth:`~leasecheck.run.runner.Run.execute` returns."""
    assert run.started is not None
    seconds = time.monotonic() - run.started
    online = run.following.finish() if run.following is not None else None
    run.tail = run.tail or HistoryTail(RunFolder(run.run_dir).history)  # its read_back: the nodes never read back
    goal = run.deadline.goal if run.deadline is not None else None
    verdict, reason, reached = judge(RunFolder(run.run_dir).history, run.opts, run.kinds, run.tail, run.interrupts,
                                     run.started, online, goal)
    stats = run_stats(run, seconds)
    unread = run.tail.read_back.unread()
    write_results(run.run_dir, verdict, reason, run.interrupts, target=run.opts.target, nemesis=list(run.opts.nemesis),
                  seed=run.seed, run_dir=str(run.run_dir), run=stats,
                  coverage=coverage_json(reached, run.kinds, run.opts.require, _goal_json(run, reached), run.resource_read),
                  unread_nodes=unread, unread_count=len(unread))
    if run.opts.record:
        write_report(run.run_dir, in_child=0 < run.opts.snapshot_every_s < seconds)  # a soak's: drawn aside
    return RunResult(run.run_dir, run.seed, verdict, stats, reason, run.interrupts.name)


def _goal_json(run: Any, reached: Coverage) -> dict[str, Any] | None:
    """results.json's ``coverage.goal``: ``--until-covered``'s count, what stayed short, when it was met; None without."""
    if run.deadline is None or run.deadline.goal is None:
        return None
    stopped = run.interrupts.name or ("first anomaly" if run.stopped_early else None)
    return run.deadline.goal_json(reached, run.drove_until if run.drove_until is not None else time.monotonic(), stopped)
