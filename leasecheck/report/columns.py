"""A history as columns: one flat array per field, for the run report and its plots.

The report draws every op of a run, a million of them at nightly scale, and the
plots bin them by time. Both need the same few numbers per op (who, when, what,
how it ended, which epoch) and nothing else, so a history is read here into
:mod:`array` columns instead of :class:`~leasecheck.histories.Op` objects: about
30 bytes an op instead of ~1 KB, and columns go into the report's page as typed
arrays as they are.

Reading is lenient about what the report does not draw (a value's extra keys),
strict about what it does: a line that is not an event, an event without its
fields, a completion with no invoke, each raises :class:`HistoryError` naming
the file and line, as the checker's reader does.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, get_args

import msgspec

from leasecheck.checker.windows import Window
from leasecheck.histories import Header, HistoryError, HistoryReader
from leasecheck.histories.format import HISTORY_END, NEMESIS, Event
from leasecheck.histories.vocabulary import FailReason, OpName
from leasecheck.nemesis.catalogue import CATALOGUE
from leasecheck.nemesis.members import member_label
from leasecheck.verdict.run_verdict import fault_windows_of

#: op names, in the order of their codes in :attr:`Columns.f`
F_NAMES: tuple[str, ...] = get_args(OpName)
#: fail reasons, in the order of their codes in :attr:`Columns.reason`
REASONS: tuple[str, ...] = get_args(FailReason)
#: :attr:`Columns.outcome` codes
OK, FAIL, INFO = 0, 1, 2
OUTCOMES: tuple[str, ...] = ("ok", "fail", "info")
_TYPES = {"ok": OK, "fail": FAIL, "info": INFO}
_F_CODE = {name: i for i, name in enumerate(F_NAMES)}
_REASON_CODE = {name: i for i, name in enumerate(REASONS)}


@dataclass(frozen=True)
class Band:
    """A fault from ``start_ns`` until ``end_ns`` (None: never healed), hitting ``victims`` (worker processes)."""

    kind: str
    start_ns: int
    end_ns: int | None
    victims: tuple[int, ...] = ()
    #: a cluster fault's members, as its start event names them: ``m1 | m2 m3`` (a partition's sides), ``m1 → m2``
    #: (a failover), ``m1`` (a member killed or paused), ``m2 +120 ms`` (a member's clock); empty for other faults
    members: str = ""


@dataclass
class Columns:
    """Every client op of a history, one entry per op in each array, in invoke order.

    ``end_ns`` is -1 for an op that never completed; ``reason`` is -1 unless the
    op failed; ``epoch`` is -1 when the op names none (an unfenced backend, a
    failed claim). ``node`` indexes :attr:`nodes`, ``f`` :data:`F_NAMES`,
    ``reason`` :data:`REASONS`.
    """

    header: Header
    source: str
    index: array = field(default_factory=lambda: array("q"))
    process: array = field(default_factory=lambda: array("l"))
    start_ns: array = field(default_factory=lambda: array("q"))
    end_ns: array = field(default_factory=lambda: array("q"))
    f: array = field(default_factory=lambda: array("b"))
    outcome: array = field(default_factory=lambda: array("b"))
    reason: array = field(default_factory=lambda: array("b"))
    node: array = field(default_factory=lambda: array("l"))
    epoch: array = field(default_factory=lambda: array("q"))
    nodes: list[str] = field(default_factory=list)
    faults: list[Band] = field(default_factory=list)
    #: the first event's time (a client's or the nemesis'): time 0 of the report and its plots
    start_time_ns: int = 0
    #: the last event's time: where an unhealed fault's band and an open op's bar end
    end_time_ns: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.index)


class _Value(msgspec.Struct):
    """The parts of an event's value the report draws; other keys are skipped unread."""

    epoch: Any = None
    reason: Any = None


class _Event(Event, gc=False):
    """The history's one event record (:class:`~leasecheck.histories.format.Event`), its value decoded only as far as the report draws."""

    value: _Value | None = None


class _NemesisEvent(msgspec.Struct):
    value: dict[str, Any] = {}


_decode = msgspec.json.Decoder(_Event).decode
_decode_nemesis = msgspec.json.Decoder(_NemesisEvent).decode


def _epoch(x: Any) -> int:
    return x if type(x) is int else -1


def _open(path: str | os.PathLike[str], name: str) -> BinaryIO:
    try:
        return Path(path).open("rb")
    except OSError as e:
        raise HistoryError(name, None, f"cannot open: {e.strerror or e}") from None


