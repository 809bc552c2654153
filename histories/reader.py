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

import os
from collections.abc import Iterable, Iterator
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
from leasecheck.histories.vocabulary import CLIENT_FUNCTIONS, EPOCH_CARRIERS, EVENT_TYPES, FAIL_REASONS, READ_STATUSES


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

    def ops(self) -> Iterator[Op]:
        """Every client operation, validated; raises :class:`HistoryError` at the first bad line."""
        if self._consumed:
            raise RuntimeError("HistoryReader.ops() can be iterated only once")
        self._consumed = True
        decode = _decode_event
        open_ops: dict[int, Event] = {}
        retired: set[int] = set()
        expected = 0
        last_time = 0
        lineno = 1
        functions = CLIENT_FUNCTIONS
        error = self._error
        try:
            for raw in self._lines:
                lineno += 1
                try:
                    ev = decode(raw)
                except msgspec.MsgspecError as e:
                    if not raw.strip():
                        continue
                    if not raw.endswith(b"\n") and not isinstance(e, msgspec.ValidationError):
                        self.warnings.append(
                            f"{self.name}:{lineno}: truncated last line ignored (the run stopped mid-write)"
                        )
                        break
                    raise error(lineno, _describe(e)) from None
                if ev.index != expected:
                    if ev.index < expected:
                        raise error(lineno, f"index {ev.index} repeats or goes back (expected {expected})")
                    raise error(lineno, f"index gap: {ev.index} after {expected - 1} (expected {expected})")
                expected += 1
                t = ev.time
                if t < last_time:
                    raise error(lineno, f"time goes backwards: {t} ns after {last_time} ns")
                last_time = t
                p = ev.process
                if isinstance(p, str):
                    if p != NEMESIS:
                        raise error(lineno, f'process must be an integer or "nemesis", not {p!r}')
                    if ev.type not in EVENT_TYPES:
                        raise error(lineno, f"unknown type {ev.type!r} (invoke, ok, fail or info)")
                    self.nemesis.append(ev)
                    continue
                typ = ev.type
                if typ == "invoke":
                    if ev.f not in functions:
                        raise error(lineno, f"unknown f {ev.f!r} (one of {', '.join(sorted(functions))})")
                    if not ev.node or ev.node.__class__ is not str:
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
                    problem = _check_invoke_value(ev)
                    if problem:
                        raise error(lineno, problem)
                    open_ops[p] = ev
                elif typ == "ok" or typ == "fail" or typ == "info":
                    inv = open_ops.pop(p, None)
                    if inv is None:
                        if p in retired:
                            raise error(lineno, f"process {p} completes an op after its info completion")
                        raise error(lineno, f"{typ} completion with no invoke: process {p} has no op outstanding")
                    if ev.f != inv.f:
                        raise error(lineno, f"completion f {ev.f!r} does not match its invoke's {inv.f!r} (op {inv.index})")
                    if ev.node is not None and ev.node != inv.node:
                        raise error(
                            lineno, f"completion node {ev.node!r} does not match its invoke's {inv.node!r} (op {inv.index})"
                        )
                    problem = _check_completion_value(ev, inv.f)
                    if problem:
                        raise error(lineno, problem)
                    if typ == "info":
                        retired.add(p)
                        done = None
                    else:
                        done = t
                    f = inv.f
                    if f == "claim" or f == "read":
                        epoch = ev.value.get("epoch") if typ == "ok" else None
                    else:
                        epoch = inv.value.get("epoch")
                    # the invoke's node was checked to be a non-empty str when it was read
                    yield Op(inv.index, p, f, cast(str, inv.node), inv.value, typ, ev.value, inv.time, done, ev.index, epoch)
                else:
                    raise error(lineno, f"unknown type {typ!r} (invoke, ok, fail or info)")
        except OSError as e:
            raise error(lineno, f"cannot read: {e}") from None
        finally:
            self.events = expected
            self.last_time = last_time
            self.close()
        if open_ops:
            self.warnings.append(
                f"{self.name}: {len(open_ops)} op(s) never completed (the run may have been cut short); "
                "they count as info"
            )
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
