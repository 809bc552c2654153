"""Streaming, validating reader for history format v1.

The reader is the gate between files written by anyone (our runner, another
team's harness, a hand-edited example) and the checker, which assumes every rule
of the format holds. So it checks every rule, and rejects the first broken one
with a single line naming the file, the line and what is wrong. It pairs invokes
with completions as it goes and hands out each :class:`Op` once it is complete,
so memory holds only the open operations, never the whole file.

Decoding uses msgspec's typed decoder: the per-event type checks run in C, which
is what lets a million-operation history be read in about a second.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

import msgspec

from leasecheck.histories.format import (
    DEFAULT_EFFECT_FENCE,
    DEFAULT_LEASE_EXPIRY,
    EFFECT_FENCES,
    FORMAT_NAME,
    FORMAT_VERSION,
    LEASE_EXPIRIES,
    NEMESIS,
    EffectFence,
    Event,
    Header,
    LeaseExpiry,
    Op,
    named_epoch,
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


class HistoryError(Exception):
    """A history breaks a rule of format v1; ``str()`` is the one-line report."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        super().__init__(message)
        self.source = source
        self.line = line
        self.message = message

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"


class _ClientEvent(msgspec.Struct, gc=False):
    """A client's event whose every field has the type format v1 asks for: the common line.

    msgspec checks these types in C (and hands back the one interned string of
    each ``type`` and ``f``), so the reader's Python loop is left with the rules
    a type cannot state. A line this rejects is decoded again as an :class:`Event`.
    """

    index: int
    time: int
    process: int
    type: EventType
    f: OpName
    node: str | None = None
    value: dict[str, Any] | None = None


_decode_client = msgspec.json.Decoder(_ClientEvent).decode
_decode_event = msgspec.json.Decoder(Event).decode
_decode_any = msgspec.json.Decoder().decode


def _is_int(x: Any) -> bool:
    return type(x) is int


def _is_number(x: Any) -> bool:
    return type(x) is int or type(x) is float


def _describe(e: msgspec.MsgspecError) -> str:
    """msgspec's message, phrased for a person reading one line of a file."""
    text = str(e)
    if text.startswith("JSON is malformed") or text.startswith("Input data was truncated"):
        return f"bad JSON ({text})"
    return text.replace("`$.", "`").replace("`$`", "the event")


def _complete_line(line: bytes | str) -> bytes:
    """A line given in memory is whole by definition (only files get cut short)."""
    b = line.encode() if isinstance(line, str) else line
    return b if b.endswith(b"\n") else b + b"\n"


def _parse_header(raw: bytes, source: str) -> Header:
    try:
        obj = _decode_any(raw)
    except msgspec.DecodeError as e:
        raise HistoryError(source, 1, f"missing header: bad JSON ({e})") from None
    if not isinstance(obj, dict):
        raise HistoryError(source, 1, "missing header: line 1 must be a JSON object")
    if obj.get("format") != FORMAT_NAME:
        if "index" in obj and "type" in obj:
            raise HistoryError(source, 1, "missing header: line 1 is an event")
        raise HistoryError(
            source, 1, f'missing header: "format" must be "{FORMAT_NAME}", not {obj.get("format")!r}'
        )
    if obj.get("version") != FORMAT_VERSION:
        raise HistoryError(
            source, 1, f"unsupported history version {obj.get('version')!r} (this reader knows 1)"
        )
    for key in ("ttl_ms", "clock_uncertainty_ms"):
        if key not in obj:
            raise HistoryError(source, 1, f'header lacks required "{key}"')
        v = obj[key]
        if not _is_number(v) or v < 0 or v != v or v == float("inf"):
            raise HistoryError(source, 1, f'header "{key}" must be a non-negative number, not {v!r}')
    fence = obj.get("effect_fence", DEFAULT_EFFECT_FENCE)
    if fence.__class__ is not str or fence not in EFFECT_FENCES:
        # the checker's stale-effect rule depends on it: guessing would judge by the wrong rule
        raise HistoryError(source, 1, f'header "effect_fence" must be "lease" or "token", not {fence!r}')
    expiry = obj.get("lease_expiry", DEFAULT_LEASE_EXPIRY)
    if expiry.__class__ is not str or expiry not in LEASE_EXPIRIES:
        # the timing kinds depend on it: guessing would judge a lock by a deadline it never promised
        raise HistoryError(source, 1, f'header "lease_expiry" must be "deadline" or "holder", not {expiry!r}')
    meta = {k: v for k, v in obj.items() if k not in _HEADER_KEYS}
    return Header(
        ttl_ms=obj["ttl_ms"],
        clock_uncertainty_ms=obj["clock_uncertainty_ms"],
        meta=meta,
        effect_fence=cast(EffectFence, fence),
        lease_expiry=cast(LeaseExpiry, expiry),
    )


