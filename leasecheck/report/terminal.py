"""Human-readable verdicts for terminals and CI logs, with rich.

Two readers: a person at a terminal, and a CI log that someone searches
afterwards. So output off a terminal is never wrapped (a log viewer wraps; a
number broken across lines cannot be found), and a verdict prints at most
:data:`SHOWN_PER_KIND` anomalies of each kind: an adapter that refuses every
claim yields thousands of ``stuck-lease`` findings, and printing them all took
longer than finding them. Every anomaly is still in ``--json`` (and
``results.json``), and ``--explain`` prints them all.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from leasecheck.checker import Anomaly, Verdict
from leasecheck.checker.coverage import Coverage
from leasecheck.checker.explain import render_chain
from leasecheck.histories.vocabulary import KINDS, SITUATIONS
from leasecheck.report.figures import ops_text, seconds_text
from leasecheck.report.refusals import refusals_text
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.covered import covered_line
from leasecheck.verdict.read_back import unread_line

#: anomalies of one kind that ``check`` and ``run`` print; ``--json`` and ``--explain`` give all
SHOWN_PER_KIND = 5
#: the width of a console that is not a terminal: wide enough that rich never wraps a line
NO_WRAP_WIDTH = 1_000_000

_STYLE = {True: ("valid", "bold green"), False: ("INVALID", "bold red"), "unknown": ("unknown", "bold yellow")}


def console_for(stderr: bool = False) -> Console:
    """A console for stdout (or stderr): word-wrapped on a terminal, never wrapped elsewhere."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console.soft_wrap = True
        console.width = NO_WRAP_WIDTH  # tables lay out at this width; they take only what they need
    return console


def print_verdict(
    console: Console, path: str, verdict: Verdict, explain: bool = False, reason: str | None = None,
    run: dict[str, Any] | None = None,
) -> None:
    """A summary table (ops, nodes, verdict, anomalies by kind), then the anomalies, kind by kind.

    Without ``explain``, at most :data:`SHOWN_PER_KIND` of each kind, then one
    line saying how many more there are and where to find them. ``reason``: the
    run's; else the verdict's own (why it is ``unknown``). A cut history says
    so on a line of its own whatever the verdict (an invalid one too). ``run``:
    results.json's ``run`` of a run's verdict (the workers' ops, the refusals
    by reason: :mod:`leasecheck.report.figures`, :mod:`leasecheck.report.refusals`).
    """
    word, style = _STYLE[verdict.valid]
    console.print(Text(path, style="bold"))
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("verdict", Text(word, style=style))
    if reason is None:
        reason = verdict.reason
    if reason:
        table.add_row("reason", reason)
    if verdict.cut is not None and verdict.cut != reason:
        table.add_row("cut", verdict.cut)
    s = verdict.stats
    table.add_row("ops", ops_text(s, run))
    table.add_row("nodes", f"{s['nodes']:,}")
    if "ok" in s:
        table.add_row("outcomes", f"{s['ok']:,} ok, {s['fail']:,} fail, {s['info']:,} info")
    refused = refusals_text((run or {}).get("refusals"))
    if refused is not None:
        table.add_row("refusals", refused)
    counts = Counter({k: v for k, v in s.get("anomalies", {}).items()})
    by_kind: dict[str, list[Anomaly]] = {}
    for a in verdict.anomalies:
        by_kind.setdefault(a.kind, []).append(a)
    kinds = [k for k in KINDS if counts[k] or k in by_kind] + sorted(set(by_kind) - set(KINDS))
    for kind in kinds:
        table.add_row(kind, f"{max(counts[kind], len(by_kind.get(kind, []))):,}")
    if verdict.unknown_nodes:
        table.add_row("search gave up on", ", ".join(verdict.unknown_nodes[:10]) + (" …" if len(verdict.unknown_nodes) > 10 else ""))
    console.print(table)
    for kind in kinds:
        listed = by_kind.get(kind, [])
        shown = listed if explain else listed[:SHOWN_PER_KIND]
        for a in shown:
            console.print()
            console.print(Text.assemble((a.kind, "bold red"), f" on {a.node}, ops {a.ops}"))
            console.print(a.explanation, highlight=False)
            if a.attribution:
                console.print(a.attribution, highlight=False)
            if explain:
                console.print(render_chain(a, verdict.cited), highlight=False)
        more = max(counts[kind], len(listed)) - len(shown)
        if more > 0:
            console.print()
            if explain:  # listed is all the checker kept: at most 100 per node and kind
                console.print(f"… and {more:,} more {kind} counted, not listed (at most 100 per node and kind)")
            else:
                console.print(f"… and {more:,} more {kind}: --json or --explain for all")


