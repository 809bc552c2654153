"""Human-readable verdicts for the terminal, with rich."""

from __future__ import annotations

from collections import Counter
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from leasecheck.checker import Verdict
from leasecheck.checker.explain import render_chain
from leasecheck.histories.vocabulary import KINDS

_STYLE = {True: ("valid", "bold green"), False: ("INVALID", "bold red"), "unknown": ("unknown", "bold yellow")}


def print_verdict(console: Console, path: str, verdict: Verdict, explain: bool = False) -> None:
    """A summary table (ops, nodes, verdict, anomalies by kind), then each anomaly."""
    word, style = _STYLE[verdict.valid]
    console.print(Text(path, style="bold"))
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("verdict", Text(word, style=style))
    table.add_row("ops", f"{verdict.stats['ops']:,}")
    table.add_row("nodes", f"{verdict.stats['nodes']:,}")
    s = verdict.stats
    table.add_row("outcomes", f"{s['ok']:,} ok, {s['fail']:,} fail, {s['info']:,} info")
    counts = Counter({k: v for k, v in s.get("anomalies", {}).items()})
    for kind in KINDS:
        if counts[kind]:
            table.add_row(kind, str(counts[kind]))
    if verdict.unknown_nodes:
        table.add_row("search gave up on", ", ".join(verdict.unknown_nodes[:10]) + (" …" if len(verdict.unknown_nodes) > 10 else ""))
    console.print(table)
    if "anomalies_listed" in s:
        console.print(f"[dim]listing {s['anomalies_listed']} of {sum(counts.values())} anomalies (at most 100 per node and kind)[/dim]")
    for a in verdict.anomalies:
        console.print()
        console.print(Text.assemble((a.kind, "bold red"), f" on {a.node}, ops {a.ops}"))
        console.print(a.explanation, highlight=False)
        if explain:
            console.print(render_chain(a, verdict.cited), highlight=False)


def print_targets(console: Console, rows: list[dict]) -> None:
    """The backends table of ``leasecheck targets``: references first, then broken variants."""
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
                                 f" under {', '.join(row['exposed_by'])}")
        table.add_row(row["name"], row["store"] or "-", "yes" if row["fenced"] else "no", what)
    console.print(table)


class LiveProgress:
    """The live line while a run goes: elapsed, ops/s, ok/fail/info, active faults."""

    def __init__(self, console: Console, opts: Any) -> None:
        self.opts = opts
        self.live = Live(Text("starting…"), console=console, refresh_per_second=4, transient=True)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.live.__exit__(kind, exc, tb)

    def update(self, s: dict[str, Any]) -> None:
        faults = ", ".join(s["faults"]) or "none"
        self.live.update(Text.assemble(
            (f"{self.opts.target} ", "bold"), f"{s['elapsed']:5.1f}/{self.opts.time_limit:g} s  ",
            f"{s['ops_per_s']:7.1f} ops/s  ", ("ok ", "green"), f"{s['ok']:,}  ", ("fail ", "yellow"), f"{s['fail']:,}  ",
            ("info ", "magenta"), f"{s['info']:,}  ", f"workers {s['workers']}  faults: {faults}",
        ))


def print_run(console: Console, result: Any) -> None:
    """The end of ``leasecheck run``: the run's figures, the verdict, and where the store is."""
    s = result.stats
    console.print(Text("run", style="bold"))
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("seed", str(result.seed))
    table.add_row("seconds", f"{s['seconds']:.1f}")
    table.add_row("ops", f"{s['ops']:,} ({s['ok']:,} ok, {s['fail']:,} fail, {s['info']:,} info)")
    reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(s["fail_reasons"].items()))
    table.add_row("refusals", reasons or "none")
    table.add_row("deliveries", f"{s['deliveries']:,} ({s['duplicate_deliveries']:,} duplicated), {s['runs']} runs")
    table.add_row("faults", f"{s['faults']}; worker processes {s['worker_processes']}")
    table.add_row("store", str(result.run_dir))
    console.print(table)
    console.print()
    print_verdict(console, "verdict", result.verdict)
