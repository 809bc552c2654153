"""How big and how fast the run report is, beside a Jepsen-style ``timeline.html``.

The targets (issue 12) are for a 1,000,000-op history: ``leasecheck report``
writes ``report.html`` in at most 10 s, the file is at most 60 MB, and headless
Chromium draws its first timeline frame (``window.lcReport.firstPaintMs``) in
at most 3 s after the page starts loading.

For 10k, 100k and 1M-op histories of ``bench.gen`` (16 workers, 100 nodes per
run, 1 % crashed; valid by construction) the script:

1. makes a run folder under ``bench/out/`` holding the history and the
   ``results.json`` that ``leasecheck check --json`` writes for it (cached: the
   report's figure is the report's cost, not the checker's, as after a run);
2. runs ``leasecheck report RUN_DIR -o FILE`` in a fresh interpreter,
   ``--repeat`` times: the median wall time (start-up, reading, plots and
   writing included) and the largest peak RSS;
3. loads the report from disk in headless Chromium (``tests/support/browser.py``: a
   fresh browser per load, so no cache is warm), ``--loads`` times, and takes
   the median of ``lcReport.firstPaintMs`` (milliseconds since navigation
   start when the first frame was drawn) and of the load event's time;
4. writes the peer: the ``timeline.html`` Jepsen's timeline checker
   (``jepsen.checker.timeline``) would write for the same history, one
   absolutely positioned ``<div>`` per op, in a column per process, a row per
   history event, capped like Jepsen's at 10,000 ops, and loads it the same way
   (its first paint is its load event: it has no script).

Results go to stdout as one Markdown table and to ``bench/out/bench_report.json``.

Usage: python -m bench.bench_report [--ops 10000,100000,1000000] [--repeat 3] [--loads 3] [--timeout 300]
"""

from __future__ import annotations

import argparse
import html
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from selenium.webdriver.support.ui import WebDriverWait

from bench.gen import Config
from bench.harness import OUT, Measured, cached_history, machine_note, run_measured, seconds, table
from tests.support.browser import headless_chromium

BUDGET_OPS = 1_000_000
BUDGET_REPORT_S = 10.0
BUDGET_FILE_MB = 60.0
BUDGET_PAINT_S = 3.0
#: jepsen.checker.timeline/op-limit: the ops a timeline.html shows at most
JEPSEN_OP_LIMIT = 10_000
MB = 2**20


# -- the report ------------------------------------------------------------------------------------


def run_folder(history: Path, timeout: float) -> Path:
    """A run folder for ``history`` (a link to it, and the checker's verdict as results.json), made once."""
    folder = OUT / f"report-{history.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "history.jsonl"
    if not link.exists():
        link.symlink_to(history)
    results = folder / "results.json"
    if not results.exists():
        m = run_measured([sys.executable, "-m", "leasecheck", "check", "--json", str(history)], timeout=timeout)
        if m.status != "done" or not m.output:
            raise SystemExit(f"leasecheck check {history}: {m.status}, exit {m.returncode}\n{m.stderr_tail}")
        results.write_text(json.dumps(m.output, indent=2) + "\n")
    return folder


def verdict(folder: Path) -> str:
    v = json.loads((folder / "results.json").read_text()).get("valid")
    return {True: "valid", False: "invalid"}.get(v, "unknown")


def write_report(folder: Path, out: Path, timeout: float) -> Measured:
    """``leasecheck report`` in a fresh interpreter, measured (wall time, peak RSS)."""
    out.unlink(missing_ok=True)
    m = run_measured([sys.executable, "-m", "leasecheck", "report", str(folder), "-o", str(out)], timeout=timeout)
    if m.status != "done" or not out.is_file():
        raise SystemExit(f"leasecheck report {folder}: {m.status}, exit {m.returncode}\n{m.stderr_tail}")
    return m


@dataclass
class Load:
    """One load of a page in a fresh headless Chromium (milliseconds since navigation start)."""

    load_event_ms: float
    first_paint_ms: float | None  # lcReport.firstPaintMs; None for a page without it (the peer)


#: the load event's end, from the Navigation Timing entry (ms since navigation start)
_LOAD_EVENT = "const n = performance.getEntriesByType('navigation')[0]; return n ? n.loadEventEnd : null;"


def load_page(page: Path, timeout: float, report: bool) -> Load:
    """Open ``page`` from disk in a fresh browser; for the report, wait for its first frame."""
    with headless_chromium() as driver:
        driver.set_page_load_timeout(timeout)
        driver.set_script_timeout(timeout)
        driver.get(page.as_uri())  # returns after the load event
        first = None
        if report:
            WebDriverWait(driver, timeout, poll_frequency=0.05).until(
                lambda d: d.execute_script("const r = window.lcReport; return !!r && (r.ready === true || r.errors.length > 0);")
            )
            errors = driver.execute_script("return window.lcReport.errors;")
            if errors:
                raise SystemExit(f"{page}: the page caught errors: {errors}")
            first = float(driver.execute_script("return window.lcReport.firstPaintMs;"))
        WebDriverWait(driver, timeout).until(lambda d: (d.execute_script(_LOAD_EVENT) or 0) > 0)
        return Load(float(driver.execute_script(_LOAD_EVENT)), first)


