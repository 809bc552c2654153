"""The run report: one self-contained ``report.html`` per run folder, to open from a CI artifact offline.

What a reviewer wants first is the verdict and, if the backend was caught, the
anomalies, each with the ops that prove it; then the timeline to see them in
context (every op of every worker, the faults behind them), the latency and
rate plots, and the settings with the command that replays the run.

The page is plain JavaScript and CSS from the folder `leasecheck/report/assets/`
(package data), inlined with the data: no framework, no CDN, no http(s) URL
anywhere, so it opens on an air-gapped machine. The ops go in as base64 typed
arrays (:mod:`leasecheck.report.page_columns`) and the timeline draws them on a
canvas, only those in view and one pixel per lane for the many that share one,
so a million ops stay smooth. Everything taken from the history or the
verdict (node names, explanations) reaches the page as escaped HTML or as JSON
with every ``<`` escaped, which no string can break out of.

:func:`write_report` is what ``leasecheck run`` calls after judging, and what
``leasecheck report RUN_DIR`` runs.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from leasecheck import __version__
from leasecheck.checker.attribution import attribution_of
from leasecheck.histories import Header
from leasecheck.report.columns import F_NAMES, OUTCOMES, REASONS, Columns, read_columns
from leasecheck.report.figures import ops_text, run_seconds, seconds_text, worker_processes
from leasecheck.report.inputs import KIND_MEANING, ReplayFlag, RunInputs, load, replay_command, settings, sorted_anomalies
from leasecheck.report.page_columns import encode, lanes
from leasecheck.report.refusals import refusals_text
from leasecheck.rundir.runfolder import RunFolder

#: the plots the page shows, in order: (file H2's write_plots makes, what it shows)
PLOTS = (("latency.png", "Latency of every op over time, by op kind, with quantile lines and the fault bands"),
         ("rate.png", "Throughput over time, by op kind and outcome, with the fault bands"))

_VERDICT_WORDS = {True: ("valid", "valid"), False: ("INVALID", "invalid"), "unknown": ("unknown", "unknown")}


def _asset(name: str) -> str:
    return resources.files("leasecheck.report").joinpath("assets", name).read_text(encoding="utf-8")


def _e(value: object) -> str:
    """HTML-escaped text (quotes too: it also goes into attributes)."""
    return html.escape(str(value), quote=True)


def script_json(obj: Any) -> str:
    """JSON to put inside a ``<script>`` element: every ``<`` escaped, so no ``</script>`` or ``<!--`` can occur."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _verdict_badge(results: dict[str, Any]) -> str:
    valid = results.get("valid")
    word, cls = _VERDICT_WORDS[valid if valid in (True, False) else "unknown"]
    return f'<div id="verdict" class="verdict v-{cls}">{word}</div>'


def _verdict_reason(results: dict[str, Any], source: str) -> str:
    valid = results.get("valid")
    parts = []
    reason = results.get("reason")
    if valid not in (True, False) and not reason:
        unknown = results.get("unknown_nodes") or []
        reason = "the linearizability search ran out of its budget" + (f" on {', '.join(map(str, unknown[:5]))}" if unknown else "")
    if reason:
        parts.append(f'<p class="reason"><b>reason</b> {_e(reason)}</p>')
    if source != RunFolder.RESULTS:
        parts.append(f'<p class="reason">no {RunFolder.RESULTS} in the run folder: this verdict is the checker\'s, made for this report</p>')
    return "".join(parts)


