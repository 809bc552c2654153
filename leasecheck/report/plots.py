"""A run's latency and throughput over time, with its faults as bands: Jepsen's latency-raw.png and rate.png.

The timeline in the run report shows what each worker did; these two plots show
what the backend did to all of them at once: whether latency climbs or
throughput drops to zero while a worker is paused or the store cut off, and
whether it recovers after the heal. They are drawn from :class:`Columns` (typed
arrays read with numpy, no per-op Python objects), so both plots of a 1,000,000-op
history are written (PNG and SVG) in about 1.5 s.

This module holds the two figures and the files they are written to. The numbers
they draw (time buckets, quantiles, the final phase) come from :mod:`.plot_data`,
pure numpy; what both are drawn with (colours, fault bands, kill lines, titles,
legend) from :mod:`.plot_parts`.

matplotlib is imported here and in :mod:`.plot_parts` only, and only the object API (a :class:`Figure`
saved by its own canvas): no pyplot, no GUI backend, no global figure registry.
Nothing imports these modules at CLI start-up; the report and ``leasecheck run``
import them when they write the plots.

Conventions, so that a test (or a reader) can find each part of a figure:

- x is seconds since the test started (the history's clock, :func:`~.plot_data.origin_ns`); latency is in
  milliseconds on a log scale; rate is ops per second, linear.
- Each fault is one ``axvspan`` band from its start to its heal, or to the
  history's last event if it never healed (hatched); its gid is
  ``fault-<i>-<kind>``, in :attr:`Columns.faults` order, and the same id names
  its group in the SVG.
- Each kill (``kill``, ``kill-store``, ``docker-kill``: :data:`~.plot_data.KILL_KINDS`) is an
  instant as well as a band (a worker kill's band lasts only until its
  replacement starts, a few ms): a dark vertical line at the kill, gid
  ``kill-<i>-<kind>`` (``i`` as its band's), and a ▼ marker above the axes,
  one artist per kind, gid ``kill-markers-<kind>``.
- The final phase (:func:`~.plot_data.final_phase`: the workers stopped, then every node
  read once) is one ``axvspan`` with gid ``final-phase``, from the last
  worker op's completion to the history's last event, labelled. Its reads are
  left out of the run's scale: the rate plot's y axis is scaled to the run's
  ops (a final read of every node runs 10 times the run's rate, and would
  squash it into the bottom tenth), a point above it is marked at the top
  edge (gid ``offscale-<op>-<outcome>``) with its peak; the latency plot's
  quantiles are the run's ops' (its final reads are drawn as points).
- Quantile lines have gid ``quantile-<op>-<p50|p95|p99|max>``, rate lines
  ``rate-<op>-<outcome>``. A quantile line is a step across each bucket: its
  x data are the bucket edges and its y data each bucket's value, the last one
  repeated (NaN where the bucket holds no completed op of its kind). A rate
  line has one point per bucket, at its centre.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib import patheffects
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.typing import LineStyleType

from leasecheck.report.columns import F_NAMES, FAIL, INFO, OK, OUTCOMES, Columns
from leasecheck.report.plot_data import MAX_POINTS, OPS_PER_QUANTILE_BUCKET, OPS_PER_RATE_BUCKET, Buckets, Frame, bucket_quantiles
from leasecheck.report.plot_parts import (
    DPI,
    KIND_COLOURS,
    draw_bands,
    draw_legend,
    fault_handles,
    final_handles,
    legend_header,
    mark_off_scale,
    new_figure,
    say_empty,
    seconds_label,
    set_titles,
)

#: the quantiles drawn per op kind and time bucket, with their line styles
QUANTILES: tuple[tuple[str, float, LineStyleType], ...] = (("p50", 0.50, "-"), ("p95", 0.95, "--"), ("p99", 0.99, "-."), ("max", 1.0, ":"))
#: how ok and failed ops are marked among the latency points
_OUTCOME_MARKERS = {OK: ".", FAIL: "x"}
_RATE_STYLES: dict[int, LineStyleType] = {OK: "-", FAIL: "--", INFO: ":"}

#: latencies below this (ms) are drawn at it: a log scale has no zero
_FLOOR_MS = 1e-3
#: the rate plot's y axis reaches this much above the run's highest rate
_HEADROOM = 1.12

PLOT_FILES = ("latency.png", "latency.svg", "rate.png", "rate.svg")


def latency_figure(cols: Columns, max_points: int = MAX_POINTS) -> Figure:
    """Latency of every completed op against its invoke time, per op kind, with p50/p95/p99/max lines and fault bands.

    Info ops (no completion, so no latency) are marked at the top edge at their
    invoke time. Quantiles are computed from every completed op (ok and fail) of
    a kind; if there are more than ``max_points`` completed ops, the points drawn
    are every k-th one (a fixed stride, so the same run gives the same picture)
    and the subtitle says so.
    """
    fr = Frame(cols)
    fig, ax = new_figure()
    ax.set_yscale("log")
    ax.set_xlabel("time since the test started (s)")
    ax.set_ylabel("latency (ms, log scale)")
    done = np.flatnonzero(fr.done)
    grid = Buckets.over(fr.span_s, len(done), OPS_PER_QUANTILE_BUCKET)
    x = fr.seconds(fr.start[done])
    lat = np.maximum((fr.end[done] - fr.start[done]) / 1e6, _FLOOR_MS)
    f = fr.f[done]
    outcome = fr.outcome[done]
    run = fr.in_run[done]
    stride = max(1, math.ceil(len(done) / max_points)) if max_points > 0 else 1
    small = len(done) <= 20_000
    alpha, size = (0.7, 4.0) if small else (0.25, 2.0)
    series = []
    for code in range(len(F_NAMES)):
        for oc in _OUTCOME_MARKERS:
            pick = np.flatnonzero((f == code) & (outcome == oc))[::stride]
            if len(pick):
                series.append((pick, code, oc))
    for pick, code, oc in sorted(series, key=lambda s: -len(s[0])):  # the biggest cloud first, so rare kinds stay visible
        name = F_NAMES[code]
        ax.plot(x[pick], lat[pick], linestyle="none", marker=_OUTCOME_MARKERS[oc], markersize=size, markeredgewidth=0.6 if oc == FAIL else 0,
                color=KIND_COLOURS[name], alpha=alpha, rasterized=True, gid=f"points-{name}-{OUTCOMES[oc]}", zorder=2)
    info = np.flatnonzero(fr.outcome == INFO)
    for code, name in enumerate(F_NAMES):
        pick = info[fr.f[info] == code]
        if len(pick):
            ax.plot(fr.seconds(fr.start[pick]), np.full(len(pick), 0.985), transform=ax.get_xaxis_transform(), linestyle="none",
                    marker="v", markersize=4, color=KIND_COLOURS[name], alpha=0.8, rasterized=True, gid=f"points-{name}-info",
                    clip_on=False, zorder=3)
    kinds_drawn = sorted({int(c) for c in np.unique(f)})
    if len(done):
        qs = tuple(q for _, q, _ in QUANTILES)
        shade = [patheffects.Stroke(linewidth=2.2, foreground="white", alpha=0.6), patheffects.Normal()]
        for code in sorted({int(c) for c in np.unique(f[run])}):  # the final phase's reads are not the run's latency
            name = F_NAMES[code]
            mine = (f == code) & run
            table = bucket_quantiles(x[mine], lat[mine], grid.width, grid.count, qs)
            for (label, _, style), row in zip(QUANTILES, table):
                ax.plot(grid.edges, np.append(row, row[-1]), linestyle=style, linewidth=1.2, color=KIND_COLOURS[name], drawstyle="steps-post",
                        gid=f"quantile-{name}-{label}", path_effects=shade, zorder=4)
    else:
        ax.set_ylim(0.1, 1000)
        say_empty(ax, "no ops" if cols.n == 0 else "no completed ops")
    ax.set_xlim(0, fr.xmax)
    draw_bands(ax, fr)
    if fr.final is None:
        notes = [f"{cols.n:,} ops", f"quantiles per {seconds_label(grid.width)} bucket, from all {len(done):,} completed ops"]
    else:
        notes = [f"{cols.n:,} ops", f"quantiles per {seconds_label(grid.width)} bucket, from the run's {int(run.sum()):,} completed ops",
                 f"final phase's {fr.final.count:,} reads: points only"]
    if stride > 1:
        notes.append(f"points: every {stride}th of {len(done):,} drawn")
    if len(info):
        notes.append(f"{len(info):,} info op{'' if len(info) == 1 else 's'} (no completion) marked ▼ at the top")
    set_titles(fig, ax, fr, "latency", notes)
    kinds = sorted(set(kinds_drawn) | {int(c) for c in np.unique(fr.f[info])})
    handles: list[tuple[Artist, str]] = [(legend_header(), "op kind")]
    handles += [(Patch(color=KIND_COLOURS[F_NAMES[c]]), F_NAMES[c]) for c in kinds]
    handles += [(legend_header(), "outcome")]
    handles += [(Line2D([], [], linestyle="none", marker=".", markersize=8, color="black"), "ok"),
                (Line2D([], [], linestyle="none", marker="x", markersize=6, color="black"), "fail"),
                (Line2D([], [], linestyle="none", marker="v", markersize=6, color="black"), "info (no completion; top edge)")]
    handles += [(legend_header(), f"per {seconds_label(grid.width)}")]
    handles += [(Line2D([], [], linestyle=style, color="black"), label) for label, _, style in QUANTILES]
    draw_legend(ax, handles + fault_handles(fr) + final_handles(fr))
    return fig


def rate_figure(cols: Columns) -> Figure:
    """Throughput per op kind and outcome in each time bucket, with fault bands.

    An ok or failed op counts in the bucket of its completion (ops completed per
    second, as Jepsen's rate.png); an info op, which never completed, in the
    bucket of its invoke. Each line's points times the bucket width sum to the
    number of ops of its kind and outcome.
    """
    fr = Frame(cols)
    grid = Buckets.over(fr.span_s, cols.n, OPS_PER_RATE_BUCKET)
    fig, ax = new_figure()
    ax.set_xlabel("time since the test started (s)")
    ax.set_ylabel(f"throughput (ops/s, per {seconds_label(grid.width)} bucket)")
    when = np.where(fr.done, fr.end, fr.start)
    b = grid.of(fr.seconds(when))
    combo = fr.f.astype(np.int64) * len(OUTCOMES) + fr.outcome
    counts = np.bincount(combo * grid.count + b, minlength=len(F_NAMES) * len(OUTCOMES) * grid.count)
    counts = counts.reshape(len(F_NAMES), len(OUTCOMES), grid.count)
    kinds, outcomes = set(), set()
    for code, name in enumerate(F_NAMES):
        for oc in (OK, FAIL, INFO):
            row = counts[code, oc]
            if row.sum():
                kinds.add(code)
                outcomes.add(oc)
                ax.plot(grid.centres, row / grid.width, linestyle=_RATE_STYLES[oc], linewidth=1.4, color=KIND_COLOURS[name],
                        gid=f"rate-{name}-{OUTCOMES[oc]}", zorder=3)
    notes = [f"{cols.n:,} ops", "ok/fail counted at completion, info at invoke"]
    if cols.n == 0:
        ax.set_ylim(0, 1)
        say_empty(ax, "no ops")
    else:
        ax.set_ylim(bottom=0)
    if fr.final is not None:  # scaled to the run's ops: the final reads, back to back, would squash the run to the bottom
        run = np.bincount((combo * grid.count + b)[fr.in_run], minlength=counts.size)
        top = run.max() / grid.width * _HEADROOM
        if counts.max() / grid.width > top:
            ax.set_ylim(0, top)
            mark_off_scale(ax, grid, counts / grid.width, top)
            peak = counts[:, :, grid.of(fr.seconds(when[~fr.in_run]))].max() / grid.width
            notes.append(f"y scaled to the run's ops: the final phase's reads, up to {peak:,.0f} ops/s, are off it (\u25b2)")
    ax.set_xlim(0, fr.xmax)
    draw_bands(ax, fr)
    set_titles(fig, ax, fr, "throughput", notes)
    handles: list[tuple[Artist, str]] = [(legend_header(), "op kind")]
    handles += [(Patch(color=KIND_COLOURS[F_NAMES[c]]), F_NAMES[c]) for c in sorted(kinds)]
    handles += [(legend_header(), "outcome")]
    handles += [(Line2D([], [], linestyle=_RATE_STYLES[oc], color="black"), OUTCOMES[oc]) for oc in sorted(outcomes)]
    draw_legend(ax, handles + fault_handles(fr) + final_handles(fr))
    return fig


def write_plots(cols: Columns, out_dir: Path) -> dict[str, Path]:
    """Write latency.png, latency.svg, rate.png and rate.svg into ``out_dir``; returns their paths by file name.

    The point clouds are rasterized inside the SVGs (a million vector markers
    would make a file no browser opens); the lines, bands and text stay vector.
    Files carry no date and a fixed SVG id salt, so the same history gives the
    same bytes.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for stem, fig in (("latency", latency_figure(cols)), ("rate", rate_figure(cols))):
        png, svg = out_dir / f"{stem}.png", out_dir / f"{stem}.svg"
        fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
        with matplotlib.rc_context({"svg.hashsalt": "leasecheck"}):
            fig.savefig(svg, format="svg", dpi=DPI, metadata={"Date": None, "Creator": None})
        written[png.name], written[svg.name] = png, svg
    return written


__all__ = ["PLOT_FILES", "QUANTILES", "latency_figure", "rate_figure", "write_plots"]