# -- the peer: Jepsen's timeline.html ----------------------------------------------------------------

#: jepsen.checker.timeline's geometry, in pixels: a column per process, a row per history event
_COL_WIDTH, _GUTTER, _ROW = 100, 106, 16
_STYLE = (
    ".ops { position: absolute; }\n"
    ".op { position: absolute; padding: 2px; border-radius: 2px; overflow: hidden;"
    " box-shadow: 0 1px 3px rgba(0,0,0,0.12), 0 1px 2px rgba(0,0,0,0.24); transition: all 0.3s cubic-bezier(.25,.8,.25,1); }\n"
    ".op.invoke { background: #eeeeee; }\n.op.ok { background: #6DB6FE; }\n"
    ".op.info { background: #FFAA26; }\n.op.fail { background: #FEB5DA; }\n"
    ".op:target { box-shadow: 0 14px 28px rgba(0,0,0,0.25), 0 10px 10px rgba(0,0,0,0.22); }\n"
)


class _Ev(msgspec.Struct):
    index: int
    time: int
    process: int | str
    type: str
    f: str
    node: Any = None
    value: Any = None


def _edn(x: Any) -> str:
    """A value as Jepsen prints one (Clojure's pr-str, near enough: keys as keywords)."""
    if isinstance(x, dict):
        return "{" + ", ".join(f":{k} {_edn(v)}" for k, v in x.items()) + "}"
    if isinstance(x, list):
        return "[" + " ".join(_edn(v) for v in x) + "]"
    if x is None:
        return "nil"
    if isinstance(x, bool):
        return "true" if x else "false"
    return json.dumps(x) if isinstance(x, str) else str(x)


def _op_text(op: _Ev) -> str:
    extra = f"\n :node {_edn(op.node)}" if op.node is not None else ""
    return f"Op:\n{{:process {op.process}\n :type :{op.type}\n :f :{op.f}\n :index {op.index}{extra}\n :value {_edn(op.value)}}}"


def _pair_div(start: _Ev, stop: _Ev | None, column: dict[int | str, int], n_events: int) -> str:
    """One op as Jepsen draws it: a link to itself around an absolutely positioned div whose top is
    the invoke's row, whose height runs to the completion's row (for an info: to the history's end).
    A row is an event's position in the history, which is its index (format v1)."""
    op = stop or start
    top = _ROW * start.index
    if stop is None:
        height = _ROW
    elif stop.type == "info":
        height = _ROW * (n_events + 1 - start.index)
    else:
        height = _ROW * (stop.index - start.index)
    style = f"width:{_COL_WIDTH};left:{_GUTTER * column[start.process]};top:{top};height:{height}"
    title = ""
    if stop is not None:
        title += f"Dur: {(stop.time - start.time) // 1_000_000} ms"
    title += f"\nErr: nil\nWall-clock Time: {op.time // 1_000_000} ms\n\n{_op_text(op)}"
    body = f"{start.process} {start.f} {html.escape(_edn(start.value)) if start.value is not None else ''}"
    if stop is not None and stop.value != start.value:
        body += f"<br />{html.escape(_edn(stop.value))}"
    return (
        f'<a href="#i{op.index}"><div class="op {op.type}" id="i{op.index}" style="{style}" '
        f'title="{html.escape(title)}">{body}</div></a>'
    )


def jepsen_timeline(history: Path, out: Path, limit: int = JEPSEN_OP_LIMIT) -> tuple[int, int]:
    """Write ``timeline.html`` for ``history`` as Jepsen's timeline checker lays one out; return
    (ops drawn, ops in the history). Nemesis events are paired like any process's (Jepsen's nemesis
    is a process too), an op that never completed is left out (Jepsen's ``pairs`` drops it)."""
    decode = msgspec.json.Decoder(_Ev).decode
    open_: dict[int | str, _Ev] = {}
    pairs: list[tuple[_Ev, _Ev | None]] = []
    processes: set[int | str] = set()
    total = n_events = 0
    with history.open("rb") as f:
        f.readline()  # the header
        for line in f:
            ev = decode(line)
            n_events += 1
            processes.add(ev.process)
            if ev.type == "invoke":
                open_[ev.process] = ev
                continue
            start = open_.pop(ev.process, None)
            total += 1
            if len(pairs) < limit:
                pairs.append((start, ev) if start is not None else (ev, None))
    column = {p: i for i, p in enumerate(sorted(processes, key=lambda p: (isinstance(p, str), str(p).zfill(12))))}
    with out.open("w") as w:
        w.write(f"<html><head><style>{_STYLE}</style></head><body><h1>{html.escape(history.name)}</h1>")
        if total > limit:
            w.write(f'<div class="truncation-warning">Showing only {limit} of {total} operations in this history.</div>')
        w.write('<div class="ops">')
        for start, stop in pairs:
            w.write(_pair_div(start, stop, column, n_events))
        w.write("</div></body></html>")
    return len(pairs), total


# -- one row -----------------------------------------------------------------------------------------