def _facts(cols: Columns, header: Header, results: dict[str, Any], lane_count: int) -> str:
    """The figures at the top, each worded as the terminal words it (:mod:`leasecheck.report.figures`)."""
    stats = results.get("stats") or {}
    run = results.get("run") if isinstance(results.get("run"), dict) else None
    nemesis = results.get("nemesis", header.meta.get("nemesis"))
    seed = results.get("seed", header.meta.get("seed"))
    span = (cols.end_time_ns - (cols.start_ns[0] if cols.n else 0)) / 1e9
    workers, seconds = worker_processes(results), run_seconds(results)
    refused = refusals_text((run or {}).get("refusals"))
    facts: list[tuple[str, str]] = [
        ("seed", "-" if seed is None else str(seed)),
        ("nemesis", ", ".join(map(str, nemesis)) if isinstance(nemesis, list) and nemesis else ("none" if isinstance(nemesis, list) else "-")),
        ("ttl", f"{header.ttl_ms:g} ms"),
        ("clock uncertainty", f"{header.clock_uncertainty_ms:g} ms"),
        ("ops", ops_text(stats if isinstance(stats.get("ops"), int) else {"ops": cols.n}, run)),
        ("outcomes", f"{stats['ok']:,} ok · {stats['fail']:,} fail · {stats['info']:,} info" if all(isinstance(stats.get(k), int) for k in ("ok", "fail", "info")) else "-"),
        *([("refusals", refused)] if refused is not None else []),
        ("nodes", f"{len(cols.nodes):,}"),
        *([("worker processes", f"{workers:,}")] if workers is not None else []),
        ("timeline lanes", f"{lane_count:,} for {len(set(cols.process)):,} process numbers"),
        *([("seconds", seconds_text(seconds))] if seconds is not None else []),
        ("history spans", seconds_text(span)),
        ("faults", f"{len(cols.faults):,}"),
    ]
    return "".join(f'<div class="fact"><span>{_e(k)}</span><b>{_e(v)}</b></div>' for k, v in facts)


def _coverage_line(results: dict[str, Any]) -> str:
    cov = results.get("coverage")
    if not isinstance(cov, dict) or not isinstance(cov.get("counts"), dict):
        return ""
    applicable = cov.get("applicable") or list(cov["counts"])
    missing = cov.get("missing") or []
    reached = len(applicable) - len(missing)
    never = f"; never reached: {', '.join(map(str, missing))}" if missing else ""
    return f'<p class="coverage"><b>coverage</b> {reached}/{len(applicable)} situations reached{_e(never)}</p>'


def _plots_html(images: dict[str, bytes], note: str | None) -> str:
    figs = []
    for name, alt in PLOTS:
        data = images.get(name)
        if data is None:
            continue
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        stem = name.removesuffix(".png")
        figs.append(f'<figure><img src="{uri}" alt="{_e(alt)}" data-plot="{stem}"><figcaption>{_e(alt)}'
                    f' ({_e(stem)}.png and {_e(stem)}.svg next to this report)</figcaption></figure>')
    if note:
        figs.append(f'<p class="muted">{_e(note)}</p>')
    return "".join(figs)


def _settings_html(rows: Iterable[tuple[str, str]]) -> str:
    return "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)


