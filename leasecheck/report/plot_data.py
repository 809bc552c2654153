"""The numbers the latency and rate plots draw: time buckets, per-bucket quantiles, the final phase. numpy only.

Everything here is pure (a :class:`Columns` in, numpy arrays and small
dataclasses out) and imports no matplotlib, so what a plot shows can be tested
as numbers, and the drawing (:mod:`.plots`, :mod:`.plot_parts`) holds only
what it looks like. :class:`Frame` is what both figures start from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from leasecheck.nemesis.catalogue import CATALOGUE
from leasecheck.report.columns import F_NAMES, Columns

#: above this many completed ops the latency plot draws every k-th point (and says so); quantiles always use all
MAX_POINTS = 2_000_000
#: time buckets across the run: 4 to 60 (Jepsen's fixed 10 s would be one bucket for a 6 s run, and the
#: plot is about 800 pixels wide)
MIN_BUCKETS, MAX_BUCKETS = 4, 60
#: a quantile bucket should hold about this many completed ops (all kinds together), a rate bucket this many ops
OPS_PER_QUANTILE_BUCKET = 50
OPS_PER_RATE_BUCKET = 10
#: the faults that happen at an instant, a SIGKILL (kill, kill-store, docker-kill: the catalogue's rows that start with a
#: ``kill`` event): drawn as a line at that instant as well as a band
KILL_KINDS: tuple[str, ...] = tuple(k.name for k in CATALOGUE if k.events[0] == "kill")


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
    b = bucket_of(t_s, width, buckets)
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


def bucket_of(t_s: np.ndarray, width: float, buckets: int) -> np.ndarray:
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
        return bucket_of(t_s, self.width, self.count)


@dataclass(frozen=True)
class FinalPhase:
    """A history's final phase: the workers have stopped, then every node is read once (:mod:`leasecheck.run.final_reads`).

    The history does not mark it (its reads are ops like any other), so it is
    recognised by what the runner does: its ops are the history's last ones,
    all reads (of the record or of the resource), by processes that never ran an op before it, and the first of
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
    f = column_view(cols.f, np.int8)
    others = np.flatnonzero((f != F_NAMES.index("read")) & (f != F_NAMES.index("read-resource")))
    k0 = max(int(others[-1]) + 1 if len(others) else 0, 1)  # the trailing reads; at least one op of the run before them
    if k0 >= n:
        return None
    start = column_view(cols.start_ns, np.int64)
    end = column_view(cols.end_ns, np.int64)
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


class Frame:
    """What both plots start from: the origin and span, each op's columns as numpy views, the final phase."""

    def __init__(self, cols: Columns) -> None:
        self.cols = cols
        self.origin = origin_ns(cols)
        self.span_s = max(cols.end_time_ns - self.origin, 0) / 1e9
        self.start = column_view(cols.start_ns, np.int64)
        self.end = column_view(cols.end_ns, np.int64)
        self.f = column_view(cols.f, np.int8)
        self.outcome = column_view(cols.outcome, np.int8)
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


def column_view(column: object, dtype: type) -> np.ndarray:
    """A zero-copy numpy view of an :mod:`array` column (an empty one has no buffer to view)."""
    if len(column) == 0:  # type: ignore[arg-type]
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(column, dtype=dtype)  # type: ignore[call-overload]


__all__ = ["KILL_KINDS", "MAX_BUCKETS", "MAX_POINTS", "MIN_BUCKETS", "OPS_PER_QUANTILE_BUCKET", "OPS_PER_RATE_BUCKET", "Buckets",
           "FinalPhase", "Frame", "bucket_of", "bucket_quantiles", "column_view", "final_phase", "origin_ns"]
