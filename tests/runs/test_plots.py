"""The latency and throughput plots hold what the history holds: its faults where they happened, its ops' numbers.

Each check reads the history again on its own (plain JSON, times in seconds of the
history's own clock, which starts with the test) and compares with what the figure draws: band extents with the nemesis
events, quantile lines with ``np.quantile`` per bucket, rate lines' integrals
with op counts; then the written files are decoded (PNG) and parsed (SVG).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.image import imread
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from leasecheck.report.columns import Columns, read_columns
from leasecheck.report.plot_data import final_phase
from leasecheck.report.plot_parts import DPI, FAULT_COLOURS, FIGSIZE
from leasecheck.report.plots import PLOT_FILES, QUANTILES, latency_figure, rate_figure, write_plots

SVG = "{http://www.w3.org/2000/svg}"
#: fault -> its start event and its heal event, for the faults these tests use
EVENTS = {"pause": ("pause", "resume"), "kill": ("kill", "start"), "kill-store": ("kill", "start")}


@dataclass(frozen=True)
class RawOp:
    f: str
    outcome: str  # ok / fail / info (never completed)
    start_s: float
    end_s: float | None
    process: int = -1


@dataclass(frozen=True)
class Raw:
    """A history read with nothing but ``json``: its ops (in invoke order), its fault windows (s since the test started), its span."""

    header: dict[str, Any]
    ops: list[RawOp]
    bands: list[tuple[str, float, float, bool]]  # kind, start, end, healed
    span_s: float

    @property
    def final(self) -> int | None:
        """Where the final phase's ops start in :attr:`ops`, as the runner makes it: after every op of the run has
        completed, fresh processes read; nothing but reads to the end. None: no such phase."""
        ops = self.ops
        k = len(ops)
        while k > 0 and ops[k - 1].f in ("read", "read-resource"):
            k -= 1
        for first in range(max(k, 1), len(ops)):
            before, after = ops[:first], ops[first:]
            if (all(op.end_s is not None and op.end_s <= ops[first].start_s for op in before)
                    and not {op.process for op in before} & {op.process for op in after}):
                return first
        return None

    @property
    def run_ops(self) -> list[RawOp]:
        """The ops before the final phase."""
        return self.ops if self.final is None else self.ops[:self.final]

    @property
    def final_start_s(self) -> float:
        """Where the final phase's band starts: the last completion before it (the workers had stopped)."""
        assert self.final is not None
        return max(op.end_s for op in self.ops[:self.final] if op.end_s is not None)


def read_raw(path: Path) -> Raw:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    header, events = lines[0], lines[1:]
    t0 = 0  # the history's clock starts with the test, as the explanations' times do
    last = events[-1]["time"] if events else 0
    ops: list[tuple[int, RawOp]] = []  # (invoke line, op)
    open_ops: dict[int, tuple[str, int, int]] = {}
    open_faults: list[tuple[str, int, tuple[int, ...]]] = []
    bands: list[tuple[str, float, float, bool]] = []

    def s(ns: int) -> float:
        return (ns - t0) / 1e9

    for ev in events:
        if ev["process"] == "nemesis":
            if "fault" not in ev["value"]:  # the history-end event (the writer finished): no fault, no band
                continue
            fault, victims = ev["value"]["fault"], tuple(ev["value"].get("victims", ()))
            if ev["f"] == EVENTS[fault][0]:
                open_faults.append((fault, ev["time"], victims))
            elif ev["f"] == EVENTS[fault][1]:
                match = next(w for w in open_faults if w[0] == fault and w[2] == victims)
                open_faults.remove(match)
                bands.append((fault, s(match[1]), s(ev["time"]), True))
        elif ev["type"] == "invoke":
            open_ops[ev["process"]] = (ev["f"], ev["time"], ev["index"])
        else:
            f, started, at = open_ops.pop(ev["process"])
            ops.append((at, RawOp(f, ev["type"], s(started), s(ev["time"]), ev["process"])))
    ops += [(at, RawOp(f, "info", s(started), None, p)) for p, (f, started, at) in open_ops.items()]
    bands += [(fault, s(start), s(last), False) for fault, start, _ in open_faults]
    return Raw(header, [op for _, op in sorted(ops, key=lambda o: o[0])], sorted(bands, key=lambda b: (b[1], b[0])), s(last))


