"""A run's latency and throughput over time, with its faults as bands: Jepsen's latency-raw.png and rate.png.

The timeline in the run report shows what each worker did; these two plots show
what the backend did to all of them at once: whether latency climbs or
throughput drops to zero while a worker is paused or the store cut off, and
whether it recovers after the heal. They are drawn from :class:`Columns` (typed
arrays read with numpy, no per-op Python objects), so both plots of a 1,000,000-op
history are written (PNG and SVG) in about 1.5 s.

matplotlib is imported here only, and only the object API (a :class:`Figure`
saved by its own canvas): no pyplot, no GUI backend, no global figure registry.
Nothing imports this module at CLI start-up; the report and ``leasecheck run``
import it when they write the plots.

Conventions, so that a test (or a reader) can find each part of a figure:

- x is seconds since the test started (the history's clock, :func:`origin_ns`); latency is in
  milliseconds on a log scale; rate is ops per second, linear.
- Each fault is one ``axvspan`` band from its start to its heal, or to the
  history's last event if it never healed (hatched); its gid is
  ``fault-<i>-<kind>``, in :attr:`Columns.faults` order, and the same id names
  its group in the SVG.
- Each kill (``kill``, ``kill-store``, ``docker-kill``: :data:`KILL_KINDS`) is an
  instant as well as a band (a worker kill's band lasts only until its
  replacement starts, a few ms): a dark vertical line at the kill, gid
  ``kill-<i>-<kind>`` (``i`` as its band's), and a ▼ marker above the axes,
  one artist per kind, gid ``kill-markers-<kind>``.
- The final phase (:func:`final_phase`: the workers stopped, then every node
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib import patheffects
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.typing import LineStyleType

from leasecheck.nemesis.catalogue import CATALOGUE
from leasecheck.report.columns import F_NAMES, FAIL, INFO, OK, OUTCOMES, Columns

#: one colour per op kind, the same in both plots (tab10 without its red and grey, kept for faults)
KIND_COLOURS: dict[str, str] = {
    "claim": "#1f77b4",
    "renew": "#2ca02c",
    "effect": "#9467bd",
    "commit": "#ff7f0e",
    "release": "#8c564b",
    "read": "#17becf",
}
#: one colour per fault kind, in catalogue order; bands are drawn translucent
_FAULT_PALETTE = (
    "#d62728", "#7f7f7f", "#e377c2", "#bcbd22", "#ff9896", "#c49c94", "#f7b6d2",
    "#dbdb8d", "#aec7e8", "#98df8a", "#c5b0d5", "#ffbb78", "#9edae5",
)
FAULT_COLOURS: dict[str, str] = {k.name: _FAULT_PALETTE[i % len(_FAULT_PALETTE)] for i, k in enumerate(CATALOGUE)}
_OTHER_FAULT = "#636363"

#: the quantiles drawn per op kind and time bucket, with their line styles
QUANTILES: tuple[tuple[str, float, LineStyleType], ...] = (("p50", 0.50, "-"), ("p95", 0.95, "--"), ("p99", 0.99, "-."), ("max", 1.0, ":"))
#: how ok and failed ops are marked among the latency points
_OUTCOME_MARKERS = {OK: ".", FAIL: "x"}
_RATE_STYLES: dict[int, LineStyleType] = {OK: "-", FAIL: "--", INFO: ":"}

#: above this many completed ops the latency plot draws every k-th point (and says so); quantiles always use all
MAX_POINTS = 2_000_000
#: time buckets across the run: 4 to 60 (Jepsen's fixed 10 s would be one bucket for a 6 s run, and the
#: plot is about 800 pixels wide)
MIN_BUCKETS, MAX_BUCKETS = 4, 60
#: a quantile bucket should hold about this many completed ops (all kinds together), a rate bucket this many ops
OPS_PER_QUANTILE_BUCKET = 50
OPS_PER_RATE_BUCKET = 10
#: latencies below this (ms) are drawn at it: a log scale has no zero
_FLOOR_MS = 1e-3
#: the faults that happen at an instant, a SIGKILL (kill, kill-store, docker-kill: the catalogue's rows that start with a
#: ``kill`` event): drawn as a line at that instant as well as a band
KILL_KINDS: tuple[str, ...] = tuple(k.name for k in CATALOGUE if k.events[0] == "kill")
#: kill instants are labelled with their victims up to this many per plot (more would be a wall of text)
MAX_KILL_LABELS = 30
#: the final phase's band: blue, which no fault has
FINAL_COLOUR = "#3182bd"
#: the rate plot's y axis reaches this much above the run's highest rate
_HEADROOM = 1.12

FIGSIZE = (12.0, 6.0)
DPI = 100
PLOT_FILES = ("latency.png", "latency.svg", "rate.png", "rate.svg")


def origin_ns(cols: Columns) -> int:
    """Time 0 of the plots: the test's start, as in the history's ``time`` field, the explanations and the report."""
    return 0


def bucket_quantiles(t_s: np.ndarray, values: np.ndarray, width: float, buckets: int, qs: tuple[float, ...]) -> np.ndarray:
    """``qs`` quantiles of ``values`` in each time bucket of ``t_s``, shape (len(qs), buckets), NaN for an empty bucket.

    One sort for all buckets instead of one ``np.quantile`` call per bucket (a
    million-op run has a thousand bucket-kind pairs); the interpolation is
    numpy's default ("linear": position q·(n-1) between the two nearest values).
    """
    out = np.full((len(qs), buckets), np.nan)
    if len(values) == 0:
        return out
    b = _bucket_of(t_s, width, buckets)
    order = np.lexsort((values, b))
    ordered = values[order]
    counts = np.bincount(b, minlength=buckets)
    starts = np.cumsum(counts) - counts
    full = counts > 0
    n, first = counts[full], starts[full]
    for row, q in enumerate(qs):
        pos = q * (n - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        frac = pos - lo
        a, z = ordered[first + lo], ordered[first + hi]
        out[row, full] = a + (z - a) * frac
    return out


def _bucket_of(t_s: np.ndarray, width: float, buckets: int) -> np.ndarray:
    return np.clip((t_s / width).astype(np.int64), 0, buckets - 1)


@dataclass(frozen=True)
class Buckets:
    """Equal time buckets tiling the history from its start to its last event: ``count`` of ``width`` seconds.

    The buckets end exactly at the last event, so none is partly empty time
    (a round width would leave a last bucket whose rate reads low for no reason).
    """

    width: float
    count: int

    @classmethod
    def over(cls, span_s: float, ops: int, ops_per_bucket: int) -> Buckets:
        """About ``ops_per_bucket`` ops a bucket: a small run gets a few wide buckets (a quantile of three points says nothing)."""
        count = min(MAX_BUCKETS, max(MIN_BUCKETS, ops // ops_per_bucket))
        return cls((span_s if span_s > 0 else 1.0) / count, count)

    @property
    def edges(self) -> np.ndarray:
        return np.arange(self.count + 1) * self.width

    @property
    def centres(self) -> np.ndarray:
        return (np.arange(self.count) + 0.5) * self.width

    def of(self, t_s: np.ndarray) -> np.ndarray:
        """The bucket of each time (s); times past the last bucket go in it."""
        return _bucket_of(t_s, self.width, self.count)


@dataclass(frozen=True)
class FinalPhase:
    """A history's final phase: the workers have stopped, then every node is read once (:mod:`leasecheck.run.final_reads`).

    The history does not mark it (its reads are ops like any other), so it is
    recognised by what the runner does: its ops are the history's last ones,
    all reads, by processes that never ran an op before it, and the first of
    them starts after every earlier op has completed. Its reads run back to
    back, one client and no contention (hundreds a second on SQLite, where the
    run makes tens), so the plots shade it and keep it off the run's scale.
    """

    #: when the last op before it completed (the last worker had stopped): where its band starts
    start_ns: int
    #: its first read's invoke
    first_read_ns: int
    #: the position in :class:`Columns` of its first read; every op from there on is one of its reads
    first: int
    #: how many ops it holds
    count: int


def final_phase(cols: Columns) -> FinalPhase | None:
    """The final phase of ``cols`` (see :class:`FinalPhase`), or None: a run interrupted before it, a hand-made history."""
    n = cols.n
    f = _np(cols.f, np.int8)
    others = np.flatnonzero(f != F_NAMES.index("read"))
    k0 = max(int(others[-1]) + 1 if len(others) else 0, 1)  # the trailing reads; at least one op of the run before them
    if k0 >= n:
        return None
    start = _np(cols.start_ns, np.int64)
    end = _np(cols.end_ns, np.int64)
    finished = np.maximum.accumulate(np.where(end >= 0, end, cols.end_time_ns))  # an op never completed may run on to the end
    process = np.frombuffer(cols.process, dtype=np.dtype(f"i{cols.process.itemsize}"))
    _, first_op, of = np.unique(process, return_index=True, return_inverse=True)
    first_of = first_op[of]  # each op's process's first op
    newest = np.minimum.accumulate(first_of[::-1])[::-1]  # newest[k] >= k: no op from k on is by a process that ran before k
    ks = np.arange(k0, n)
    found = np.flatnonzero((finished[ks - 1] <= start[ks]) & (newest[ks] >= ks))
    if not len(found):
        return None
    k = int(ks[found[0]])
    return FinalPhase(int(finished[k - 1]), int(start[k]), k, n - k)


class _Frame:
    """What both plots start from: the origin and span, each op's columns as numpy views, the final phase."""

    def __init__(self, cols: Columns) -> None:
        self.cols = cols
        self.origin = origin_ns(cols)
        self.span_s = max(cols.end_time_ns - self.origin, 0) / 1e9
        self.start = _np(cols.start_ns, np.int64)
        self.end = _np(cols.end_ns, np.int64)
        self.f = _np(cols.f, np.int8)
        self.outcome = _np(cols.outcome, np.int8)
        self.done = self.end >= 0
        self.final = final_phase(cols)
        #: each op: is it one of the run's (not of its final phase)?
        self.in_run = np.arange(cols.n) < (self.final.first if self.final is not None else cols.n)

    def seconds(self, ns: np.ndarray) -> np.ndarray:
        return (ns - self.origin) / 1e9

    @property
    def xmax(self) -> float:
        """The x axis's right end, the same in both plots: the history's last event (1 s for an empty history)."""
        return self.span_s if self.span_s > 0 else 1.0


