"""A history written by hand, op by op at the times given: the coverage tests' way of reaching one situation exactly.

Shared by the coverage tests of every tier (tests/detection/test_coverage.py, tests/pure/verdict/): each writes the
few ops that reach a situation, and the near misses one nanosecond on the wrong side of a bound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from leasecheck.checker.coverage import Coverage
from leasecheck.verdict.run_verdict import history_coverage

MS = 1_000_000
#: the histories' ttl and clock uncertainty, ms
TTL, UNCERTAINTY = 100, 10


class History:
    """A history written by hand: each op at the times given (ns), events sorted by time on the way out."""

    def __init__(self, ttl_ms: float = TTL, uncertainty_ms: float = UNCERTAINTY, **meta: Any) -> None:
        self.header = {"format": "leasecheck-history", "version": 1, "ttl_ms": ttl_ms, "clock_uncertainty_ms": uncertainty_ms, **meta}
        self.events: list[tuple[int, int, dict[str, Any]]] = []

    def _add(self, t: int, ev: dict[str, Any]) -> None:
        self.events.append((t, len(self.events), ev))

    def op(self, process: int, f: str, start: int, end: int | None, typ: str = "ok", value: dict[str, Any] | None = None,
           result: dict[str, Any] | None = None, node: str = "n") -> History:
        """One op invoked at ``start`` and completed ``typ`` at ``end`` (None: never completed)."""
        self._add(start, {"process": process, "type": "invoke", "f": f, "node": node, "value": value or {}})
        if end is not None:
            self._add(end, {"process": process, "type": typ, "f": f, "node": node, "value": result or {}})
        return self

    def claim(self, process: int, start: int, end: int | None, epoch: int | None = None, token: str | None = None,
              typ: str = "ok", node: str = "n") -> History:
        result = {"epoch": epoch, "token": token} if typ == "ok" else ({"reason": "held"} if typ == "fail" else {})
        return self.op(process, "claim", start, end, typ, {"owner": f"w{process}"}, result, node)

    def of(self, process: int, f: str, start: int, end: int | None, epoch: int | None, typ: str = "ok",
           token: str | None = None, node: str = "n") -> History:
        """An op of the lease ``epoch`` (or ``token``): renew, effect, commit, release; or a read."""
        value: dict[str, Any] = {} if f == "read" else {"epoch": epoch, "token": token}
        result: dict[str, Any] = {"reason": "stale"} if typ == "fail" else {}
        if f == "read" and typ == "ok":
            result = {"status": "RUNNING", "epoch": epoch}
        return self.op(process, f, start, end, typ, value, result, node)

    def nemesis(self, t: int, f: str, **value: Any) -> History:
        self._add(t, {"process": "nemesis", "type": "info", "f": f, "value": value})
        return self

    def lines(self) -> list[bytes]:
        out = [msgspec.json.encode(self.header)]
        for i, (t, _, ev) in enumerate(sorted(self.events, key=lambda e: (e[0], e[1]))):
            out.append(msgspec.json.encode({"index": i, "time": t, **ev}))
        return out

    def coverage(self) -> Coverage:
        return history_coverage(self.lines())[1]

    def write(self, path: Path) -> Path:
        path.write_bytes(b"\n".join(self.lines()) + b"\n")
        return path