def print_coverage(console: Console, coverage: Coverage, applicable: list[str], counts: bool = False,
                   line: str | None = None) -> None:
    """``coverage: 16/18 situations reached; never: a, b`` (or ``line``, a run's :func:`covered_line`); with
    ``counts``, then each situation's count.

    The counts list every situation that applies to the run or happened anyway,
    in vocabulary order; one that applies and never happened is marked.
    """
    console.print(line or coverage.summary(applicable), highlight=False)
    if not counts:
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column()
    for situation in SITUATIONS:
        n = coverage[situation]
        if situation in applicable or n:
            table.add_row(situation, f"{n:,}", Text("never", style="bold yellow") if not n else "")
    console.print(table)


def coverage_of_results(saved: dict[str, Any]) -> tuple[Coverage, list[str]] | None:
    """(coverage, applicable situations) from results.json's ``coverage``, or None when it has none."""
    obj = saved.get("coverage")
    if not isinstance(obj, dict) or not isinstance(obj.get("counts"), dict):
        return None
    counts = obj["counts"]
    return Coverage({s: int(counts.get(s, 0)) for s in SITUATIONS}), [s for s in obj.get("applicable", []) if s in SITUATIONS]


def print_targets(console: Console, rows: list[dict]) -> None:
    """The backends table of ``leasecheck targets``: references first, then broken variants; each says what it lacks."""
    table = Table(title="lease backends", title_justify="left")
    for col in ("name", "store", "fenced", "what it is"):
        table.add_column(col)
    for row in sorted(rows, key=lambda r: (bool(r.get("bug")), "error" in r, r["name"])):
        if "error" in row:
            table.add_row(row["name"], "", "", Text(f"cannot load: {row['error']}", style="red"))
            continue
        what = Text(row["summary"])
        if row["bug"]:
            what = Text.assemble(row["summary"], "\n", ("expected: " + ", ".join(row["expected"]), "red"),
                                 f" under {', '.join([*row['exposed_by'], *row.get('exposed_by_workload', [])])}")
        if row.get("missing"):
            what = Text.assemble(what, "\n", (f"not installed (needs {', '.join(row['missing'])}): {row['install']}", "yellow"))
        table.add_row(row["name"], row["store"] or "-", "yes" if row["fenced"] else "no", what)
    console.print(table)