def read_columns(path: str | os.PathLike[str]) -> Columns:
    """Read a history file into :class:`Columns`; raises :class:`HistoryError` (file, line, what) on bad input."""
    name = str(path)
    with HistoryReader(path) as reader:  # the header, validated as the checker validates it
        header = reader.header
    cols = Columns(header, name)
    node_code: dict[str, int] = {}
    open_: dict[int, tuple[int, int]] = {}  # process -> (position in the columns, line)
    nemesis: list[Event] = []
    index, process, start, end = cols.index, cols.process, cols.start_ns, cols.end_ns
    f_col, outcome, reason, node_col, epoch = cols.f, cols.outcome, cols.reason, cols.node, cols.epoch
    last = 0
    retired: set[int] = set()
    expected = 0
    with _open(path, name) as handle:
        handle.readline()
        for line_no, raw in enumerate(handle, start=2):
            if not raw.strip():
                continue
            try:
                ev = _decode(raw)
            except msgspec.MsgspecError as e:
                if not raw.endswith(b"\n"):  # a run that crashed mid-write: its last line is cut
                    cols.warnings.append(f"{name}: line {line_no} is truncated (the run was cut short); dropped")
                    break
                raise HistoryError(name, line_no, f"not a valid event: {e}") from None
            if ev.index != expected:
                raise HistoryError(name, line_no, f"index {ev.index} out of order (expected {expected})")
            expected += 1
            if type(ev.time) is not int or ev.time < last:
                raise HistoryError(name, line_no, f"time {ev.time} goes backwards (previous event at {last})")
            if expected == 1:
                cols.start_time_ns = ev.time
            last = ev.time
            p = ev.process
            if p == NEMESIS:
                if ev.f == HISTORY_END:  # the writer finished: not a fault, and nothing may follow it
                    for after, rest in enumerate(handle, start=line_no + 1):
                        if rest.strip():
                            raise HistoryError(name, after, f"a line after the history-end event of line {line_no} "
                                                            "(that event ends a history: it is its last line)")
                    break
                fault = _decode_nemesis(raw).value
                nemesis.append(Event(index=ev.index, time=ev.time, process=NEMESIS, type=ev.type, f=ev.f, value=fault))
                continue
            if type(p) is not int:
                raise HistoryError(name, line_no, f"process must be an integer or \"nemesis\", not {p!r}")
            value = ev.value
            if ev.type == "invoke":
                code = _F_CODE.get(ev.f)
                if code is None:
                    raise HistoryError(name, line_no, f"unknown op {ev.f!r}")
                if p in retired:
                    raise HistoryError(name, line_no, f"process {p} was retired by an info completion and cannot invoke again")
                if p in open_:
                    raise HistoryError(name, line_no, f"process {p} invoked {ev.f} with an op still open (line {open_[p][1]})")
                if type(ev.node) is not str:
                    raise HistoryError(name, line_no, "a client event needs a \"node\" string")
                n = node_code.get(ev.node)
                if n is None:
                    n = node_code[ev.node] = len(cols.nodes)
                    cols.nodes.append(ev.node)
                open_[p] = (len(index), line_no)
                index.append(ev.index)
                process.append(p)
                start.append(ev.time)
                end.append(-1)
                f_col.append(code)
                outcome.append(INFO)
                reason.append(-1)
                node_col.append(n)
                epoch.append(_epoch(value.epoch) if value is not None else -1)
                continue
            kind = _TYPES.get(ev.type)
            if kind is None:
                raise HistoryError(name, line_no, f"unknown event type {ev.type!r}")
            opened = open_.pop(p, None)
            if opened is None:
                raise HistoryError(name, line_no, f"{ev.type} of process {p} with no open invoke")
            at = opened[0]
            if kind == INFO:
                retired.add(p)
            end[at] = ev.time
            outcome[at] = kind
            if kind == FAIL and value is not None:
                reason[at] = _REASON_CODE.get(value.reason, _REASON_CODE["error"])
            if kind == OK and F_NAMES[f_col[at]] in ("claim", "read"):
                epoch[at] = _epoch(value.epoch) if value is not None else -1
            elif kind != OK and F_NAMES[f_col[at]] in ("claim", "read"):
                epoch[at] = -1
    cols.end_time_ns = last
    cols.faults = bands(nemesis)
    return cols


def bands(events: list[Event]) -> list[Band]:
    """Every fault window of the history's nemesis events, named by its catalogue row, in start order."""
    out: list[Band] = []
    for kind in CATALOGUE:
        labels = _member_labels(events, kind.name, kind.events[0])
        for w in fault_windows_of(events, kind):
            out.append(_band(kind.name, w, labels.get(w.start, "")))
    return sorted(out, key=lambda b: (b.start_ns, b.kind))


def _band(kind: str, w: Window, members: str = "") -> Band:
    return Band(kind, w.start, w.end, tuple(sorted(w.victims)), members)


def _member_labels(events: list[Event], fault: str, start_f: str) -> dict[int, str]:
    """The members each start event of ``fault`` names, by the event's time (only a cluster fault's name members)."""
    out: dict[int, str] = {}
    for ev in events:
        value = ev.value if isinstance(ev.value, dict) else {}
        if ev.f != start_f or value.get("fault") != fault:
            continue
        label = member_label(value)
        if label:
            out.setdefault(ev.time, label)
    return out


__all__ = ["FAIL", "F_NAMES", "INFO", "OK", "OUTCOMES", "REASONS", "Band", "Columns", "bands", "read_columns"]