def _np(column: object, dtype: type) -> np.ndarray:
    """A zero-copy numpy view of an :mod:`array` column (an empty one has no buffer to view)."""
    if len(column) == 0:  # type: ignore[arg-type]
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(column, dtype=dtype)  # type: ignore[call-overload]


def latency_figure(cols: Columns, max_points: int = MAX_POINTS) -> Figure:
    """Latency of every completed op against its invoke time, per op kind, with p50/p95/p99/max lines and fault bands.

    Info ops (no completion, so no latency) are marked at the top edge at their
    invoke time. Quantiles are computed from every completed op (ok and fail) of
    a kind; if there are more than ``max_points`` completed ops, the points drawn
    are every k-th one (a fixed stride, so the same run gives the same picture)
    and the subtitle says so.
    """
    fr = _Frame(cols)
    fig, ax = _figure()
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
        _say(ax, "no ops" if cols.n == 0 else "no completed ops")
    ax.set_xlim(0, fr.xmax)
    _bands(ax, fr)
    if fr.final is None:
        notes = [f"{cols.n:,} ops", f"quantiles per {_seconds(grid.width)} bucket, from all {len(done):,} completed ops"]
    else:
        notes = [f"{cols.n:,} ops", f"quantiles per {_seconds(grid.width)} bucket, from the run's {int(run.sum()):,} completed ops",
                 f"final phase's {fr.final.count:,} reads: points only"]
    if stride > 1:
        notes.append(f"points: every {stride}th of {len(done):,} drawn")
    if len(info):
        notes.append(f"{len(info):,} info op{'' if len(info) == 1 else 's'} (no completion) marked ▼ at the top")
    _titles(fig, ax, fr, "latency", notes)
    kinds = sorted(set(kinds_drawn) | {int(c) for c in np.unique(fr.f[info])})
    handles: list[tuple[Artist, str]] = [(_header(), "op kind")]
    handles += [(Patch(color=KIND_COLOURS[F_NAMES[c]]), F_NAMES[c]) for c in kinds]
    handles += [(_header(), "outcome")]
    handles += [(Line2D([], [], linestyle="none", marker=".", markersize=8, color="black"), "ok"),
                (Line2D([], [], linestyle="none", marker="x", markersize=6, color="black"), "fail"),
                (Line2D([], [], linestyle="none", marker="v", markersize=6, color="black"), "info (no completion; top edge)")]
    handles += [(_header(), f"per {_seconds(grid.width)}")]
    handles += [(Line2D([], [], linestyle=style, color="black"), label) for label, _, style in QUANTILES]
    _legend(ax, handles + _band_handles(fr) + _final_handles(fr))
    return fig


