"""What both plots are drawn with: the colours, the figure's shape, fault bands, kill lines, titles and legend.

The latency and rate figures (:mod:`.plots`) differ in what they plot and share
everything around it: one colour per op kind and per fault kind (the run
report's timeline uses the same fault colours), the figure's size, each fault's
band and each kill's line and marker, the final phase's band, the titles, the
off-scale marks and the legend outside the axes. matplotlib's object API only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from leasecheck.nemesis.catalogue import CATALOGUE
from leasecheck.report.columns import F_NAMES, FAIL, INFO, OK, OUTCOMES
from leasecheck.report.plot_data import KILL_KINDS, Buckets, Frame

#: one colour per op kind, the same in both plots (tab10 without its red and grey, kept for faults)
KIND_COLOURS: dict[str, str] = {
    "claim": "#1f77b4",
    "renew": "#2ca02c",
    "effect": "#9467bd",
    "commit": "#ff7f0e",
    "release": "#8c564b",
    "read": "#17becf",
    "read-resource": "#0e7c86",
}
#: one colour per fault kind, in catalogue order; bands are drawn translucent
_FAULT_PALETTE = (
    "#d62728", "#7f7f7f", "#e377c2", "#bcbd22", "#ff9896", "#c49c94", "#f7b6d2",
    "#dbdb8d", "#aec7e8", "#98df8a", "#c5b0d5", "#ffbb78", "#9edae5",
)
FAULT_COLOURS: dict[str, str] = {k.name: _FAULT_PALETTE[i % len(_FAULT_PALETTE)] for i, k in enumerate(CATALOGUE)}
_OTHER_FAULT = "#636363"

#: kill instants are labelled with their victims up to this many per plot (more would be a wall of text)
MAX_KILL_LABELS = 30
#: the final phase's band: blue, which no fault has
FINAL_COLOUR = "#3182bd"

FIGSIZE = (12.0, 6.0)
DPI = 100


def new_figure() -> tuple[Figure, Axes]:
    """A figure of :data:`FIGSIZE` with one axes, room on the right for the legend, a light grid under the data."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    fig.subplots_adjust(left=0.07, right=0.78, top=0.86, bottom=0.10)
    ax = fig.add_subplot()
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    return fig, ax


def set_titles(fig: Figure, ax: Axes, fr: Frame, what: str, notes: list[str]) -> None:
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


def say_empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=18, color="#888888", gid="no-ops")


def draw_bands(ax: Axes, fr: Frame) -> None:
    """One translucent band per fault, from its start to its heal or (hatched) to the history's last event; a line per kill; the final phase."""
    for i, band in enumerate(fr.cols.faults):
        end = band.end_ns if band.end_ns is not None else fr.cols.end_time_ns
        colour = FAULT_COLOURS.get(band.kind, _OTHER_FAULT)
        ax.axvspan((band.start_ns - fr.origin) / 1e9, (end - fr.origin) / 1e9, facecolor=colour, alpha=0.18, linewidth=0,
                   edgecolor=colour, hatch="//" if band.end_ns is None else None, zorder=1, gid=f"fault-{i}-{band.kind}")
    _kills(ax, fr)
    _final_band(ax, fr)


def _kills(ax: Axes, fr: Frame) -> None:
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
        label = band.members or ("p" + ",p".join(map(str, band.victims)) if band.victims else "store")
        ax.annotate(label, xy=(x, 1.0), xycoords=ax.get_xaxis_transform(), xytext=(0, 8), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7, color=colour, annotation_clip=False, gid=f"kill-label-{i}-{band.kind}")
    for kind, xs in at.items():
        ax.plot(xs, np.ones(len(xs)), transform=ax.get_xaxis_transform(), linestyle="none", marker="v", markersize=8,
                color=_dark(kind), clip_on=False, zorder=6, gid=f"kill-markers-{kind}")


def _final_band(ax: Axes, fr: Frame) -> None:
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


def mark_off_scale(ax: Axes, grid: Buckets, rates: np.ndarray, top: float) -> None:
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


def fault_handles(fr: Frame) -> list[tuple[Artist, str]]:
    seen: dict[tuple[str, bool], None] = {}
    for band in fr.cols.faults:
        seen[(band.kind, band.end_ns is None)] = None
    if not seen:
        return []
    out: list[tuple[Artist, str]] = [(legend_header(), "fault")]
    for kind, open_ in seen:
        colour = FAULT_COLOURS.get(kind, _OTHER_FAULT)
        patch = Patch(facecolor=colour, alpha=0.35, edgecolor=colour, hatch="//" if open_ else None, linewidth=0)
        handle: Any = patch
        if kind in KILL_KINDS:  # its band and the line at its instant, one over the other
            handle = (patch, Line2D([], [], color=_dark(kind), linewidth=1.3, marker="v", markersize=6))
        out.append((handle, f"{kind}, never healed" if open_ else kind))
    return out


def final_handles(fr: Frame) -> list[tuple[Artist, str]]:
    if fr.final is None:
        return []
    return [(legend_header(), "final phase"), (Patch(facecolor=FINAL_COLOUR, alpha=0.3, linewidth=0), "every node read once")]


def legend_header() -> Line2D:
    return Line2D([], [], linestyle="none")


def draw_legend(ax: Axes, entries: list[tuple[Artist, str]]) -> None:
    """One legend outside the axes on the right, its section headers (handle-less entries) in bold."""
    legend = ax.legend([h for h, _ in entries], [label for _, label in entries], loc="upper left", bbox_to_anchor=(1.01, 1.0),
                       frameon=False, fontsize=9, handlelength=2.4, borderaxespad=0.0)
    for (handle, _), text in zip(entries, legend.get_texts()):
        if isinstance(handle, Line2D) and handle.get_linestyle() in ("None", "none", "") and handle.get_marker() in ("None", "none", None, ""):
            text.set_fontweight("bold")


def seconds_label(s: float) -> str:
    """A bucket width as people write it, three digits: 478 ms, 2.15 s, 28.6 s."""
    if s < 1:
        return f"{s * 1000:.3g} ms"
    return f"{s:.3g} s"



__all__ = ["DPI", "FAULT_COLOURS", "FIGSIZE", "FINAL_COLOUR", "KIND_COLOURS", "MAX_KILL_LABELS", "draw_bands",
           "draw_legend", "fault_handles", "final_handles", "legend_header", "mark_off_scale", "new_figure", "say_empty",
           "seconds_label", "set_titles"]
