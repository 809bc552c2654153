"""A run's end, the same for both run kinds: the last word of its verdict, results.json, anomalies.jsonl, report.html,
and what the run gives back (:class:`RunResult`) with its exit code.

The run verdict (:mod:`leasecheck.verdict.run_verdict`) says whether a run tested
enough; here its last word: a run a signal cut short keeps its verdict (an anomaly
proven is proven; else the reason says it was interrupted, by which signal and when,
then what it lacked), and a cut history is never valid. The report is written last and
can only warn: the verdict is in results.json already.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecheck.checker import Verdict
from leasecheck.checker.verdict import Validity
from leasecheck.exits import Exit, interrupted
from leasecheck.frame.interrupts import Interrupts
from leasecheck.report.inputs import ReplayFlag
from leasecheck.rundir.runfolder import RunFolder

log = logging.getLogger("leasecheck.frame")

#: the file, in the run folder, that gets each anomaly proven (as it is proven, when a checker follows the run)


@dataclass
class RunResult:
    """What a run produced: its folder, the run verdict, and its figures.

    ``verdict`` is the run verdict: the checker's, made ``unknown`` when the run
    tested too little (``reason`` says what was missing, see
    :mod:`leasecheck.verdict.run_verdict`). ``interrupted`` names the signal that cut
    the run short (``"SIGINT"``, ``"SIGTERM"``), or is None.
    """

    run_dir: Path
    seed: int
    verdict: Verdict
    stats: dict[str, Any]
    reason: str | None = None
    interrupted: str | None = None

    @property
    def exit_code(self) -> int:
        """docs/contracts/exit-codes.md's: 1 when anomalies are proven; else 128 + the signal if interrupted; else the verdict's."""
        if self.verdict.valid is False:
            return Exit.INVALID
        if self.interrupted is not None:
            return interrupted(signal.Signals[self.interrupted])
        return self.verdict.exit_code


def last_word(valid: Validity, reason: str | None, cut: str | None, interrupts: Interrupts,
              started: float | None) -> tuple[Validity, str | None]:
    """(valid, reason) once the run's end is known: an interrupted run keeps its verdict and its reason says it was cut
    short (:func:`interrupted_reason`); a cut history (``cut``: why) is never valid, whatever else it shows."""
    if interrupts.name is not None and valid is not False:  # what it lacked is not the news: it was cut short
        reason = interrupted_reason(interrupts, started, reason)
    if cut is not None and valid is not False:
        valid, reason = "unknown", cut
    return valid, reason


def interrupted_reason(interrupts: Interrupts, started: float | None, lacked: str | None) -> str:
    """The reason of an interrupted run without a proven anomaly: the signal and when, then what it lacked."""
    at = interrupts.at
    when = f" {at - started:.1f} s after the start" if at is not None and started is not None else ""
    return f"interrupted by {interrupts.name}{when}" + (f"; by then {lacked}" if lacked else "")


def write_results(folder: Path, verdict: Verdict, reason: str | None, interrupts: Interrupts, /, **fields: Any) -> None:
    """results.json: the verdict, its reason, ``interrupted`` (null or the signal's name) and the run kind's own fields."""
    RunFolder(folder).write_results({**verdict.to_json(), "reason": reason, "interrupted": interrupts.name, **fields})


def record_anomalies(run_dir: Path, verdict: Verdict, said_s: float, said_at: Mapping[tuple[str, str], float] | None = None,
                     say: bool = True) -> None:
    """anomalies.jsonl of a run no checker followed op by op: each anomaly of the verdict, said at ``said_at``'s time
    of its (kind, node) if a live check said it (a queue run's), else at ``said_s`` (the run's end, in seconds of its
    history) and then on stderr too, one line each; an empty file when none."""
    from leasecheck.report.live import LiveAnomalies

    lines = LiveAnomalies()
    said_at = said_at or {}
    with RunFolder(run_dir).anomalies.open("a", encoding="utf-8") as out:
        for a in verdict.anomalies:
            at = said_at.get((a.kind, a.node))
            out.write(json.dumps({**a.to_json(), "said_s": round(said_s if at is None else at, 6),
                                  "early": at is not None}) + "\n")
            if at is not None:
                continue
            line = lines.line(a.kind, a.node, a.ops, said_s, False)
            if say and line is not None:
                print(line, file=sys.stderr, flush=True)
    summary = lines.summary(f"{RunFolder.ANOMALIES} of the run folder")
    if say and summary is not None:
        print(summary, file=sys.stderr, flush=True)


def draw_report(run_dir: Path, replay_flags: Sequence[ReplayFlag] = ()) -> None:
    """report.html and the plots, next to results.json; a failure is logged and warned about, never a verdict.

    ``replay_flags``: ``leasecheck run``'s, for a lease run's replay command (:func:`leasecheck.run.flags.replay_flags`)."""
    try:
        from leasecheck.report.html import write_report as write_html  # matplotlib and the page: only now

        write_html(run_dir, replay_flags=replay_flags, warn=lambda message: log.warning("report: %s", message))
    except Exception as e:
        log.warning("the run report could not be written: %s: %s", type(e).__name__, e, exc_info=e)
        line = " ".join(f"{type(e).__name__}: {e}".split())
        print(f"warning: the run report could not be written ({line}); see {RunFolder(run_dir).log}", file=sys.stderr)


__all__ = ["RunResult", "draw_report", "interrupted_reason", "last_word", "record_anomalies",
           "write_results"]