#: the header keys the reader interprets; every other key is free metadata
_HEADER_KEYS = frozenset({"format", "version", "ttl_ms", "clock_uncertainty_ms", "effect_fence", "lease_expiry"})


def _check_invoke_value(ev: Event) -> str | None:
    """What is wrong with an invoke's value, or None."""
    v = ev.value
    if v is None:
        if ev.f in EPOCH_CARRIERS:
            return f'{ev.f} invoke needs a value with "epoch"'
        ev.value = {}
        return None
    if type(v) is not dict:
        return f"{ev.f} invoke value must be an object"
    if ev.f in EPOCH_CARRIERS:
        if "epoch" not in v:
            return f'{ev.f} invoke value lacks "epoch" (null for an unfenced backend)'
        e = v["epoch"]
        if e is not None and not _is_int(e):
            return f'{ev.f} "epoch" must be an integer or null, not {e!r}'
    return None


def _check_completion_value(ev: Event, f: str) -> str | None:
    """What is wrong with a completion's value, or None (normalises it to a dict)."""
    v = ev.value
    t = ev.type
    if t == "info":
        if type(v) is not dict:
            ev.value = {} if v is None else {"value": v}
        return None
    if v is None:
        v = ev.value = {}
    elif type(v) is not dict:
        return f"{f} {t} value must be an object"
    if t == "fail":
        r = v.get("reason")
        if r.__class__ is not str or r not in FAIL_REASONS:
            if r is None:
                return f'{f} fail value lacks "reason"'
            return f"unknown fail reason {r!r} (one of {', '.join(sorted(FAIL_REASONS))})"
        return None
    if f == "claim":
        if "epoch" not in v:
            return 'ok claim lacks "epoch" (null for an unfenced backend)'
        e = v["epoch"]
        if e is not None and not _is_int(e):
            return f'ok claim "epoch" must be an integer or null, not {e!r}'
    elif f == "read":
        s = v.get("status")
        if s.__class__ is not str or s not in READ_STATUSES:
            return f"ok read status must be one of {', '.join(sorted(READ_STATUSES))}, not {s!r}"
        e = v.get("epoch")
        if e is not None and not _is_int(e):
            return f'ok read "epoch" must be an integer or null, not {e!r}'
    return None


