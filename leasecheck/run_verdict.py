"""The run verdict (DESIGN.md "Run verdict"): did the run test anything at all?

The checker says whether a history is consistent; an empty history is
consistent, so a run that never claimed, never contended or never suffered the
faults it asked for would pass a CI gate while testing nothing. Like Jepsen's
``stats`` checker, the run is ``unknown`` unless its history holds:

* an ok ``claim``, ``renew``, ``effect`` and ``commit``;
* a contended claim: one refused ``held``, or one granted over an earlier
  lease that was neither given back (ok or info release) nor committed;
* for every fault of ``--nemesis``, a start and a heal, as nemesis events.

Faults are told apart by the ``"fault"`` key the schedule puts in every event
value; a history without it is read by event name alone. A killed worker cannot
be healed, only replaced: the catalogue's ``kill`` row names ``start`` as its
heal, and the heal that counts is the runner's ``start`` of a replacement whose
``replaces`` is a process the kill named as its victim (a worker that crashed
by itself is replaced too, but that is no heal of a kill).

:class:`Evidence` is fed raw events in file order, so the runner can watch a
history grow (:class:`HistoryTail`) with the same code that judges it at the end.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from leasecheck.checker.verdict import Validity
from leasecheck.histories.format import NEMESIS, Event
from leasecheck.nemesis.catalogue import FaultKind

#: the ops a run must have seen succeed at least once
PROTOCOL_OPS = ("claim", "renew", "effect", "commit")


@dataclass
class Evidence:
    """What a history shows the run exercised, accumulated event by event."""

    ok: Counter[str] = field(default_factory=Counter)
    #: claims refused ``held``
    held: int = 0
    #: claims granted while an earlier ok claim of the node was neither released nor committed
    takeovers: int = 0
    #: every nemesis event, as (f, value)
    nemesis: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _pending: dict[Any, tuple[str, str | None, dict[str, Any]]] = field(default_factory=dict)
    #: per node, the lease (epoch, or token when unfenced) of the latest ok claim not given back
    _holder: dict[str, Any] = field(default_factory=dict)

    def feed(self, ev: Event) -> None:
        if ev.process == NEMESIS:
            self.nemesis.append((ev.f, ev.value if isinstance(ev.value, dict) else {}))
            return
        if ev.type == "invoke":
            self._pending[ev.process] = (ev.f, ev.node, ev.value if isinstance(ev.value, dict) else {})
            return
        f, node, invoked = self._pending.pop(ev.process, (ev.f, ev.node, {}))
        value = ev.value if isinstance(ev.value, dict) else {}
        if node is None:
            return
        if ev.type == "ok":
            self.ok[f] += 1
            if f == "claim":
                if node in self._holder:
                    self.takeovers += 1
                self._holder[node] = _lease(value)
            elif f == "commit":
                self._holder.pop(node, None)
        elif ev.type == "fail" and f == "claim" and value.get("reason") == "held":
            self.held += 1
        if f == "release" and ev.type in ("ok", "info") and self._holder.get(node) == _lease(invoked):
            del self._holder[node]


def _lease(value: dict[str, Any]) -> Any:
    """A lease's identity: its epoch, or its token when the backend has no fencing token."""
    epoch = value.get("epoch")
    return epoch if epoch is not None else ("token", str(value.get("token")))


def _of(kind: FaultKind, value: dict[str, Any]) -> bool:
    """Was this event written for ``kind``? (Histories without the ``fault`` key: any event of its name.)"""
    return "fault" not in value or value["fault"] == kind.name


def fault_gaps(evidence: Evidence, kinds: Sequence[FaultKind]) -> list[str]:
    """What is missing for each requested fault: ``"pause never started"``, ``"kill never healed"``."""
    gaps = []
    for kind in kinds:
        start_f, heal_f = kind.events
        starts = [v for f, v in evidence.nemesis if f == start_f and _of(kind, v)]
        if not starts:
            gaps.append(f"{kind.name} never started")
            continue
        victims = {str(p) for v in starts for p in v.get("victims", [])}
        healed = False
        for f, v in evidence.nemesis:
            if f != heal_f or not _of(kind, v):
                continue
            if "fault" in v or "replaces" not in v or str(v["replaces"]) in victims:
                healed = True
                break
        if not healed:
            gaps.append(f"{kind.name} never healed")
    return gaps


def gaps(evidence: Evidence, kinds: Sequence[FaultKind]) -> list[str]:
    """Everything the run verdict finds missing, in words; empty when the run tested the protocol."""
    missing = [f"no ok {f}" for f in PROTOCOL_OPS if not evidence.ok[f]]
    if not evidence.held and not evidence.takeovers:
        missing.append("no contended claim (none refused held, none granted over an earlier lease)")
    return missing + fault_gaps(evidence, kinds)


def run_verdict(checked: Validity, evidence: Evidence, kinds: Sequence[FaultKind]) -> tuple[Validity, str | None]:
    """(validity, reason) of a run from the checker's validity and the history's evidence.

    An anomaly wins (a vacuous but anomalous run is invalid: the anomaly is proven);
    a vacuous run is ``unknown`` with the reason naming what is missing, never valid.
    """
    missing = gaps(evidence, kinds)
    if checked is False:
        return False, None
    if missing:
        return "unknown", "the run did not test enough: " + "; ".join(missing)
    if checked is True:
        return True, None
    return "unknown", "the linearizability search ran out of its budget"


class HistoryTail:
    """Feeds :class:`Evidence` from a history file as it grows (whole lines only; the header skipped)."""

    def __init__(self, path: str | os.PathLike[str], evidence: Evidence | None = None) -> None:
        self.path = path
        self.evidence = evidence if evidence is not None else Evidence()
        self._offset = 0
        self._header_seen = False
        self._decode = msgspec.json.Decoder(Event).decode

    def poll(self) -> Evidence:
        """Read what was appended since the last poll."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return self.evidence
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            if not self._header_seen:
                self._header_seen = True
                continue
            try:
                self.evidence.feed(self._decode(line))
            except msgspec.MsgspecError:
                continue  # not an event (the checker reports bad lines; here they prove nothing)
        return self.evidence


def evidence_of(lines: Iterable[bytes]) -> Evidence:
    """The evidence in a whole history's lines (for tests and tools)."""
    decode = msgspec.json.Decoder(Event).decode
    evidence = Evidence()
    for i, line in enumerate(lines):
        if i == 0 or not line.strip():
            continue
        try:
            evidence.feed(decode(line))
        except msgspec.MsgspecError:
            continue
    return evidence
