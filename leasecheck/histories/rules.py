"""The rules of format v1 that a type cannot state, one function each, and the one error that names a broken rule.

Why apart from the reader's loop (:mod:`leasecheck.histories.reader`): the loop
checks the common line inline, for speed, and calls these only to say what is
wrong (or to judge a line the fast path could not), so they are the words of
every rejection, shared by the one-pass reader, a chunk of a file
(:mod:`leasecheck.histories.chunks`) and the tests' reference reader. The header's
rules are here too: it is read once, by the same rules, whoever reads the events.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec

from leasecheck.histories.format import (
    DEFAULT_EFFECT_FENCE,
    DEFAULT_LEASE_EXPIRY,
    EFFECT_FENCES,
    END_MARKER,
    FORMAT_NAME,
    FORMAT_VERSION,
    LEASE_EXPIRIES,
    EffectFence,
    Event,
    Header,
    LeaseExpiry,
)
from leasecheck.histories.vocabulary import EPOCH_CARRIERS, FAIL_REASONS, READ_STATUSES

_decode_any = msgspec.json.Decoder().decode


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


def _is_int(x: Any) -> bool:
    return type(x) is int


def _is_number(x: Any) -> bool:
    return type(x) is int or type(x) is float


def describe(e: msgspec.MsgspecError) -> str:
    """msgspec's message, phrased for a person reading one line of a file."""
    text = str(e)
    if text.startswith("JSON is malformed") or text.startswith("Input data was truncated"):
        return f"bad JSON ({text})"
    return text.replace("`$.", "`").replace("`$`", "the event")


def parse_header(raw: bytes, source: str) -> Header:
    """The header line, every rule checked; raises :class:`HistoryError` naming line 1."""
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
        raise HistoryError(source, 1, f'header "lease_expiry" must be "deadline", "holder" or "queue", not {expiry!r}')
    promised = obj.get(END_MARKER, False)
    if promised.__class__ is not bool:
        # a promise the reader cannot read would either excuse a cut history or condemn a whole one
        raise HistoryError(source, 1, f'header "{END_MARKER}" must be true or false, not {promised!r}')
    meta = {k: v for k, v in obj.items() if k not in HEADER_KEYS}
    return Header(
        ttl_ms=obj["ttl_ms"],
        clock_uncertainty_ms=obj["clock_uncertainty_ms"],
        meta=meta,
        effect_fence=cast(EffectFence, fence),
        lease_expiry=cast(LeaseExpiry, expiry),
        end_marker=promised,
    )


#: the header keys the reader interprets; every other key is free metadata
HEADER_KEYS = frozenset({"format", "version", "ttl_ms", "clock_uncertainty_ms", "effect_fence", "lease_expiry", END_MARKER})


def cut_reason(source: str, promised: bool, cut_line: int | None, end_line: int | None, last_line: int) -> str | None:
    """The one line that says a history was cut, naming the file and the line, or None when it ends whole.

    ``cut_line``: the last line, cut mid-write (no ``\\n``, not complete JSON); ``end_line``: the line of its
    ``history-end`` event, if any; ``promised``: the header's ``end_marker``; ``last_line``: the file's last
    line. A cut line wins (it is where the writer stopped); else a promised end that never came is named at the
    last line there is. Shared by the one-pass reader and the stitching of chunks, so both say the same words.
    """
    if cut_line is not None:
        return f"{source}:{cut_line}: the last line is cut (the writer stopped mid-write): a cut history is never valid"
    if promised and end_line is None:
        return (f"{source}:{last_line}: the history ends without its history-end event (line 1 promises one, "
                f'"{END_MARKER}": true): its writer never finished it, and a cut history is never valid')
    return None


def check_invoke_value(ev: Event) -> str | None:
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


def check_completion_value(ev: Event, f: str) -> str | None:
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
    elif f == "read-resource":
        return check_resource_value(v)
    return None


def check_resource_value(v: dict[str, Any]) -> str | None:
    """What is wrong with an ok ``read-resource`` value (``{"fence": f, "accepted": [...]}``), or None.

    The resource kinds compare every entry's epoch (or token) and payload with the effect ops, so an entry
    the checker cannot read would be a guess: rejected, naming the entry.
    """
    fence = v.get("fence")
    if fence is not None and not _is_int(fence):
        return f'ok read-resource "fence" must be an integer or null, not {fence!r}'
    if "accepted" not in v:
        return 'ok read-resource lacks "accepted" (the effects the resource accepted, oldest first; [] for none)'
    acc = v["accepted"]
    if type(acc) is not list:
        return f'ok read-resource "accepted" must be a list, not {acc!r}'
    for i, entry in enumerate(acc):
        if type(entry) is not dict:
            return f"ok read-resource accepted[{i}] must be an object, not {entry!r}"
        if "epoch" not in entry:
            return f'ok read-resource accepted[{i}] lacks "epoch" (null for an unfenced backend)'
        e = entry["epoch"]
        if e is not None and not _is_int(e):
            return f'ok read-resource accepted[{i}] "epoch" must be an integer or null, not {e!r}'
        p = entry.get("payload")
        if type(p) is not str:
            return f'ok read-resource accepted[{i}] "payload" must be a string, not {p!r}'
    return None
