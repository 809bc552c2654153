"""A run's refusals by reason, and the ones a fault explains: what ``outcomes 844 ok, 156 fail`` leaves out.

``held``, ``stale``, ``expired`` and ``terminal`` are the protocol doing its job on
the workload's own races; ``unavailable`` and ``error`` are not, and a run under
store faults has hundreds of them that a reader must not mistake for the backend's
doing. So each of those whose op a fault window hit (the store's, hitting every
process, or one naming the op's process; :func:`~leasecheck.verdict.attribution.fault_victims`'s
windows) is counted under that fault: ``unavailable 36 (30 while kill-store killed
the store)``. A store's ``error`` that says the node has no record (``no such node``)
after a fault of the whole store (a failover, a store killed) is that fault's doing
too, long after its window closed: ``error 659 (659 after failover lost the node's
record)``. Counted once, by the checker thread that follows the run, into
``results.json``'s ``run.refusals``; the terminal and the report both word it with
:func:`refusals_text`, so they say the same numbers.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any

from leasecheck.checker.attribution import FaultWindow
from leasecheck.histories import Op

#: refusals that are not the workload's own: a fault that hit the op explains them
FAULT_REASONS = ("unavailable", "error")
#: the start of an ``error`` refusal's message that says the node has no record in the store (every reference
#: backend's wording): the record was lost, by a failover or a crash that kept no durable copy
NO_RECORD = "no such node"
#: what a fault of the whole store did to such a node, as the refusals say it
LOST_RECORD = "lost the node's record"
#: reasons in the order they are said (the workload's own first); any other after them, by name
_ORDER = ("held", "stale", "expired", "terminal", "not-owner", *FAULT_REASONS)


class Refusals:
    """Counts every ``fail`` op as it comes (:meth:`add`); :meth:`to_json` once the fault windows are known.

    Of a refusal a fault may explain only its interval and process are kept (five integers), so a soak under a
    long store fault stays small."""

    def __init__(self) -> None:
        self.reasons: Counter[str] = Counter()
        self.by_f: dict[str, Counter[str]] = {}
        #: invoke, complete, process, reason's index, f's index, and whether it says the node has no record (1): for
        #: each FAULT_REASONS refusal
        self._kept = array("q")
        self._fs: list[str] = []

    def add(self, op: Op) -> None:
        if op.type != "fail":
            return
        reason = str(op.result.get("reason", "?"))
        self.reasons[reason] += 1
        self.by_f.setdefault(reason, Counter())[op.f] += 1
        if reason in FAULT_REASONS:
            if op.f not in self._fs:
                self._fs.append(op.f)
            end = op.invoke_time if op.complete_time is None else op.complete_time
            no_record = str(op.result.get("message", "")).startswith(NO_RECORD)
            self._kept.extend((op.invoke_time, end, op.process, FAULT_REASONS.index(reason), self._fs.index(op.f), no_record))

    def to_json(self, windows: Sequence[FaultWindow]) -> dict[str, Any]:
        """``{"total", "reasons": {reason: n}, "ops": {reason: {f: n}}, "explained": [{"reason", "fault", "did",
        "count", "ops": {f: n}}]}``: each refusal of :data:`FAULT_REASONS` under the first fault window that hit its
        process while it was in flight, or (one that says the node has no record) under the latest fault of the whole
        store before it (``"after": true``)."""
        explained: dict[tuple[str, str, str, bool], Counter[str]] = {}
        kept = self._kept
        for i in range(0, len(kept), 6):
            start, end, process, reason, f, no_record = kept[i:i + 6]
            key = next(((FAULT_REASONS[reason], w.fault, w.did_all if w.everyone else f"had its worker {w.did}", False)
                        for w in windows if w.start <= end and w.until >= start and (w.everyone or process in w.victims)), None)
            if key is None and no_record:
                before = [w for w in windows if w.everyone and w.start <= start]
                key = (FAULT_REASONS[reason], max(before, key=lambda w: w.start).fault, LOST_RECORD, True) if before else None
            if key is not None:
                explained.setdefault(key, Counter())[self._fs[f]] += 1
        return {
            "total": sum(self.reasons.values()),
            "reasons": {r: self.reasons[r] for r in _ordered(self.reasons)},
            "ops": {r: dict(self.by_f[r]) for r in _ordered(self.reasons)},
            "explained": [{"reason": r, "fault": fault, "did": did, "count": sum(fs.values()), "ops": dict(fs),
                           **({"after": True} if after else {})} for (r, fault, did, after), fs in explained.items()],
        }


def _ordered(reasons: Counter[str]) -> list[str]:
    return [r for r in _ORDER if reasons[r]] + sorted(r for r in reasons if r not in _ORDER and reasons[r])


def refusals_text(obj: Any) -> str | None:
    """``156: held 100, stale 20, unavailable 36 (30 while kill-store killed the store)`` from ``run.refusals``
    (None when it is not one); ``none`` when nothing was refused."""
    if not isinstance(obj, dict) or not isinstance(obj.get("reasons"), dict) or not isinstance(obj.get("total"), int):
        return None
    if not obj["total"]:
        return "none"
    why: dict[str, list[str]] = {}
    for e in obj.get("explained") or []:
        if isinstance(e, dict) and isinstance(e.get("count"), int):
            when = "after" if e.get("after") else "while"
            why.setdefault(str(e.get("reason")), []).append(f"{e['count']:,} {when} {e.get('fault')} {e.get('did')}"
                                                            if e.get("did") else f"{e['count']:,} {when} {e.get('fault')}")
    parts = [f"{r} {n:,}" + (f" ({', '.join(why[r])})" if r in why else "")
             for r, n in obj["reasons"].items() if isinstance(n, int)]
    return f"{obj['total']:,}: {', '.join(parts)}"


__all__ = ["FAULT_REASONS", "Refusals", "refusals_text"]
