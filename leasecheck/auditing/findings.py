"""What one audit run showed: the verdict for its fault (a fault's victims, apart from the workload's own
stalls) and its first anomaly (when, and the ops that prove it). Pure readings of a finished run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecheck.checker.verdict import Anomaly, Validity, Verdict
from leasecheck.exits import verdict_word
from leasecheck.lists import names
from leasecheck.nemesis.catalogue import FaultKind


@dataclass(frozen=True)
class FaultVerdict:
    """What a run's faults' victims did: the verdict for the fault, why, its anomalies, and those no fault hit."""

    verdict: str
    reason: str | None
    anomalies: list[Anomaly]
    without_fault: list[Anomaly]


def fault_verdict(verdict: Verdict, reason: str | None, nemesis: str, history: Path,
                  kinds: Sequence[FaultKind] | None = None, ops: Sequence[str] | None = None) -> FaultVerdict:
    """The verdict a run under ``nemesis`` publishes for that fault (``verdict``: the run's :class:`Verdict`).

    An anomaly belongs to the fault when one of the run's faults hit a process
    proving it (its ``faults``: :mod:`leasecheck.checker.attribution`; one
    checked without attribution belongs to it too). When every listed anomaly
    stalled on its own, the fault is judged as the run verdict judges a run
    without them: ``valid``, or ``unknown`` with what the run did not test;
    and ``unknown`` when anomalies were only counted (past 100 per node and
    kind), since whom they were proven by is not known.
    """
    faults = set(names(nemesis, "--fault"))
    mine = [a for a in verdict.anomalies if a.faults is None or any(f.get("fault") in faults for f in a.faults)]
    ours = {id(a) for a in mine}
    without = [a for a in verdict.anomalies if id(a) not in ours]
    if mine or not without:
        return FaultVerdict(verdict_word(verdict.valid), reason, mine, without)
    counted = sum(int(n) for n in verdict.stats.get("anomalies", {}).values())
    if counted > len(verdict.anomalies):
        return FaultVerdict("unknown", f"{counted - len(verdict.anomalies):,} anomalies were counted, not listed: "
                            f"whether {nemesis}'s victims proved them is not known", [], without)
    from leasecheck.checker.coverage import Coverage
    from leasecheck.nemesis.catalogue import lookup
    from leasecheck.verdict.run_verdict import evidence_of, run_verdict

    with history.open("rb") as f:
        evidence = evidence_of(f)
    checked: Validity = "unknown" if verdict.unknown_nodes else True
    rows = lookup(names(nemesis, "--fault")) if kinds is None else kinds
    valid, why = run_verdict(checked, evidence, rows, verdict.coverage or Coverage(), (), *(() if ops is None else (ops,)))
    return FaultVerdict(verdict_word(valid), why, [], without)


def first_anomaly(history: Path, cited: dict[int, Any], anomalies: list[Any]) -> tuple[float | None, dict[str, Any] | None]:
    """The anomaly proven earliest (by the completion of the last op it cites), and when, from the first op's invoke."""
    if not anomalies:
        return None, None

    def proven_at(anomaly: Any) -> int:
        times = [op.complete_time if op.complete_time is not None else op.invoke_time
                 for op in (cited.get(i) for i in anomaly.ops) if op is not None]
        return max(times, default=0)

    first = min(anomalies, key=proven_at)
    start = _first_time(history)
    at = proven_at(first)
    seconds = round((at - start) / 1e9, 3) if start is not None and at else None
    return seconds, {"kind": first.kind, "node": first.node, "ops": list(first.ops)}


def _first_time(history: Path) -> int | None:
    """The time of the history's first event after the header (the run's start, as the history saw it)."""
    try:
        with history.open("rb") as f:
            next(f, None)  # the header
            line = next(f, None)
    except OSError:
        return None
    if not line:
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    t = event.get("time")
    return t if isinstance(t, int) else None