def rate_figure(cols: Columns) -> Figure:
    """Throughput per op kind and outcome in each time bucket, with fault bands.

    An ok or failed op counts in the bucket of its completion (ops completed per
    second, as Jepsen's rate.png); an info op, which never completed, in the
    bucket of its invoke. Each line's points times the bucket width sum to the
    number of ops of its kind and outcome.
    """
    fr = _Frame(cols)
    grid = Buckets.over(fr.span_s, cols.n, OPS_PER_RATE_BUCKET)
    fig, ax = _figure()
    ax.set_xlabel("time since the test started (s)")
    ax.set_ylabel(f"throughput (ops/s, per {_seconds(grid.width)} bucket)")
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
        _say(ax, "no ops")
    else:
        ax.set_ylim(bottom=0)
    if fr.final is not None:  # scaled to the run's ops: the final reads, back to back, would squash the run to the bottom
        run = np.bincount((combo * grid.count + b)[fr.in_run], minlength=counts.size)
        top = run.max() / grid.width * _HEADROOM
        if counts.max() / grid.width > top:
            ax.set_ylim(0, top)
            _off_scale(ax, grid, counts / grid.width, top)
            peak = counts[:, :, grid.of(fr.seconds(when[~fr.in_run]))].max() / grid.width
            notes.append(f"y scaled to the run's ops: the final phase's reads, up to {peak:,.0f} ops/s, are off it (\u25b2)")
    ax.set_xlim(0, fr.xmax)
    _bands(ax, fr)
    _titles(fig, ax, fr, "throughput", notes)
    handles: list[tuple[Artist, str]] = [(_header(), "op kind")]
    handles += [(Patch(color=KIND_COLOURS[F_NAMES[c]]), F_NAMES[c]) for c in sorted(kinds)]
    handles += [(_header(), "outcome")]
    handles += [(Line2D([], [], linestyle=_RATE_STYLES[oc], color="black"), OUTCOMES[oc]) for oc in sorted(outcomes)]
    _legend(ax, handles + _band_handles(fr) + _final_handles(fr))
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


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    fig.subplots_adjust(left=0.07, right=0.78, top=0.86, bottom=0.10)
    ax = fig.add_subplot()
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    return fig, ax