def _warnings_html(warnings: list[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{_e(w)}</li>" for w in warnings)
    return f'<ul class="warnings">{items}</ul>'


def page_meta(cols: Columns, inputs: RunInputs, lane_count: int) -> dict[str, Any]:
    """What the page's script needs besides the op columns: names, faults, anomalies."""
    results = inputs.results
    end_ms = cols.end_time_ns / 1e6
    try:
        from leasecheck.report.plot_data import KILL_KINDS
        from leasecheck.report.plot_parts import FAULT_COLOURS
    except ImportError:
        FAULT_COLOURS, KILL_KINDS = {}, ()
    return {
        "n": cols.n,
        "laneCount": lane_count,
        "endMs": end_ms,
        "fNames": list(F_NAMES),
        "reasons": list(REASONS),
        "outcomes": list(OUTCOMES),
        "nodes": cols.nodes,
        "faults": [{"kind": b.kind, "start": b.start_ns / 1e6, "end": _ms(b.end_ns), "victims": list(b.victims),
                    "members": b.members} for b in cols.faults],
        "faultColours": {k: v for k, v in FAULT_COLOURS.items() if any(b.kind == k for b in cols.faults)},
        "killKinds": [k for k in KILL_KINDS if any(b.kind == k for b in cols.faults)],  # drawn as instants over the ops too
        "anomalies": [{"kind": str(a.get("kind")), "node": str(a.get("node")), "ops": [int(i) for i in a.get("ops") or [] if isinstance(i, int)],
                       "explanation": str(a.get("explanation") or ""), "attribution": attribution_of(a) or ""}
                      for a in sorted_anomalies(results)],
        "anomalyTotals": (results.get("stats") or {}).get("anomalies") or {},
        "kindMeaning": KIND_MEANING,
        "valid": results.get("valid") if results.get("valid") in (True, False) else "unknown",
    }


def write_report(run_dir: Path, output: Path | None = None, *, replay_flags: Sequence[ReplayFlag],
                 warn: Callable[[str], None] | None = None) -> Path:
    """Write the report of a run folder (or of a history file) and its plots; returns the report's path.

    ``run_dir`` is a run folder, or a history file (``history.jsonl`` read with
    its folder's results.json and test.json, any other name alone). The report
    goes to ``output``, by default ``report.html`` in the run folder (for a
    history file of another name, ``<name>.html`` next to it); the plots go
    next to the report. Raises :class:`~leasecheck.histories.HistoryError` on a
    history that is not one. Problems that still leave a report (an unreadable
    results.json, plots that could not be drawn) go to ``warn`` and onto the page.
    ``replay_flags`` are ``leasecheck run``'s (:func:`leasecheck.run.flags.replay_flags`): what the
    replay command is made of when test.json's command line was not ``leasecheck run`` itself.
    """
    warnings: list[str] = []

    def note(message: str) -> None:
        warnings.append(message)
        if warn is not None:
            warn(message)

    run_dir = Path(run_dir)
    inputs = load(run_dir, note)
    cols = read_columns(inputs.history)
    for w in cols.warnings:
        note(w)
    if output is None:
        output = RunFolder(run_dir).report if run_dir.is_dir() else (
            RunFolder(inputs.history.parent).report if inputs.history.name == RunFolder.HISTORY
            else inputs.history.with_suffix(".html"))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    images, plot_note = _plots(cols, output.parent, note)
    lane, lane_count = lanes(cols)
    columns = encode(cols, lane, lane_count)
    header = cols.header
    replay, replay_from = replay_command(inputs.test, header, inputs.results, replay_flags)
    target = inputs.results.get("target", header.meta.get("target", inputs.history.name))
    fill = {
        "title": _e(f"leasecheck report: {target}"),
        "css": _asset("report.css"),
        "target": _e(target),
        "subtitle": _e(str(inputs.results.get("run_dir") or inputs.history.parent)),
        "verdict": _verdict_badge(inputs.results),
        "reason": _verdict_reason(inputs.results, inputs.results_source),
        "facts": _facts(cols, header, inputs.results, lane_count),
        "coverage": _coverage_line(inputs.results),
        "replay": _e(replay) if replay is not None else "",
        "replay_from": _e(f"from {replay_from}" if replay is not None else replay_from),
        "warnings": _warnings_html(warnings + list(inputs.results.get("warnings") or [])),
        "plots": _plots_html(images, plot_note),
        "settings": _settings_html(settings(inputs, header)),
        "footer": _e(f"leasecheck {__version__} · {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC · {inputs.history}"),
        "meta": script_json(page_meta(cols, inputs, lane_count)),
        "js": _asset("report.js"),
    }
    template = _asset("report.html")
    with output.open("wb") as out:
        head, _, tail = template.partition("{{columns}}")
        out.write(_fill(head, fill).encode("utf-8"))
        for c in columns:  # tens of megabytes: written as they are, never formatted into one string
            out.write(f'<script type="application/octet-stream" id="c-{c.name}" data-type="{c.dtype}">'.encode())
            out.write(c.b64)
            out.write(b"</script>\n")
        out.write(_fill(tail, fill).encode("utf-8"))
    return output


def _fill(text: str, values: dict[str, str]) -> str:
    """The template with each ``{{name}}`` replaced, in one pass (a value's own braces are never read as a name)."""
    out: list[str] = []
    rest = text
    while True:
        before, sep, after = rest.partition("{{")
        out.append(before)
        if not sep:
            return "".join(out)
        name, _, rest = after.partition("}}")
        out.append(values[name])


def _plots(cols: Columns, out_dir: Path, note: Callable[[str], None]) -> tuple[dict[str, bytes], str | None]:
    """Draw the plots next to the report; the PNGs' bytes, and what to say instead of a plot that is missing."""
    try:
        from leasecheck.report.plots import write_plots

        written = write_plots(cols, out_dir)
        return {name: written[name].read_bytes() for name, _ in PLOTS if name in written}, None
    except Exception as e:  # the report is worth having without its plots
        message = f"the plots could not be drawn: {type(e).__name__}: {e}"
        note(message)
        return {}, message


__all__ = ["page_meta", "script_json", "write_report"]