class HistoryReader:
    """Reads one history: ``header`` at once, then ``ops()`` streams operations.

    ``source`` is a path, or an iterable of lines (bytes or str) for histories
    built in memory. ``ops()`` yields each operation when its completion is read
    (so in completion order), then every operation still open at the end as
    ``info``. Nemesis events are kept in ``nemesis``; a truncated last line (a
    run that crashed mid-write) is dropped with a note in ``warnings``.
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
            self.header = _parse_header(first, self.name)
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
        self.warnings.append(f"{self.name}:{line}: truncated last line ignored (the run stopped mid-write)")

    def ops(self) -> Iterator[Op]:
        """Every client operation, validated; raises :class:`HistoryError` at the first bad line."""
        if self._consumed:
            raise RuntimeError("HistoryReader.ops() can be iterated only once")
        self._consumed = True
        open_ops: dict[int, Any] = {}
        yield from self._pairs(0, 0, open_ops, set(), None)
        if open_ops:
            self.warnings.append(_never_completed(self.name, len(open_ops)))
        yield from _never_completed_ops(open_ops)

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

        A chunk of a file (:class:`HistoryChunk`) starts with ``expected`` None
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
                        raise error(lineno, _describe(e)) from None
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
                            raise error(lineno, cast(str, _check_invoke_value(ev)))
                    elif v is None:
                        ev.value = {}
                    elif v.__class__ is not dict:
                        raise error(lineno, cast(str, _check_invoke_value(ev)))
                    open_ops[p] = ev
                    continue
                inv = open_ops.pop(p, None)
                if inv is None:
                    if p in retired:
                        raise error(lineno, f"process {p} completes an op after its info completion")
                    if orphans is None:
                        raise error(lineno, f"{typ} completion with no invoke: process {p} has no op outstanding")
                    problem = _check_completion_value(ev, ev.f)  # its invoke's f, unless the stitching finds them apart
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
                        raise error(lineno, cast(str, _check_completion_value(ev, f)))
                    if f == "claim" or f == "read":
                        if f == "claim":
                            bad = "epoch" not in v or ((ep := v["epoch"]) is not None and ep.__class__ is not int)
                        else:
                            s = v.get("status")
                            bad = (
                                s.__class__ is not str or s not in statuses
                                or ((ep := v.get("epoch")) is not None and ep.__class__ is not int)
                            )
                        if bad:
                            raise error(lineno, cast(str, _check_completion_value(ev, f)))
                        epoch = v.get("epoch")
                    else:
                        epoch = inv.value.get("epoch")
                    done: int | None = t
                elif typ == "fail":
                    if v.__class__ is not dict or (r := v.get("reason")).__class__ is not str or r not in reasons:
                        raise error(lineno, cast(str, _check_completion_value(ev, f)))
                    epoch = None if f == "claim" or f == "read" else inv.value.get("epoch")
                    done = t
                else:  # info: any value, kept as an object
                    if v.__class__ is not dict:
                        ev.value = {"value": v}
                    retired.add(p)
                    epoch = None if f == "claim" or f == "read" else inv.value.get("epoch")
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


def _never_completed(name: str, n: int) -> str:
    return f"{name}: {n} op(s) never completed (the run may have been cut short); they count as info"


def _never_completed_ops(open_ops: dict[int, Any]) -> Iterator[Op]:
    """The ops still open at the end of a history, as info ops, by invoke index."""
    for p, inv in sorted(open_ops.items(), key=lambda pe: pe[1].index):
        yield Op(
            inv.index, p, inv.f, cast(str, inv.node), inv.value, "info", {}, inv.time, None, None,
            named_epoch(inv.f, "info", inv.value, {}),
        )


class HistoryChunk(HistoryReader):
    """One byte range of a history file (whole lines, after the header), read by the same rules.

    A chunk does not know what came before it: which ops were open, which
    processes retired, what index and time to expect. So it checks every rule
    it can on its own lines, and keeps what only the chunks before it can
    judge: its first index and time, the completions whose invoke is not in it
    (``orphans``), the first invoke of each process (that process must have
    been idle), and what it leaves open and retired. :class:`Stitch` joins
    the chunks of a file, in order, and says whether they make a history that
    :class:`HistoryReader` accepts; whenever it cannot tell, the caller reads
    the file in one pass to learn which line is wrong and why.
    """

    def __init__(self, path: str | os.PathLike[str], start: int, end: int, name: str | None = None) -> None:
        self.name = name or str(path)
        self._file = None
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        self._lines = iter(io.BytesIO(data))
        self.warnings = []
        self.nemesis = []
        self.events = 0
        self.last_time = 0
        self._consumed = False
        #: index and time of the chunk's first event (None: it has none)
        self.first_index: int | None = None
        self.first_time = 0
        self.last_index = -1
        self.lines = 0
        self.truncated_at: int | None = None
        self.orphans: list[Any] = []
        self.open: dict[int, Any] = {}
        self.retired: set[int] = set()
        #: every process whose first event here is an invoke: that invoke's index
        self.first_invokes: dict[int, int] = {}

    def _first(self, ev: Any) -> None:
        self.first_index = ev.index
        self.first_time = ev.time

    def _truncated(self, line: int) -> None:
        self.truncated_at = line

    def _ended(self, expected: int | None, last_time: float, lines: int) -> None:
        self.events = 0 if expected is None or self.first_index is None else expected - self.first_index
        self.last_index = -1 if expected is None else expected - 1
        self.last_time = int(last_time) if self.first_index is not None else 0
        self.lines = lines

    def ops(self) -> Iterator[Op]:
        """The ops invoked and completed within the chunk, in completion order; raises ``HistoryError`` on a bad line."""
        if self._consumed:
            raise RuntimeError("HistoryChunk.ops() can be iterated only once")
        self._consumed = True
        first = self.first_invokes
        for op in self._pairs(None, -math.inf, self.open, self.retired, self.orphans):
            if op.process not in first:  # a process's ops complete in order: its first is its first invoke
                first[op.process] = op.index
            yield op
        for p, inv in self.open.items():
            first.setdefault(p, inv.index)

    def summary(self) -> ChunkSummary:
        """What :class:`Stitch` needs of this chunk (after ``ops()`` ran to its end)."""
        return ChunkSummary(
            self.first_index, self.first_time, self.last_index, self.last_time, self.events, self.lines,
            self.truncated_at, self.orphans, self.open, self.retired, self.first_invokes, self.nemesis,
        )


@dataclass(slots=True)
class ChunkSummary:
    """What one chunk leaves for the stitching: its ends, its loose ops, and its nemesis events."""

    first_index: int | None
    first_time: int
    last_index: int
    last_time: int
    events: int
    lines: int
    truncated_at: int | None
    orphans: list[Any]
    open: dict[int, Any]
    retired: set[int]
    first_invokes: dict[int, int]
    nemesis: list[Event]


class ChunksDisagree(Exception):
    """The chunks of a file do not join into a valid history: read it in one pass to learn where and why."""


class Stitch:
    """Joins a file's chunks, in order, into what :meth:`HistoryReader.ops` gives for the whole file.

    :meth:`add` checks the rules that span chunks (index and time carry on,
    a completion's invoke is open in an earlier chunk with the same ``f`` and
    node, a process invokes only when idle and never after it retired) and
    returns the ops that span chunks; :meth:`finish` returns the ops never
    completed. ``warnings``, ``nemesis`` and ``events`` end as the reader's.
    """

    def __init__(self, name: str, header_lines: int = 1) -> None:
        self.name = name
        self.warnings: list[str] = []
        self.nemesis: list[Event] = []
        self.events = 0
        self.last_time = 0
        self._lines = header_lines
        self._open: dict[int, Any] = {}
        self._retired: set[int] = set()

    def add(self, chunk: ChunkSummary) -> list[Op]:
        """The ops completed in ``chunk`` whose invoke is in an earlier one; raises :class:`ChunksDisagree`."""
        if chunk.truncated_at is not None:
            self.warnings.append(f"{self.name}:{self._lines + chunk.truncated_at}: truncated last line ignored (the run stopped mid-write)")
        self._lines += chunk.lines
        if chunk.first_index is None:
            return []
        if chunk.first_index != self.events or chunk.first_time < self.last_time:
            raise ChunksDisagree(f"chunk starts at index {chunk.first_index}, time {chunk.first_time}")
        spanning: list[Op] = []
        open_, retired = self._open, self._retired
        for ev in chunk.orphans:
            p = ev.process
            inv = open_.pop(p, None)
            first = chunk.first_invokes.get(p)
            if inv is None or (first is not None and first < ev.index):
                raise ChunksDisagree(f"completion {ev.index} of process {p} has no invoke")
            if ev.f != inv.f or (ev.node is not None and ev.node != inv.node):
                raise ChunksDisagree(f"completion {ev.index} does not match invoke {inv.index}")
            done = None if ev.type == "info" else ev.time
            spanning.append(Op(inv.index, p, inv.f, inv.node, inv.value, ev.type, ev.value, inv.time, done, ev.index,
                               named_epoch(inv.f, ev.type, inv.value, ev.value)))
        for p in chunk.first_invokes:
            if p in open_ or p in retired:
                raise ChunksDisagree(f"process {p} invokes while busy or retired")
        open_.update(chunk.open)
        retired |= chunk.retired
        self.events = chunk.last_index + 1
        self.last_time = chunk.last_time
        self.nemesis.extend(chunk.nemesis)
        return spanning

    def finish(self) -> list[Op]:
        """The ops never completed, as info ops (the reader's order), with the reader's warning."""
        if self._open:
            self.warnings.append(_never_completed(self.name, len(self._open)))
        return list(_never_completed_ops(self._open))


def read_history(source: str | os.PathLike[str] | Iterable[bytes | str], name: str | None = None) -> tuple[Header, list[Op], HistoryReader]:
    """Read a whole history into memory: (header, ops in completion order, reader)."""
    reader = HistoryReader(source, name)
    ops = list(reader.ops())
    return reader.header, ops, reader