def lines_by_gid(ax: Axes, prefix: str) -> dict[str, Line2D]:
    return {gid: line for line in ax.get_lines() if (gid := str(line.get_gid())).startswith(prefix)}


def xs(line: Line2D) -> np.ndarray:
    return np.asarray(line.get_xdata(), dtype=float)


def ys(line: Line2D) -> np.ndarray:
    return np.asarray(line.get_ydata(), dtype=float)


def band_patches(ax: Axes) -> list[Patch]:
    return [p for p in ax.patches if str(p.get_gid()).startswith("fault-")]


def x_extent(patch: Patch) -> tuple[float, float]:
    """The band's x range in data units (an axvspan's x is data, its y axes fraction)."""
    xs = patch.get_patch_transform().transform(patch.get_path().vertices)[:, 0]
    return float(xs.min()), float(xs.max())


def legend_labels(ax: Axes) -> list[str]:
    legend = ax.get_legend()
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


def assert_bands(fig: Figure, raw: Raw) -> None:
    """One band per fault, in start order, spanning exactly its start to its heal (or the last event)."""
    ax = fig.axes[0]
    patches = band_patches(ax)
    assert [str(p.get_gid()).split("-", 2)[2] for p in patches] == [b[0] for b in raw.bands]
    for patch, (kind, start, end, healed) in zip(patches, raw.bands):
        assert x_extent(patch) == pytest.approx((start, end), abs=1e-9), kind
        assert bool(patch.get_hatch()) is not healed  # never healed: hatched
    labels = legend_labels(ax)
    for kind, _, _, healed in raw.bands:
        assert (kind if healed else f"{kind}, never healed") in labels


def bucket_of(t: np.ndarray, width: float, count: int) -> np.ndarray:
    return np.clip((t / width).astype(np.int64), 0, count - 1)