def _titles(fig: Figure, ax: Axes, fr: _Frame, what: str, notes: list[str]) -> None:
    meta = fr.cols.header.meta
    target = meta.get("target", "unknown target")
    seed = meta.get("seed")
    nemesis = meta.get("nemesis")
    head = f"{what}: {target}" + (f", seed {seed}" if seed is not None else "")
    if isinstance(nemesis, list) and nemesis:
        head += f", nemesis {','.join(map(str, nemesis))}"
    fig.suptitle(head, fontsize=13, x=0.07, ha="left")
    kills = any(b.kind in KILL_KINDS for b in fr.cols.faults)  # their markers and labels sit above the axes
    ax.set_title(" · ".join(notes), fontsize=9, loc="left", color="#444444", pad=22 if kills else 6)


def _say(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=18, color="#888888", gid="no-ops")


def _bands(ax: Axes, fr: _Frame) -> None:
    """One translucent band per fault, from its start to its heal or (hatched) to the history's last event; a line per kill; the final phase."""
    for i, band in enumerate(fr.cols.faults):
        end = band.end_ns if band.end_ns is not None else fr.cols.end_time_ns
        colour = FAULT_COLOURS.get(band.kind, _OTHER_FAULT)
        ax.axvspan((band.start_ns - fr.origin) / 1e9, (end - fr.origin) / 1e9, facecolor=colour, alpha=0.18, linewidth=0,
                   edgecolor=colour, hatch="//" if band.end_ns is None else None, zorder=1, gid=f"fault-{i}-{band.kind}")
    _kills(ax, fr)
    _final_band(ax, fr)


