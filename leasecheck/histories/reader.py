"""Streaming, validating reader for history format v1.

The reader is the gate between files written by anyone (our runner, another
team's harness, a hand-edited example) and the checker, which assumes every rule
of the format holds. So it checks every rule, and rejects the first broken one
with a single line naming the file, the line and what is wrong. It pairs invokes
with completions as it goes and hands out each :class:`Op` once it is complete,
so memory holds only the open operations, never the whole file.

Decoding uses msgspec's typed decoder: the per-event type checks run in C, which
is what lets a million-operation history be read in about a second. The rules a
type cannot state, and the words of each rejection, are in
:mod:`leasecheck.histories.rules`; a file read in byte ranges side by side is
:mod:`leasecheck.histories.chunks`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import msgspec

from leasecheck.histories.format import HISTORY_END, NEMESIS, Event, Header, Op, named_epoch
from leasecheck.histories.rules import (
    HistoryError,
    check_completion_value,
    check_invoke_value,
    check_resource_value,
    cut_reason,
    describe,
    parse_header,
)
from leasecheck.histories.vocabulary import (
    CLIENT_FUNCTIONS,
    EPOCH_CARRIERS,
    EVENT_TYPES,
    FAIL_REASONS,
    READ_STATUSES,
    EventType,
    OpName,
)


class _ClientEvent(Event, gc=False):
    """The one event record (:class:`Event`), narrowed to the types format v1 asks of a client's event: the common line.

    msgspec checks these types in C (and hands back the one interned string of
    each ``type`` and ``f``), so the reader's Python loop is left with the rules
    a type cannot state. A line this rejects is decoded again as an :class:`Event`.
    """

    process: int
    type: EventType
    f: OpName
    value: dict[str, Any] | None = None


_decode_client = msgspec.json.Decoder(_ClientEvent).decode
_decode_event = msgspec.json.Decoder(Event).decode


def _complete_line(line: bytes | str) -> bytes:
    """A line given in memory is whole by definition (only files get cut short)."""
    b = line.encode() if isinstance(line, str) else line
    return b if b.endswith(b"\n") else b + b"\n"


class HistoryReader:
    """Reads one history: ``header`` at once, then ``ops()`` streams operations.

    ``source`` is a path, or an iterable of lines (bytes or str) for histories
    built in memory. ``ops()`` yields each operation when its completion is read
    (so in completion order), then every operation still open at the end as
    ``info``. Nemesis events are kept in ``nemesis``. A cut last line (a run
    that crashed mid-write) is not read, and once the ops are read ``cut``
    says so, naming the line; it says so too of a history whose header
    promises a ``history-end`` event it never reached (its writer never
    finished it). The checker makes such a history's verdict never valid.
    """

    def __init__(self, source: str | os.PathLike[str] | Iterable[bytes | str], name: str | None = None) -> None:
        self._file: BinaryIO | None = None
        if isinstance(source, (str, os.PathLike)):
            path = Path(source)
            self.name = name or str(path)
            try:
                self._file = path.open("rb")
            except OSError as e:
                raise HistoryError(self.name, None, f"cannot open: {e.strerror or e}") from None
            self._lines: Iterator[bytes] = iter(self._file)
        else:
            self.name = name or "<memory>"
            self._lines = (_complete_line(ln) for ln in source)
        self.warnings: list[str] = []
        self.nemesis: list[Event] = []
        self.events = 0
        self.last_time = 0
        #: the cut last line's number (None: the last line is whole)
        self.cut_line: int | None = None
        #: the line of the ``history-end`` event (None: not read)
        self.end_line: int | None = None
        #: the number of the last line read
        self.lines = 1
        self._consumed = False
        try:
            first = next(self._lines, None)
        except OSError as e:
            self.close()
            raise HistoryError(self.name, 1, f"cannot read: {e}") from None
        if first is None or not first.strip():
            self.close()
            raise HistoryError(self.name, 1, "missing header: the file is empty" if first is None else "missing header: line 1 is empty")
        #: where the events begin in the file (the header line's length in bytes)
        self.header_bytes = len(first)
        try:
            self.header = parse_header(first, self.name)
        except HistoryError:
            self.close()
            raise

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> HistoryReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, line: int, message: str) -> HistoryError:
        self.close()
        return HistoryError(self.name, line, message)

    def _truncated(self, line: int) -> None:
        self.cut_line = line

    @property
    def cut(self) -> str | None:
        """Once ``ops()`` ran to its end: the one line saying the history is cut (its last line, or its promised
        ``history-end`` event never came), naming the file and the line; None when it ends whole."""
        return cut_reason(self.name, self.header.end_marker, self.cut_line, self.end_line, self.lines)

    def ops(self, open_ops: dict[int, Any] | None = None) -> Iterator[Op]:
        """Every client operation, validated; raises :class:`HistoryError` at the first bad line.

        ``open_ops`` (process -> invoke event): the caller's dict the reader keeps
        the ops in flight in, so that a reader following a growing history
        (:mod:`leasecheck.checker.online`) sees what is in flight between two ops.
        """
        if self._consumed:
            raise RuntimeError("HistoryReader.ops() can be iterated only once")
        self._consumed = True
        if open_ops is None:
            open_ops = {}
        yield from self._pairs(0, 0, open_ops, set(), None)
        if open_ops:
            self.warnings.append(never_completed(self.name, len(open_ops)))
        yield from never_completed_ops(open_ops)

    def _pairs(
        self, expected: int | None, last_time: float, open_ops: dict[int, Any], retired: set[int], orphans: list[Any] | None
    ) -> Iterator[Op]:
        """The reader's loop: every line checked, invokes paired with their completions.

        Most lines are a client's invoke or completion with every field of the
        type format v1 asks for: :class:`_ClientEvent` decodes and type-checks
        those in C, and the loop checks only what types cannot say (order,
        pairing, the values' contents). A line it rejects (a nemesis event, a
        stray type, bad JSON, ...) is decoded again as a plain :class:`Event`
        and judged by every rule in the order the format lists them, so each
        error names the same line with the same words either way.

        A chunk of a file (:class:`~leasecheck.histories.chunks.HistoryChunk`) starts with ``expected`` None
        and collects ``orphans``: completions whose invoke may lie in an
        earlier chunk. Either is a branch the common line never takes.
        """
        decode = _decode_client
        lineno = 1 if orphans is None else 0
        functions = CLIENT_FUNCTIONS
        carriers = EPOCH_CARRIERS
        reasons = FAIL_REASONS
        statuses = READ_STATUSES
        error = self._error
        try:
            for raw in self._lines:
                lineno += 1
                try:
                    ev: Any = decode(raw)
                    typed = True
                except msgspec.MsgspecError:
                    try:
                        ev = _decode_event(raw)
                    except msgspec.MsgspecError as e:
                        if not raw.strip():
                            continue
                        if not raw.endswith(b"\n") and not isinstance(e, msgspec.ValidationError):
                            self._truncated(lineno)
                            break
                        raise error(lineno, describe(e)) from None
                    typed = False
                if ev.index != expected:
                    if expected is None:  # a chunk's first event: the chunk before it knows what it should be
                        expected = ev.index
                        self._first(ev)
                    elif ev.index < expected:
                        raise error(lineno, f"index {ev.index} repeats or goes back (expected {expected})")
                    else:
                        raise error(lineno, f"index gap: {ev.index} after {expected - 1} (expected {expected})")
                expected += 1  # type: ignore[operator]  # set from the first event when it came as None
                t = ev.time
                if t < last_time:
                    raise error(lineno, f"time goes backwards: {t} ns after {last_time} ns")
                last_time = t
                p = ev.process
                typ = ev.type
                if not typed:  # what the typed decoder would have checked, in the format's order
                    if isinstance(p, str):
                        if p != NEMESIS:
                            raise error(lineno, f'process must be an integer or "nemesis", not {p!r}')
                        if typ not in EVENT_TYPES:
                            raise error(lineno, f"unknown type {typ!r} (invoke, ok, fail or info)")
                        if ev.f == HISTORY_END:  # the writer finished: nothing may follow
                            self.end_line = end = lineno
                            for raw in self._lines:
                                lineno += 1
                                if raw.strip():
                                    raise error(lineno, f"a line after the history-end event of line {end} "
                                                        "(that event ends a history: it is its last line)")
                            break
                        self.nemesis.append(ev)
                        continue
                    if typ == "invoke":
                        if ev.f not in functions:
                            raise error(lineno, f"unknown f {ev.f!r} (one of {', '.join(sorted(functions))})")
                    elif typ not in EVENT_TYPES:
                        raise error(lineno, f"unknown type {typ!r} (invoke, ok, fail or info)")
                if typ == "invoke":
                    if not ev.node:
                        raise error(lineno, f'{ev.f} invoke lacks "node"')
                    if p in open_ops:
                        raise error(
                            lineno,
                            f"process {p} invokes while op {open_ops[p].index} is still outstanding "
                            "(one op per process at a time)",
                        )
                    if p in retired:
                        raise error(
                            lineno,
                            f"process {p} is reused after an info completion "
                            "(a restarted worker must take a new process number)",
                        )
                    v = ev.value
                    if ev.f in carriers:
                        if v.__class__ is not dict or "epoch" not in v or ((ep := v["epoch"]) is not None and ep.__class__ is not int):
                            raise error(lineno, cast(str, check_invoke_value(ev)))
                    elif v is None:
                        ev.value = {}
                    elif v.__class__ is not dict:
                        raise error(lineno, cast(str, check_invoke_value(ev)))
                    open_ops[p] = ev
                    continue
                inv = open_ops.pop(p, None)
                if inv is None:
                    if p in retired:
                        raise error(lineno, f"process {p} completes an op after its info completion")
                    if orphans is None:
                        raise error(lineno, f"{typ} completion with no invoke: process {p} has no op outstanding")
                    problem = check_completion_value(ev, ev.f)  # its invoke's f, unless the stitching finds them apart
                    if problem:
                        raise error(lineno, problem)
                    orphans.append(ev)
                    if typ == "info":
                        retired.add(p)
                    continue
                f = inv.f
                if ev.f != f:
                    raise error(lineno, f"completion f {ev.f!r} does not match its invoke's {f!r} (op {inv.index})")
                if ev.node is not None and ev.node != inv.node:
                    raise error(
                        lineno, f"completion node {ev.node!r} does not match its invoke's {inv.node!r} (op {inv.index})"
                    )
                v = ev.value
                if v is None:
                    v = ev.value = {}
                if typ == "ok":
                    if v.__class__ is not dict:
                        raise error(lineno, cast(str, check_completion_value(ev, f)))
                    if f == "read-resource":
                        if check_resource_value(v) is not None:
                            raise error(lineno, cast(str, check_completion_value(ev, f)))
                        epoch = None
                    elif f == "claim" or f == "read":
                        if f == "claim":
                            bad = "epoch" not in v or ((ep := v["epoch"]) is not None and ep.__class__ is not int)
                        else:
                            s = v.get("status")
                            bad = (
                                s.__class__ is not str or s not in statuses
                                or ((ep := v.get("epoch")) is not None and ep.__class__ is not int)
                            )
                        if bad:
                            raise error(lineno, cast(str, check_completion_value(ev, f)))
                        epoch = v.get("epoch")
                    else:
                        epoch = inv.value.get("epoch")
                    done: int | None = t
                elif typ == "fail":
                    if v.__class__ is not dict or (r := v.get("reason")).__class__ is not str or r not in reasons:
                        raise error(lineno, cast(str, check_completion_value(ev, f)))
                    epoch = None if f == "claim" or f == "read" or f == "read-resource" else inv.value.get("epoch")
                    done = t
                else:  # info: any value, kept as an object
                    if v.__class__ is not dict:
                        ev.value = {"value": v}
                    retired.add(p)
                    epoch = None if f == "claim" or f == "read" or f == "read-resource" else inv.value.get("epoch")
                    done = None
                # the invoke's node was checked to be a non-empty str when it was read
                yield Op(inv.index, p, f, inv.node, inv.value, typ, ev.value, inv.time, done, ev.index, epoch)
        except OSError as e:
            raise error(lineno, f"cannot read: {e}") from None
        finally:
            self._ended(expected, last_time, lineno)
            self.close()

    def _first(self, ev: Any) -> None:
        """A chunk's first event (a whole history's first is expected to be index 0 at time >= 0)."""

    def _ended(self, expected: int | None, last_time: float, lines: int) -> None:
        self.events = expected or 0
        self.last_time = int(last_time)
        self.lines = lines


def never_completed(name: str, n: int) -> str:
    """The warning for ``n`` ops still open at the end of a history."""
    return f"{name}: {n} op(s) never completed (the run may have been cut short); they count as info"


def never_completed_ops(open_ops: dict[int, Any]) -> Iterator[Op]:
    """The ops still open at the end of a history, as info ops, by invoke index."""
    for p, inv in sorted(open_ops.items(), key=lambda pe: pe[1].index):
        yield Op(
            inv.index, p, inv.f, cast(str, inv.node), inv.value, "info", {}, inv.time, None, None,
            named_epoch(inv.f, "info", inv.value, {}),
        )


def read_history(source: str | os.PathLike[str] | Iterable[bytes | str], name: str | None = None) -> tuple[Header, list[Op], HistoryReader]:
    """Read a whole history into memory: (header, ops in completion order, reader)."""
    reader = HistoryReader(source, name)
    ops = list(reader.ops())
    return reader.header, ops, reader


#: how much of a history's end :func:`file_cut` reads to find its last line (a line is a few hundred bytes)
_TAIL_BYTES = 1 << 16


def file_cut(path: str | os.PathLike[str]) -> str | None:
    """Is a history file cut? Its line (:func:`~leasecheck.histories.rules.cut_reason`'s words), or None when whole.

    Read from the header and the file's end alone, without checking a single op: what a reader of run folders
    (``leasecheck summary``, the matrix) asks before it trusts a results.json that says ``valid``, since a history
    cut after its run was judged (a copy that stopped, a disk that filled) is never valid either. Raises ``OSError``
    and :class:`HistoryError` (no header) as the reader does.
    """
    name = str(path)
    with open(path, "rb") as f:
        header = parse_header(f.readline(), name)
        lines = 1 + sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        size = f.tell()
        f.seek(max(0, size - _TAIL_BYTES))
        tail = f.read()
    stripped = tail.rstrip(b"\n")
    trailing = len(tail) - len(stripped)
    body = stripped.rsplit(b"\n", 1)[-1]
    last = lines - trailing + 1 if trailing else lines + 1  # the number of the last line with text on it
    try:
        event = msgspec.json.decode(body)
    except msgspec.DecodeError:
        if not trailing:  # no "\n" and not complete JSON: where the writer stopped
            return cut_reason(name, header.end_marker, last, None, last)
        event = None  # a whole line that is no JSON is bad input: the reader says so, not this
    ended = isinstance(event, dict) and event.get("process") == NEMESIS and event.get("f") == HISTORY_END
    return cut_reason(name, header.end_marker, None, last if ended else None, last)