def assert_quantiles(fig: Figure, raw: Raw) -> None:
    """Every quantile line steps over the buckets with ``np.quantile`` of that kind's completed ops in each bucket
    (the run's: the final phase's reads are not the run's latency)."""
    ax = fig.axes[0]
    lines = lines_by_gid(ax, "quantile-")
    kinds = sorted({op.f for op in raw.run_ops if op.end_s is not None})
    assert sorted(lines) == sorted(f"quantile-{k}-{label}" for k in kinds for label, _, _ in QUANTILES)
    for kind in kinds:
        done = [op for op in raw.run_ops if op.f == kind and op.end_s is not None]
        t = np.array([op.start_s for op in done])
        lat = np.array([(op.end_s - op.start_s) * 1e3 for op in done if op.end_s is not None])
        for label, q, _ in QUANTILES:
            line = lines[f"quantile-{kind}-{label}"]
            edges = xs(line)
            count = len(edges) - 1
            width = raw.span_s / count
            assert count == min(60, max(4, sum(op.end_s is not None for op in raw.ops) // 50))  # buckets of all completed ops
            assert edges == pytest.approx(np.arange(count + 1) * width)
            b = bucket_of(t, width, count)
            want = np.array([np.quantile(lat[b == i], q) if (b == i).any() else np.nan for i in range(count)])
            got = ys(line)
            np.testing.assert_allclose(got[:-1], want, rtol=1e-9, equal_nan=True, err_msg=f"{kind} {label}")
            assert line.get_drawstyle() == "steps-post"


def assert_rates(fig: Figure, raw: Raw) -> None:
    """One line per op kind and outcome that occurred; rate × bucket width sums to that op count, bucket by bucket too."""
    ax = fig.axes[0]
    lines = lines_by_gid(ax, "rate-")
    counts = Counter((op.f, op.outcome) for op in raw.ops)
    assert sorted(lines) == sorted(f"rate-{f}-{o}" for f, o in counts)
    for (f, outcome), n in counts.items():
        line = lines[f"rate-{f}-{outcome}"]
        x, y = xs(line), ys(line)
        width = raw.span_s / len(x)
        assert x == pytest.approx((np.arange(len(x)) + 0.5) * width)
        assert y.sum() * width == pytest.approx(n)
        when = np.array([op.end_s if op.end_s is not None else op.start_s for op in raw.ops if (op.f, op.outcome) == (f, outcome)])
        per_bucket = np.bincount(bucket_of(when, width, len(x)), minlength=len(x))
        np.testing.assert_allclose(y * width, per_bucket, rtol=1e-9, err_msg=f"{f} {outcome}")


def assert_axes(cols: Columns, latency: Figure, rate: Figure) -> None:
    meta = cols.header.meta
    for fig in (latency, rate):
        ax = fig.axes[0]
        assert ax.get_xlabel() == "time since the test started (s)"
        assert ax.get_xlim() == pytest.approx((0, read_raw(Path(cols.source)).span_s or 1.0))
        assert f"{meta['target']}, seed {meta['seed']}" in fig.get_suptitle()
        assert tuple(fig.get_size_inches()) == FIGSIZE
    assert latency.axes[0].get_yscale() == "log"
    assert latency.axes[0].get_ylabel() == "latency (ms, log scale)"
    assert rate.axes[0].get_yscale() == "linear"
    assert rate.axes[0].get_ylabel().startswith("throughput (ops/s")


# -- a real run, with a pause that starts and heals inside it


@pytest.fixture(scope="module")
def paused_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("plots") / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "leasecheck", "run", "--time-limit", "6", "--seed", "3", "--nemesis", "pause", "--store", str(store)],
        cwd=store.parent, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the reference backend: valid
    return store / "latest" / "history.jsonl"


def test_latency_plot_of_a_real_run_has_its_pause_bands_and_numpy_quantiles(paused_run: Path) -> None:
    cols, raw = read_columns(paused_run), read_raw(paused_run)
    assert any(kind == "pause" and healed and 0 < start < end < raw.span_s for kind, start, end, healed in raw.bands)
    assert raw.header["nemesis"] == ["pause"]
    fig = latency_figure(cols)
    assert_axes(cols, fig, rate_figure(cols))
    assert_bands(fig, raw)
    assert_quantiles(fig, raw)
    ax = fig.axes[0]
    points = lines_by_gid(ax, "points-")
    for line in points.values():
        assert line.get_rasterized()
    drawn = Counter({gid.removeprefix("points-"): len(xs(line)) for gid, line in points.items()})
    assert drawn == Counter(f"{op.f}-{op.outcome}" for op in raw.ops)  # every op drawn, info ones included
    for gid, line in points.items():
        if not gid.endswith("-info"):
            f, outcome = gid.removeprefix("points-").rsplit("-", 1)
            mine = [op for op in raw.ops if (op.f, op.outcome) == (f, outcome) and op.end_s is not None]
            np.testing.assert_allclose(sorted(xs(line)), sorted(op.start_s for op in mine), atol=1e-9)
            np.testing.assert_allclose(sorted(ys(line)), sorted(max((op.end_s - op.start_s) * 1e3, 1e-3) for op in mine if op.end_s),
                                       rtol=1e-9)
    assert "pause" in legend_labels(ax) and "p99" in legend_labels(ax)


def test_rate_plot_of_a_real_run_integrates_to_its_op_counts(paused_run: Path) -> None:
    cols, raw = read_columns(paused_run), read_raw(paused_run)
    fig = rate_figure(cols)
    assert_bands(fig, raw)
    assert_rates(fig, raw)
    total = sum(ys(line).sum() for line in lines_by_gid(fig.axes[0], "rate-").values())
    width = raw.span_s / len(xs(fig.axes[0].get_lines()[0]))
    assert total * width == pytest.approx(cols.n)


def test_downsampled_points_say_so_and_keep_the_quantiles_of_all_ops(paused_run: Path) -> None:
    cols, raw = read_columns(paused_run), read_raw(paused_run)
    done = sum(1 for op in raw.ops if op.end_s is not None)
    full, thin = latency_figure(cols), latency_figure(cols, max_points=done // 4)
    stride = math.ceil(done / (done // 4))
    assert f"every {stride}th of {done:,} drawn" in thin.axes[0].get_title(loc="left")
    assert "drawn" not in full.axes[0].get_title(loc="left")
    drawn = sum(len(xs(line)) for gid, line in lines_by_gid(thin.axes[0], "points-").items() if not gid.endswith("-info"))
    assert drawn < done / stride + 12  # each of at most 12 kind/outcome clouds rounds up once
    q_full, q_thin = lines_by_gid(full.axes[0], "quantile-"), lines_by_gid(thin.axes[0], "quantile-")
    assert q_full.keys() == q_thin.keys()
    for gid in q_full:
        np.testing.assert_array_equal(ys(q_full[gid]), ys(q_thin[gid]))


def test_written_files_decode_and_the_svg_holds_the_bands(paused_run: Path, tmp_path: Path) -> None:
    cols, raw = read_columns(paused_run), read_raw(paused_run)
    out = write_plots(cols, tmp_path / "plots")
    assert sorted(out) == sorted(PLOT_FILES)
    assert all(p == tmp_path / "plots" / name for name, p in out.items())
    width_px, height_px = round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI)
    for name in ("latency.png", "rate.png"):
        assert imread(out[name]).shape == (height_px, width_px, 4)
    fig = latency_figure(cols)  # the same fixed layout as the files: where its axes sit, in inches
    box, (x0, x1) = fig.axes[0].get_position(), fig.axes[0].get_xlim()

    def svg_x(x: float) -> float:  # an SVG is drawn in points, 72 a inch
        return (box.x0 + (x - x0) / (x1 - x0) * box.width) * FIGSIZE[0] * 72

    for stem in ("latency", "rate"):
        root = ET.parse(out[f"{stem}.svg"]).getroot()
        ids = {str(el.get("id")): el for el in root.iter() if el.get("id")}
        assert not [i for i in ids if i.startswith("points-")]  # the point clouds are one raster image, not vectors
        assert (root.find(f".//{SVG}image") is not None) is (stem == "latency")
        assert [i for i in ids if i.startswith(("quantile-", "rate-"))]
        for i, (kind, start, end, _) in enumerate(raw.bands):
            path = ids[f"fault-{i}-{kind}"].find(f"{SVG}path")
            assert path is not None
            xs = [float(v) for v in path.get("d", "").replace("M", " ").replace("L", " ").replace("z", " ").split()[0::2]]
            assert (min(xs), max(xs)) == pytest.approx((svg_x(start), svg_x(end)), abs=0.01)
    # the same history gives the same bytes
    again = write_plots(cols, tmp_path / "again")
    assert all(again[name].read_bytes() == out[name].read_bytes() for name in PLOT_FILES)


# -- small histories written by hand: exact numbers


def write_history(path: Path, events: list[dict[str, Any]]) -> Path:
    header = {"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 0, "target": "hand-made", "seed": 7}
    lines = [header] + [{"index": i, **ev} for i, ev in enumerate(events)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def op(time_s: float, process: int, type_: str, f: str, **value: Any) -> dict[str, Any]:
    return {"time": round(time_s * 1e9), "process": process, "type": type_, "f": f, "node": "run-1/node-1", "value": value}


def nemesis(time_s: float, f: str, fault: str, victims: list[int]) -> dict[str, Any]:
    return {"time": round(time_s * 1e9), "process": "nemesis", "type": "info", "f": f, "value": {"fault": fault, "victims": victims}}


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """Four ops from t=1 s (the test started at 0): a 250 ms claim, a claim that never completes, a failed renew, a 10 ms read; a healed kill and an unhealed pause."""
    return write_history(tmp_path / "history.jsonl", [
        op(1.0, 0, "invoke", "claim", owner="w0"),
        op(1.2, 1, "invoke", "claim", owner="w1"),
        op(1.25, 0, "ok", "claim", epoch=1),
        nemesis(1.5, "kill", "kill", [1]),
        nemesis(2.0, "start", "kill", [1]),
        op(2.1, 2, "invoke", "renew", epoch=1),
        op(2.4, 2, "fail", "renew", reason="expired"),
        nemesis(3.0, "pause", "pause", [0]),
        op(3.5, 3, "invoke", "read"),
        op(3.51, 3, "ok", "read", epoch=1),
    ])


def test_a_hand_made_history_plots_exactly_its_ops_and_its_unhealed_fault(small: Path) -> None:
    cols, raw = read_columns(small), read_raw(small)
    assert raw.final is None and final_phase(cols) is None  # its read comes before the open claim has ended: no final phase
    assert raw.bands == [("kill", 1.5, 2.0, True), ("pause", 3.0, pytest.approx(3.51), False)]
    latency, rate = latency_figure(cols), rate_figure(cols)
    assert_axes(cols, latency, rate)
    for fig in (latency, rate):
        assert_bands(fig, raw)
        (kill, pause) = band_patches(fig.axes[0])
        assert x_extent(kill) == pytest.approx((1.5, 2.0)) and x_extent(pause) == pytest.approx((3.0, 3.51))
    assert_quantiles(latency, raw)
    assert_rates(rate, raw)
    ax = latency.axes[0]
    points = {gid: (list(xs(line)), list(ys(line))) for gid, line in lines_by_gid(ax, "points-").items()}
    assert points == {
        "points-claim-ok": ([pytest.approx(1.0)], [pytest.approx(250.0)]),
        "points-renew-fail": ([pytest.approx(2.1)], [pytest.approx(300.0)]),
        "points-read-ok": ([pytest.approx(3.5)], [pytest.approx(10.0)]),
        "points-claim-info": ([pytest.approx(1.2)], [0.985]),  # no completion: at the top edge, in axes fraction
    }
    assert lines_by_gid(ax, "points-claim-info")["points-claim-info"].get_transform() == ax.get_xaxis_transform()
    claim_p50 = ys(lines_by_gid(ax, "quantile-claim-p50")["quantile-claim-p50"])
    assert claim_p50[1] == pytest.approx(250.0) and np.isnan(np.delete(claim_p50, 1)).all()  # its bucket: 0.8775-1.755 s
    assert "1 info op (no completion) marked ▼ at the top" in ax.get_title(loc="left")
    assert "info (no completion; top edge)" in legend_labels(ax)
    claim_info = lines_by_gid(rate.axes[0], "rate-claim-info")["rate-claim-info"]
    assert ys(claim_info) * (3.51 / 4) == pytest.approx([0, 1, 0, 0])  # counted at its invoke


def test_an_empty_history_says_no_ops(tmp_path: Path) -> None:
    cols = read_columns(write_history(tmp_path / "history.jsonl", []))
    assert cols.n == 0
    out = write_plots(cols, tmp_path / "plots")
    for fig in (latency_figure(cols), rate_figure(cols)):
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.texts] == ["no ops"]
        assert not band_patches(ax) and not lines_by_gid(ax, "quantile-") and not lines_by_gid(ax, "rate-")
        assert ax.get_xlabel() == "time since the test started (s)"
    for stem in ("latency", "rate"):
        assert imread(out[f"{stem}.png"]).shape[:2] == (round(FIGSIZE[1] * DPI), round(FIGSIZE[0] * DPI))
        svg = out[f"{stem}.svg"].read_text()
        ET.fromstring(svg)
        assert "<!-- no ops -->" in svg  # matplotlib's SVG names each text it draws as glyphs


def test_a_history_with_faults_and_no_ops_still_draws_the_bands(tmp_path: Path) -> None:
    path = write_history(tmp_path / "history.jsonl", [nemesis(1.0, "pause", "pause", [0]), nemesis(3.0, "resume", "pause", [0]),
                                                      nemesis(3.5, "kill", "kill", [1]), nemesis(4.0, "pause", "pause", [2])])
    cols, raw = read_columns(path), read_raw(path)
    assert raw.bands == [("pause", 1.0, 3.0, True), ("kill", 3.5, 4.0, False), ("pause", 4.0, 4.0, False)]
    for fig in (latency_figure(cols), rate_figure(cols)):
        assert [t.get_text() for t in fig.axes[0].texts] == ["no ops", "p1"]  # and the kill's victim
        assert_bands(fig, raw)
        assert [xs(line)[0] for line in lines_by_gid(fig.axes[0], "kill-").values()] == [3.5, 3.5]  # its line and its marker


# -- the final phase and the kills


def final_band(ax: Axes) -> Patch:
    (band,) = [p for p in ax.patches if p.get_gid() == "final-phase"]
    return band


def rate_counts(ops: list[RawOp], width: float, count: int) -> dict[tuple[str, str], np.ndarray]:
    """Ops per kind, outcome and rate bucket (ok/fail at completion, info at invoke), counted by hand."""
    out: dict[tuple[str, str], np.ndarray] = {}
    for o in ops:
        when = o.end_s if o.end_s is not None else o.start_s
        row = out.setdefault((o.f, o.outcome), np.zeros(count))
        row[min(int(when / width), count - 1)] += 1
    return out


def assert_final_phase(latency: Figure, rate: Figure, raw: Raw) -> None:
    """The band from the last op of the run to the end, labelled; the rate's y axis over the run's ops, the final ones marked above it."""
    assert raw.final is not None
    reads = len(raw.ops) - raw.final
    for fig in (latency, rate):
        ax = fig.axes[0]
        assert x_extent(final_band(ax)) == pytest.approx((raw.final_start_s, raw.span_s), abs=1e-9)
        (label,) = [t for t in ax.texts if t.get_gid() == "final-phase-label"]
        assert label.get_text() == f"final phase: {reads:,} reads"
        assert "every node read once" in legend_labels(ax)
    ax = rate.axes[0]
    centres = xs(lines_by_gid(ax, "rate-")[next(iter(lines_by_gid(ax, "rate-")))])
    width = raw.span_s / len(centres)
    run = rate_counts(raw.run_ops, width, len(centres))
    every = rate_counts(raw.ops, width, len(centres))
    run_top = max(row.max() for row in run.values()) / width
    top = ax.get_ylim()[1]
    assert ax.get_ylim()[0] == 0 and run_top <= top <= 1.2 * run_top  # the run fills the plot...
    over = {key: np.flatnonzero(row / width > top) for key, row in every.items()}
    assert over[("read", "ok")].size  # ...and the final reads go above it: each such bucket marked at the top edge
    marks = lines_by_gid(ax, "offscale-")
    assert sorted(marks) == sorted(f"offscale-{f}-{o}" for (f, o), where in over.items() if where.size)
    for (f, o), where in over.items():
        if where.size:
            np.testing.assert_allclose(xs(marks[f"offscale-{f}-{o}"]), centres[where])
            assert (ys(marks[f"offscale-{f}-{o}"]) == top).all()
    peak = every[("read", "ok")].max() / width
    assert f"up to {peak:,.0f} ops/s, are off it" in ax.get_title(loc="left")
    assert f"read ok: {peak:,.0f} ops/s" in [t.get_text() for t in ax.texts]
    # latency: the run's quantiles only (assert_quantiles), the final reads as points
    points = [line for gid, line in lines_by_gid(latency.axes[0], "points-read").items() if gid.endswith("-ok")]
    assert set(np.round([o.start_s for o in raw.ops[raw.final:]], 9)) <= {x for line in points for x in np.round(xs(line), 9)}
    assert f"final phase's {reads:,} reads: points only" in latency.axes[0].get_title(loc="left")


def test_the_final_phase_of_a_real_run_is_shaded_and_kept_off_the_run_scale(paused_run: Path) -> None:
    """A real run's last phase (every node read once, back to back) is found, shaded, and does not squash the run."""
    cols, raw = read_columns(paused_run), read_raw(paused_run)
    assert raw.final is not None
    phase = final_phase(cols)
    assert phase is not None and (phase.first, phase.count) == (raw.final, len(raw.ops) - raw.final)
    assert phase.start_ns / 1e9 == pytest.approx(raw.final_start_s, abs=1e-9)
    assert phase.first_read_ns / 1e9 == pytest.approx(raw.ops[raw.final].start_s, abs=1e-9)
    assert all(o.f in ("read", "read-resource") for o in raw.ops[raw.final:])
    latency, rate = latency_figure(cols), rate_figure(cols)
    assert_final_phase(latency, rate, raw)
    assert_quantiles(latency, raw)
    assert_rates(rate, raw)  # the lines still hold every op: only the axis is the run's


@pytest.fixture
def killed(tmp_path: Path) -> Path:
    """Two workers for 4 s (no reads), a kill of p1 at 2 s (replaced by p2), a kill-store from 3 to 3.4 s; then 40 reads by p3 from 5 s."""
    events: list[dict[str, Any]] = []
    for i in range(16):  # p0: a claim every 0.25 s, 10 ms each
        events += [op(0.25 * i + 0.01, 0, "invoke", "claim", owner="w0"), op(0.25 * i + 0.02, 0, "ok", "claim", epoch=i + 1)]
    for i in range(8):  # p1 until it is killed, then p2
        p, t = (1, 0.1 + 0.25 * i) if i < 4 else (2, 2.1 + 0.25 * (i - 4))
        events += [op(t, p, "invoke", "renew", epoch=1), op(t + 0.005, p, "fail", "renew", reason="expired")]
    events += [nemesis(2.0, "kill", "kill", [1]), nemesis(2.02, "start", "kill", [1]),
               nemesis(3.0, "kill", "kill-store", []), nemesis(3.4, "start", "kill-store", [])]
    for i in range(40):
        t = 5.0 + 0.002 * i
        events += [{**op(t, 3, "invoke", "read"), "node": f"run-1/node-{i}"},
                   {**op(t + 0.001, 3, "ok", "read", epoch=1), "node": f"run-1/node-{i}"}]
    events.sort(key=lambda e: e["time"])
    return write_history(tmp_path / "history.jsonl", events)


def test_a_hand_made_final_phase_is_found_and_its_reads_are_neither_the_run_scale_nor_its_quantiles(killed: Path) -> None:
    cols, raw = read_columns(killed), read_raw(killed)
    phase = final_phase(cols)
    assert phase is not None and (phase.first, phase.count) == (24, 40) and raw.final == 24
    assert (phase.start_ns, phase.first_read_ns) == (round(3.77 * 1e9), round(5.0 * 1e9))  # from p0's last claim's end
    latency, rate = latency_figure(cols), rate_figure(cols)
    assert_final_phase(latency, rate, raw)
    assert not lines_by_gid(latency.axes[0], "quantile-read-")  # the run has no reads: no read quantile, though reads are drawn
    assert_quantiles(latency, raw)
    assert_rates(rate, raw)


def test_each_kill_is_a_dark_line_with_a_marker_and_its_victim(killed: Path, tmp_path: Path) -> None:
    """A worker kill's band is 20 ms wide here (a fraction of a pixel): the kill is drawn as an instant, over everything."""
    cols, raw = read_columns(killed), read_raw(killed)
    assert [b[:2] for b in raw.bands] == [("kill", 2.0), ("kill-store", 3.0)]
    for fig in (latency_figure(cols), rate_figure(cols)):
        ax = fig.axes[0]
        data_z = max(line.get_zorder() for line in ax.get_lines() if str(line.get_gid()).startswith(("quantile-", "rate-", "points-")))
        for i, (kind, at, label) in enumerate([("kill", 2.0, "p1"), ("kill-store", 3.0, "store")]):
            line = lines_by_gid(ax, f"kill-{i}-{kind}")[f"kill-{i}-{kind}"]
            assert list(xs(line)) == [at, at] and list(ys(line)) == [0, 1]  # top to bottom of the axes
            assert line.get_transform() == ax.get_xaxis_transform()
            assert line.get_zorder() > data_z and line.get_linewidth() >= 1.2
            assert np.mean(to_rgb(line.get_color())) < 0.6 * np.mean(to_rgb(FAULT_COLOURS[kind]))  # darker than its band
            marker = lines_by_gid(ax, f"kill-markers-{kind}")[f"kill-markers-{kind}"]
            assert list(xs(marker)) == [at] and list(ys(marker)) == [1] and not marker.get_clip_on() and marker.get_marker() == "v"
            (text,) = [t for t in ax.texts if t.get_gid() == f"kill-label-{i}-{kind}"]
            assert text.get_text() == label
        assert "kill" in legend_labels(ax) and "kill-store" in legend_labels(ax)
    # and in the picture: the column of pixels at 2 s is dark from the top of the plot to its bottom
    out = write_plots(cols, tmp_path / "plots")
    fig = rate_figure(cols)
    box, (x0, x1) = fig.axes[0].get_position(), fig.axes[0].get_xlim()
    image = imread(out["rate.png"])[:, :, :3]
    column = round((box.x0 + (2.0 - x0) / (x1 - x0) * box.width) * FIGSIZE[0] * DPI)
    rows = slice(round((1 - box.y1) * FIGSIZE[1] * DPI) + 3, round((1 - box.y0) * FIGSIZE[1] * DPI) - 3)
    darkest = image[rows, column - 1:column + 2].mean(axis=2).min(axis=1)  # the line may fall on either neighbour
    assert (darkest < 0.5).mean() > 0.95, "the kill's line runs the plot's height"