def _kills(ax: Axes, fr: _Frame) -> None:
    """Each kill as what it is, an instant: a dark line across the plot, a ▼ above it, and (unless there are many) its victim.

    A worker kill's band is only as wide as its replacement's start-up, a few
    milliseconds: a fraction of a pixel that no one sees.
    """
    kills = [(i, band) for i, band in enumerate(fr.cols.faults) if band.kind in KILL_KINDS]
    at: dict[str, list[float]] = {}
    labelled: list[float] = []  # display x of each label drawn, so that none overlaps the one before
    for i, band in kills:
        x = (band.start_ns - fr.origin) / 1e9
        colour = _dark(band.kind)
        ax.axvline(x, color=colour, linewidth=1.3, alpha=0.85, zorder=5, gid=f"kill-{i}-{band.kind}")
        at.setdefault(band.kind, []).append(x)
        if len(kills) > MAX_KILL_LABELS:
            continue
        px = x / fr.xmax * ax.get_position().width * FIGSIZE[0] * DPI
        if labelled and px - labelled[-1] < 16:
            continue
        labelled.append(px)
        label = "p" + ",p".join(map(str, band.victims)) if band.victims else "store"
        ax.annotate(label, xy=(x, 1.0), xycoords=ax.get_xaxis_transform(), xytext=(0, 8), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7, color=colour, annotation_clip=False, gid=f"kill-label-{i}-{band.kind}")
    for kind, xs in at.items():
        ax.plot(xs, np.ones(len(xs)), transform=ax.get_xaxis_transform(), linestyle="none", marker="v", markersize=8,
                color=_dark(kind), clip_on=False, zorder=6, gid=f"kill-markers-{kind}")


def _final_band(ax: Axes, fr: _Frame) -> None:
    """The final phase: a blue band from the last worker op's completion to the end, a dashed line where it starts, a label."""
    phase = fr.final
    if phase is None:
        return
    x0 = (phase.start_ns - fr.origin) / 1e9
    ax.axvspan(x0, fr.xmax, facecolor=FINAL_COLOUR, alpha=0.13, linewidth=0, zorder=1, gid="final-phase")
    ax.axvline(x0, color=FINAL_COLOUR, linewidth=1.0, linestyle="--", zorder=1.5, gid="final-phase-start")
    wide = (fr.xmax - x0) / fr.xmax * ax.get_position().width * FIGSIZE[0] * DPI >= 16  # room for the label inside it
    ax.text(x0, 0.5, f"final phase: {phase.count:,} reads", rotation=90, transform=ax.get_xaxis_transform(),
            ha="left" if wide else "right", va="center", fontsize=8.5, color=FINAL_COLOUR, gid="final-phase-label",
            bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0, "pad": 1.5})