@dataclass
class Row:
    ops: int
    events: int
    history_mb: float
    verdict: str
    report_s: float  # median
    report_rss_mb: float  # the largest
    report_mb: float
    report_runs_s: list[float] = field(default_factory=list)
    first_paint_ms: list[float] = field(default_factory=list)
    report_load_ms: list[float] = field(default_factory=list)
    jepsen_ops: int = 0
    jepsen_mb: float = 0.0
    jepsen_load_ms: list[float] = field(default_factory=list)


def measure(cfg: Config, repeat: int, loads: int, timeout: float) -> Row:
    history, gen = cached_history(cfg)
    print(f"{cfg.ops:,} ops: {history.name} ({gen.events:,} events)", file=sys.stderr)
    folder = run_folder(history, timeout)
    report = folder / "report.html"
    runs = [write_report(folder, report, timeout) for _ in range(repeat)]
    report_loads = [load_page(report, timeout, report=True) for _ in range(loads)]
    peer = folder / "timeline.html"
    drawn, _ = jepsen_timeline(history, peer)
    peer_loads = [load_page(peer, timeout, report=False) for _ in range(loads)]
    return Row(
        ops=gen.ops,
        events=gen.events,
        history_mb=history.stat().st_size / MB,
        verdict=verdict(folder),
        report_s=statistics.median(m.wall for m in runs),
        report_rss_mb=max(m.maxrss_mb for m in runs),
        report_runs_s=[m.wall for m in runs],
        report_mb=report.stat().st_size / MB,
        first_paint_ms=[x.first_paint_ms for x in report_loads if x.first_paint_ms is not None],
        report_load_ms=[x.load_event_ms for x in report_loads],
        jepsen_ops=drawn,
        jepsen_mb=peer.stat().st_size / MB,
        jepsen_load_ms=[x.load_event_ms for x in peer_loads],
    )


def _s(ms: list[float]) -> str:
    return seconds(statistics.median(ms) / 1000) if ms else "-"


def budgets(r: Row) -> str:
    """The issue's three targets, checked on the 1,000,000-op row only (they are set for it)."""
    if r.ops != BUDGET_OPS:
        return ""
    paint = statistics.median(r.first_paint_ms) / 1000 if r.first_paint_ms else float("inf")
    checks = [
        (f"<= {BUDGET_REPORT_S:.0f} s", r.report_s <= BUDGET_REPORT_S),
        (f"<= {BUDGET_FILE_MB:.0f} MB", r.report_mb <= BUDGET_FILE_MB),
        (f"paint <= {BUDGET_PAINT_S:.0f} s", paint <= BUDGET_PAINT_S),
    ]
    return ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in checks)


def render(rows: list[Row], repeat: int, loads: int) -> str:
    headers = [
        "ops", "verdict", "history MB", "report s", "report RSS MB", "report.html MB",
        "first paint s", "load event s", "jepsen ops shown", "timeline.html MB", "jepsen load event s", "targets at 1M",
    ]  # fmt: skip
    body = [
        [
            f"{r.ops:,}", r.verdict, f"{r.history_mb:.0f}", seconds(r.report_s), f"{r.report_rss_mb:.0f}",
            f"{r.report_mb:.1f}", _s(r.first_paint_ms), _s(r.report_load_ms), f"{r.jepsen_ops:,}",
            f"{r.jepsen_mb:.1f}", _s(r.jepsen_load_ms), budgets(r),
        ]
        for r in rows
    ]
    note = (
        f"\nreport s / RSS: `leasecheck report` in a fresh interpreter, median of {repeat} runs / the largest peak RSS; "
        "first paint: lcReport.firstPaintMs, "
        f"load event: Navigation Timing loadEventEnd, both ms since navigation start, median of {loads} loads, "
        "a fresh headless Chromium each; jepsen: timeline.html as jepsen.checker.timeline writes it (op-limit "
        f"{JEPSEN_OP_LIMIT:,}), whose first paint is its load event."
    )
    return table(headers, body) + "\n" + note


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_report", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default="10000,100000,1000000", help="comma-separated history sizes")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--crash-rate", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3, help="report generations to take the median of")
    p.add_argument("--loads", type=int, default=3, help="browser loads to take the median of")
    p.add_argument("--timeout", type=float, default=300, help="give up on one step after this many seconds")
    a = p.parse_args(argv)

    sizes = [int(x.replace("_", "")) for x in a.ops.split(",") if x.strip()]
    print(f"machine: {machine_note()}")
    started = time.time()
    rows = [measure(Config(n, a.workers, a.nodes, a.crash_rate, a.seed), a.repeat, a.loads, a.timeout) for n in sizes]
    print()
    print(render(rows, a.repeat, a.loads))
    OUT.mkdir(parents=True, exist_ok=True)
    record = {"machine": machine_note(), "started": started, "args": vars(a), "rows": [asdict(r) for r in rows]}
    (OUT / "bench_report.json").write_text(json.dumps(record, indent=2) + "\n")
    bad = [r for r in rows if r.verdict != "valid"]
    for r in bad:
        print(f"\nBUG: a valid history of {r.ops:,} ops was not reported valid ({r.verdict})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