def _results(run_dir: Path) -> dict[str, Any]:
    """results.json of a run (what the run wrote beside the verdict), or {} if it is unreadable."""
    try:
        obj = json.loads(RunFolder(Path(run_dir)).results.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def print_run(console: Console, result: Any, coverage_counts: bool = False) -> None:
    """The end of ``leasecheck run``: the run's figures, the verdict, the coverage, and where the store is.

    ``ops`` is printed once, in the verdict: every op in the history (an
    invoke with its completion, or without one, which counts as ``info``),
    then how many of them the workers did and how many the harness read
    (:func:`~leasecheck.report.figures.ops_text`, as the report says them).
    The refusals by reason, with those a fault explains, follow the outcomes.
    """
    s = result.stats
    saved = _results(result.run_dir)
    console.print(Text("run", style="bold"))
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("seed", str(result.seed))
    table.add_row("seconds", seconds_text(s["seconds"]))
    interrupted = saved.get("interrupted", getattr(result, "interrupted", None))
    if interrupted:
        table.add_row("interrupted", Text(f"by {interrupted}", style="bold yellow"))
    if s.get("stopped_at_first_anomaly"):
        table.add_row("stopped", "at the first proven anomaly (--fail-fast)")
    if s.get("resource_read") is False:
        table.add_row("resource", Text("never read back: the target has no read_resource (docs/extending.md)", style="yellow"))
    if "refusals" not in s:  # the checker thread failed: the recorder's counts, no fault named (else in the verdict)
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(s.get("fail_reasons", {}).items()))
        table.add_row("refusals", reasons or "none")
    if "deliveries" in s:
        table.add_row("deliveries", f"{s['deliveries']:,} ({s['duplicate_deliveries']:,} duplicated), {s['runs']} runs")
    if "faults" in s:
        table.add_row("faults", f"{s['faults']}; worker processes {s['worker_processes']}")
    unread = saved.get("unread_nodes")
    if isinstance(unread, list) and unread:  # the nodes whose last word the history lacks (verdict/read_back.py)
        line = unread_line([str(n) for n in unread], int((saved.get("stats") or {}).get("nodes", len(unread))))
        table.add_row("read back", Text(line or "", style="yellow"))
    table.add_row("store", str(result.run_dir))
    console.print(table)
    console.print()
    reason = saved.get("reason", getattr(result, "reason", None))
    print_verdict(console, "verdict", result.verdict, reason=reason if isinstance(reason, str) else None, run=s)
    reached = coverage_of_results(saved)
    if reached is not None:
        console.print()
        print_coverage(console, *reached, counts=coverage_counts, line=covered_line(saved.get("coverage")))


def print_audit_plans(console: Console, rows: list[Any], broken: list[Any]) -> None:
    """``leasecheck audit --list``: each audited library and mode, its faults and what was published for them."""
    table = Table(title="audits (leasecheck audit LIBRARY [--mode MODE])", title_justify="left")
    for col in ("library", "version", "mode", "target", "fault: published verdict", "seeds"):
        table.add_column(col)
    def published(plan: Any) -> str:
        return "\n".join(f"{f.nemesis}: {f.expected}" + (f" ({', '.join(f.kinds)})" if f.kinds else "") for f in plan.faults)

    for a in sorted(rows, key=lambda a: (a.plan.library, a.plan.mode)):
        table.add_row(a.plan.library, a.version, a.plan.mode, a.target, published(a.plan), ",".join(map(str, a.plan.seeds)))
    for b in sorted(broken, key=lambda b: (b.plan is None, b.target)):
        if b.plan is None:  # its module would not import: no plan to show
            table.add_row("?", "", "", b.target, Text(f"cannot load: {b.error}", style="red"), "")
        else:  # its plan read from its class, its library not installed here: what was published, and what to install
            verdicts = Text(published(b.plan))
            verdicts.append(f"\ncannot load here: {b.error}", style="red")
            table.add_row(b.plan.library, "not installed", b.plan.mode, b.target, verdicts, ",".join(map(str, b.plan.seeds)))
    console.print(table)


def print_audit_result(console: Console, r: Any) -> None:
    """One audit run, as it ends: verdict, kinds, first anomaly and whether it is what was published."""
    style = {"valid": "green", "invalid": "red"}.get(r.verdict, "yellow")
    line = Text.assemble(
        f"{r.library} {r.version} [{r.mode}] {r.nemesis} seed {r.seed}: ", (r.verdict, style),
    )
    if r.kinds:
        line.append(f" ({', '.join(r.kinds)})")
    if r.proof is not None:
        line.append(f"; first anomaly after {r.first_anomaly_s} s: {r.proof['kind']} on {r.proof['node']}, ops {r.proof['ops']}")
    if r.reason:
        line.append(f"; {r.reason}")
    if r.without_fault:
        first = r.without_fault_proof
        line.append(f"; invalid without the fault (the workload's own stall): {', '.join(r.without_fault)}"
                    f" ({r.without_fault_count} anomal{'y' if r.without_fault_count == 1 else 'ies'}"
                    + (f"; first: {first['kind']} on {first['node']}, ops {first['ops']})" if first else ")"))
    line.append("; as published" if r.matches else f"; NOT as published ({r.published.expected})",
                style="" if r.matches else "bold red")
    console.print(line, highlight=False)
    console.print(f"  {r.run_dir}", highlight=False)
