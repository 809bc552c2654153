"""The vocabulary of history format v1: header, raw events, and paired operations."""

from __future__ import annotations

from typing import Any

import msgspec

FORMAT_NAME = "leasecheck-history"
FORMAT_VERSION = 1

#: the ``process`` of every fault event
NEMESIS = "nemesis"

#: client operations and the meaning of their values (DESIGN.md table)
CLIENT_FUNCTIONS = frozenset({"claim", "renew", "effect", "commit", "release", "read"})
#: client operations whose invoke value carries the epoch (or the unfenced token)
EPOCH_CARRIERS = frozenset({"renew", "effect", "commit", "release"})
EVENT_TYPES = frozenset({"invoke", "ok", "fail", "info"})
FAIL_REASONS = frozenset(
    {"held", "terminal", "stale", "expired", "not-owner", "unavailable", "error"}
)
READ_STATUSES = frozenset({"READY", "RUNNING", "SUCCEEDED"})


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

    @property
    def epoch(self) -> int | None:
        """The epoch this op names: returned by an ok claim or read, else carried."""
        if self.f == "claim" or self.f == "read":
            return self.result.get("epoch")
        return self.value.get("epoch")

    @property
    def token(self) -> Any:
        """The opaque lease token of an unfenced backend (None when fenced)."""
        if self.f == "claim":
            return self.result.get("token")
        return self.value.get("token")