def _off_scale(ax: Axes, grid: Buckets, rates: np.ndarray, top: float) -> None:
    """Mark each rate above the y axis with a ▲ at the top edge, and each line's highest with its value."""
    for code, name in enumerate(F_NAMES):
        for oc in (OK, FAIL, INFO):
            row = rates[code, oc]
            over = np.flatnonzero(row > top)
            if not len(over):
                continue
            colour = KIND_COLOURS[name]
            ax.plot(grid.centres[over], np.full(len(over), top), linestyle="none", marker="^", markersize=8, color=colour,
                    clip_on=False, zorder=6, gid=f"offscale-{name}-{OUTCOMES[oc]}")
            peak = int(over[np.argmax(row[over])])
            ax.annotate(f"{name} {OUTCOMES[oc]}: {row[peak]:,.0f} ops/s", xy=(grid.centres[peak], top), xytext=(-8, -3),
                        textcoords="offset points", ha="right", va="top", fontsize=8, color=colour, gid=f"offscale-label-{name}-{OUTCOMES[oc]}",
                        bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0, "pad": 1.5})


def _dark(kind: str) -> tuple[float, float, float]:
    """A kill's colour for its line: its band's, darkened (the band colours are pale, a line in them would not show)."""
    r, g, b = to_rgb(FAULT_COLOURS.get(kind, _OTHER_FAULT))
    return (r * 0.55, g * 0.55, b * 0.55)


def _band_handles(fr: _Frame) -> list[tuple[Artist, str]]:
    seen: dict[tuple[str, bool], None] = {}
    for band in fr.cols.faults:
        seen[(band.kind, band.end_ns is None)] = None
    if not seen:
        return []
    out: list[tuple[Artist, str]] = [(_header(), "fault")]
    for kind, open_ in seen:
        colour = FAULT_COLOURS.get(kind, _OTHER_FAULT)
        patch = Patch(facecolor=colour, alpha=0.35, edgecolor=colour, hatch="//" if open_ else None, linewidth=0)
        handle: Any = patch
        if kind in KILL_KINDS:  # its band and the line at its instant, one over the other
            handle = (patch, Line2D([], [], color=_dark(kind), linewidth=1.3, marker="v", markersize=6))
        out.append((handle, f"{kind}, never healed" if open_ else kind))
    return out


def _final_handles(fr: _Frame) -> list[tuple[Artist, str]]:
    if fr.final is None:
        return []
    return [(_header(), "final phase"), (Patch(facecolor=FINAL_COLOUR, alpha=0.3, linewidth=0), "every node read once")]


def _header() -> Line2D:
    return Line2D([], [], linestyle="none")


def _legend(ax: Axes, entries: list[tuple[Artist, str]]) -> None:
    """One legend outside the axes on the right, its section headers (handle-less entries) in bold."""
    legend = ax.legend([h for h, _ in entries], [label for _, label in entries], loc="upper left", bbox_to_anchor=(1.01, 1.0),
                       frameon=False, fontsize=9, handlelength=2.4, borderaxespad=0.0)
    for (handle, _), text in zip(entries, legend.get_texts()):
        if isinstance(handle, Line2D) and handle.get_linestyle() in ("None", "none", "") and handle.get_marker() in ("None", "none", None, ""):
            text.set_fontweight("bold")


def _seconds(s: float) -> str:
    """A bucket width as people write it, three digits: 478 ms, 2.15 s, 28.6 s."""
    if s < 1:
        return f"{s * 1000:.3g} ms"
    return f"{s:.3g} s"


__all__ = ["FAULT_COLOURS", "FINAL_COLOUR", "KILL_KINDS", "KIND_COLOURS", "PLOT_FILES", "QUANTILES", "Buckets", "FinalPhase",
           "bucket_quantiles", "final_phase", "latency_figure", "origin_ns", "rate_figure", "write_plots"]
