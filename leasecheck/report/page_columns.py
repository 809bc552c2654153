"""The run report's op data: lanes for the timeline, and the columns as base64 typed arrays.

The report draws every op of a run, a million at nightly scale, so its page
gets the ops as it draws them: one flat little-endian typed array per field,
base64 in the HTML, decoded by ``atob`` into ``Float64Array``, ``Int32Array``...
(about 37 bytes an op, 50 bytes in base64) instead of one JSON object per op
(~150 bytes, and seconds of ``JSON.parse``). Times go as float64 milliseconds:
exact to the nanosecond for any run shorter than a few months, so the page's
times are the history's.

**Lanes.** A timeline with one lane per process number would have ~10,000 lanes
for a million ops, since a worker takes a new number after every ``info``
op. So processes are packed into lanes greedily, in order of their first op: a
process takes the lowest lane whose last process ended strictly before its
first invoke. Lanes never hold two ops at once, and within a lane the ops are
sorted by start *and* by end, which is what lets the page find the ops in view
by binary search. An op that never completed is its process's last; it keeps
the lane for a while (:func:`occupied_until`) and the page draws it on until
the lane's next op, or the history's end.

numpy (matplotlib's own dependency, so always there with the plots) does the
per-op arithmetic: a million ops take tens of milliseconds, not seconds.
"""

from __future__ import annotations

import base64
import heapq
from dataclasses import dataclass

import numpy as np

from leasecheck.report.columns import Columns

#: the largest value an Int32 column holds; a column with more (an epoch from a
#: ZooKeeper zxid, say) goes as Float64, exact up to 2**53
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Encoded:
    """One column for the page: its name, its typed array's type (``Float64``, ``Int32``...) and the base64 of its bytes."""

    name: str
    dtype: str
    b64: bytes


#: the page's typed array for each numpy dtype (all little-endian)
_TYPED = {"<f8": "Float64", "<f4": "Float32", "<i4": "Int32", "<u4": "Uint32", "<u2": "Uint16", "|i1": "Int8", "|u1": "Uint8"}


def _np(a: object, itemsize: int, signed: bool = True) -> np.ndarray:
    """A numpy view of an :mod:`array` column (no copy)."""
    kind = "i" if signed else "u"
    return np.frombuffer(a, dtype=np.dtype(f"={kind}{itemsize}"))  # type: ignore[call-overload]


def occupied_until(cols: Columns) -> np.ndarray:
    """Until when each op keeps its lane busy, in ns: its completion, or for an op that never completed, a while.

    An op that never completed may take effect until the history's end, but a
    lane held that long by each one would leave a history with thousands of
    them (a crash-heavy nightly run) with thousands of lanes. So it holds its
    lane for the 99th percentile of the completed ops' durations, and the page
    draws it on until the lane's next op (or the end), marked as open.
    """
    start = _np(cols.start_ns, cols.start_ns.itemsize)
    end = _np(cols.end_ns, cols.end_ns.itemsize)
    done = end >= 0
    tail = int(np.percentile(end[done] - start[done], 99)) if done.any() else 0
    return np.where(done, end, start + tail)


def lanes(cols: Columns) -> tuple[np.ndarray, int]:
    """Each op's lane (see the module's docstring) and the number of lanes."""
    if cols.n == 0:
        return np.zeros(0, dtype=np.uint32), 0
    proc = _np(cols.process, cols.process.itemsize)
    start = _np(cols.start_ns, cols.start_ns.itemsize)
    end = occupied_until(cols)
    procs, first, inverse = np.unique(proc, return_index=True, return_inverse=True)
    last = np.zeros(len(procs), dtype=np.int64)
    np.maximum.at(last, inverse, end)
    first_start = start[first]
    order = np.lexsort((procs, first_start))  # by first invoke, then process number
    lane_of = np.zeros(len(procs), dtype=np.uint32)
    free: list[int] = []  # lanes whose process has ended, lowest first
    busy: list[tuple[int, int]] = []  # (end of its process's last op, lane)
    count = 0
    for p, t, e in zip(order.tolist(), first_start[order].tolist(), last[order].tolist()):
        while busy and busy[0][0] < t:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        lane_of[p] = lane
        heapq.heappush(busy, (e, lane))
    return lane_of[inverse], count


def _b64(name: str, values: np.ndarray) -> Encoded:
    le = values.astype(values.dtype.newbyteorder("<"), copy=False)
    return Encoded(name, _TYPED[le.dtype.str], base64.b64encode(le.tobytes()))


def _int_column(values: np.ndarray) -> np.ndarray:
    """Int32 when every value fits (epochs, process numbers, indices do, almost always), else Float64."""
    if len(values) == 0 or (int(values.min()) >= -_INT32_MAX and int(values.max()) <= _INT32_MAX):
        return values.astype("<i4")
    return values.astype("<f8")


def encode(cols: Columns, lane: np.ndarray, lane_count: int) -> list[Encoded]:
    """The columns the page decodes, in its names: start/end in ms (end -1: never completed), codes as small ints."""
    start = _np(cols.start_ns, cols.start_ns.itemsize)
    end = _np(cols.end_ns, cols.end_ns.itemsize)
    end_ms = np.where(end < 0, -1.0, end / 1e6)
    return [
        _b64("index", _int_column(_np(cols.index, cols.index.itemsize))),
        _b64("process", _int_column(_np(cols.process, cols.process.itemsize))),
        _b64("start", (start / 1e6).astype("<f8")),
        _b64("end", end_ms.astype("<f8")),
        _b64("lane", lane.astype("<u2" if lane_count <= 0xFFFF else "<u4")),
        _b64("f", _np(cols.f, 1).astype("<u1")),
        _b64("outcome", _np(cols.outcome, 1).astype("<u1")),
        _b64("reason", _np(cols.reason, 1).astype("<i1")),
        _b64("node", _np(cols.node, cols.node.itemsize).astype("<u2" if len(cols.nodes) <= 0xFFFF else "<u4")),
        _b64("epoch", _int_column(_np(cols.epoch, cols.epoch.itemsize))),
    ]


__all__ = ["Encoded", "encode", "lanes", "occupied_until"]
