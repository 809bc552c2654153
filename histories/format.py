"""History format v1's records: the header, raw events, and paired operations.

The words they hold (op names, reasons, statuses) are declared in
:mod:`leasecheck.histories.vocabulary`.
"""

from __future__ import annotations

from typing import Any

import msgspec

FORMAT_NAME = "leasecheck-history"
FORMAT_VERSION = 1

#: the ``process`` of every fault event
NEMESIS = "nemesis"


class Header(msgspec.Struct, frozen=True):
    """Line 1 of a history: what the checker needs to judge time, plus free metadata."""

    ttl_ms: float
    clock_uncertainty_ms: float
    meta: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        """The header line as written: metadata first, then the required keys."""
        return {
            **self.meta,
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "ttl_ms": self.ttl_ms,
            "clock_uncertainty_ms": self.clock_uncertainty_ms,
        }


class Event(msgspec.Struct, gc=False):
    """One line after the header, as decoded (types checked by msgspec, in C)."""

    index: int
    time: int
    process: int | str
    type: str
    f: str
    node: str | None = None
    value: Any = None


class Op(msgspec.Struct, gc=False):
    """One client operation: its invoke paired with its completion.

    ``index`` is the invoke event's index: the name by which every anomaly cites
    the operation. ``type`` is the completion's type; an invoke that never
    completed is an ``info`` op with ``complete_time`` None, like an explicit
    ``info`` completion (its effect may land at any later time, or never).
    """

    index: int
    process: int
    f: str
    node: str
    value: dict[str, Any]
    type: str
    result: dict[str, Any]
    invoke_time: int
    complete_time: int | None
    complete_index: int | None = None
    #: the epoch this op names: returned by an ok claim or read, else carried
    #: by its invoke value (see :func:`named_epoch`); None when unfenced
    epoch: Any = None

    @property
    def token(self) -> Any:
        """The opaque lease token of an unfenced backend (None when fenced)."""
        if self.f == "claim":
            return self.result.get("token")
        return self.value.get("token")


def named_epoch(f: str, type_: str, value: dict[str, Any], result: dict[str, Any]) -> Any:
    """The epoch an op names: an ok claim or read returns it; every other op carries it."""
    if f == "claim" or f == "read":
        return result.get("epoch") if type_ == "ok" else None
    return value.get("epoch")


def make_op(
    index: int,
    process: int,
    f: str,
    node: str,
    value: dict[str, Any],
    type_: str,
    result: dict[str, Any],
    invoke_time: int,
    complete_time: int | None,
    complete_index: int | None = None,
) -> Op:
    """An :class:`Op` with its derived ``epoch`` filled in (for tests and tools)."""
    return Op(
        index, process, f, node, value, type_, result, invoke_time, complete_time, complete_index,
        named_epoch(f, type_, value, result),
    )
