"""A finished run's judgement: the checker's verdict on its history under the run verdict, and its report.

The checker says whether the history is consistent; the run verdict
(:mod:`leasecheck.verdict.run_verdict`) whether the run tested enough for that to
mean anything; an interrupted run says it was cut short, by which signal and
when. The run report (report.html, the plots) is written last, and can only
warn: the verdict is in results.json already.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from leasecheck.checker import Verdict, check_source
from leasecheck.checker.coverage import Coverage
from leasecheck.nemesis.catalogue import FaultKind
from leasecheck.run.interrupts import Interrupts
from leasecheck.run.options import RunOptions
from leasecheck.verdict.attribution import fault_victims
from leasecheck.verdict.run_verdict import fault_windows, run_verdict
from leasecheck.verdict.tails import HistoryTail

log = logging.getLogger("leasecheck.run")


def judge(history: Path, opts: RunOptions, kinds: Sequence[FaultKind], tail: HistoryTail | None,
          interrupts: Interrupts, started: float | None) -> tuple[Verdict, str | None, Coverage]:
    """(verdict, its reason, the coverage reached) of a run's history; ``tail``: its evidence watched so far, if any."""
    reason: str | None
    reached = Coverage()
    if opts.record:
        checked = check_source(history, budget=opts.check_budget, windows=fault_windows, faults=fault_victims)
        evidence = (tail or HistoryTail(history)).poll()
        reached = checked.coverage or reached
        valid, reason = run_verdict(checked.valid, evidence, kinds, reached, opts.require)
        if interrupts.name is not None and valid is not False:  # what it lacked is not the news: it was cut short
            reason = interrupted_reason(interrupts, started, reason)
        verdict = replace(checked, valid=valid)
    else:  # the recorder-overhead baseline: workers ran without recording, nothing to judge
        reason = "recording was off: no history to check"
        verdict = Verdict("unknown", [], {"ops": 0, "nodes": 0}, [reason])
    if reason is not None:
        log.info("verdict %s: %s", verdict.valid, reason)
    return verdict, reason, reached


def interrupted_reason(interrupts: Interrupts, started: float | None, lacked: str | None) -> str:
    """The reason of an interrupted run without a proven anomaly: the signal and when, then what it lacked."""
    at = interrupts.at
    when = f" {at - started:.1f} s after the start" if at is not None and started is not None else ""
    return f"interrupted by {interrupts.name}{when}" + (f"; by then {lacked}" if lacked else "")


def write_report(run_dir: Path) -> None:
    """report.html and the plots, next to results.json; a failure is logged and warned about, never a verdict."""
    try:
        from leasecheck.report.html import write_report as write_html  # matplotlib and the page: only now
        from leasecheck.run.flags import replay_flags

        write_html(run_dir, replay_flags=replay_flags(), warn=lambda message: log.warning("report: %s", message))
    except Exception as e:
        log.warning("the run report could not be written: %s: %s", type(e).__name__, e, exc_info=e)
        line = " ".join(f"{type(e).__name__}: {e}".split())
        print(f"warning: the run report could not be written ({line}); see {run_dir / 'leasecheck.log'}", file=sys.stderr)
