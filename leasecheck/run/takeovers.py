"""What the harness knows of each node's leases as the history is written: who holds
what, and how far a newer holder has got. It lets the workload reach the protocol's
dangerous interleavings on purpose instead of by luck.

A zombie (a worker whose lease was taken over while it stalled) is worth most when it
acts at a chosen moment relative to the takeover: before the new holder's first
effect, while the new holder runs, or after it ended (the phases of
:mod:`leasecheck.checker.coverage`). Sleeping and hoping reaches the first phase
almost never; so a stalled worker asks the hub to wake it when its node reaches a
phase, and the hub answers from the very events it records. The same bookkeeping
tells the queue when a holder went silent (its node is delivered again at once, as a
queue whose visibility a heartbeat extends would), and tells a fault which workers
hold a lease right now.

Everything here is fed by the recorder's thread, in history order, and is a pure
function of the events fed so far.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from leasecheck.histories.format import lease_key

#: the moments relative to a takeover that a zombie can ask to be woken at
Phase = Literal["before-new-effect", "while-new-runs", "after-new-ends"]
PHASES: tuple[Phase, ...] = ("before-new-effect", "while-new-runs", "after-new-ends")

#: what the hub answers a zombie's wait: its phase is here, was missed, or never came in time
Wake = Literal["reached", "passed", "timeout"]


@dataclass
class _Lease:
    """One granted lease of a node, and how far its holder has got."""

    key: Any
    process: int
    effect_invoked: bool = False
    end_invoked: bool = False
    ended: bool = False


@dataclass
class NodeLeases:
    """The leases of one node in grant order (ok claims as they completed)."""

    leases: list[_Lease] = field(default_factory=list)

    def find(self, key: Any) -> _Lease | None:
        for lease in reversed(self.leases):
            if lease.key == key:
                return lease
        return None

    def phase_of(self, key: Any, phase: Phase) -> Wake | None:
        """Has the node reached ``phase`` relative to the newest lease granted after ``key``'s? None: not yet."""
        mine = next((i for i in range(len(self.leases) - 1, -1, -1) if self.leases[i].key == key), None)
        if mine is None or mine == len(self.leases) - 1:
            return None  # no newer lease yet
        new = self.leases[-1]
        if phase == "before-new-effect":
            return "passed" if new.effect_invoked or new.end_invoked else "reached"
        if phase == "while-new-runs":
            if new.end_invoked:
                return "passed"
            return "reached" if new.effect_invoked else None
        return "reached" if new.ended else None


@dataclass
class Takeovers:
    """Every node's leases, fed with the recorder's invokes and completions."""

    nodes: dict[str, NodeLeases] = field(default_factory=dict)
    #: the op each process has in flight: (f, node, invoke value)
    _pending: dict[int, tuple[str, str, dict[str, Any]]] = field(default_factory=dict)
    #: the recorder's thread writes, a fault's thread reads :meth:`holders`
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, process: int, f: str, node: str, value: dict[str, Any]) -> None:
        self._pending[process] = (f, node, value)
        lease = self._lease(node, value) if f in ("effect", "commit", "release") else None
        if lease is not None:
            if f == "effect":
                lease.effect_invoked = True
            else:
                lease.end_invoked = True

    def complete(self, process: int, typ: str, value: dict[str, Any]) -> tuple[str, str] | None:
        """Record a completion; return (f, node) of an ok claim or renew (a sign of life of a holder), else None."""
        pending = self._pending.pop(process, None)
        if pending is None:
            return None
        f, node, invoked = pending
        if typ != "ok":
            return None
        if f == "claim":
            with self._lock:
                self.nodes.setdefault(node, NodeLeases()).leases.append(_Lease(lease_key(value), process))
            return f, node
        if f in ("commit", "release"):
            lease = self._lease(node, invoked)
            if lease is not None:
                lease.ended = True
        return (f, node) if f == "renew" else None

    def _lease(self, node: str, value: dict[str, Any]) -> _Lease | None:
        leases = self.nodes.get(node)
        return leases.find(lease_key(value)) if leases is not None else None

    def forget(self, node: str) -> None:
        """``node`` is closed (nobody touches it again): drop its leases, so that a soak's memory stays flat."""
        with self._lock:
            self.nodes.pop(node, None)

    def wake(self, node: str, key: Any, phase: Phase) -> Wake | None:
        leases = self.nodes.get(node)
        return leases.phase_of(key, phase) if leases is not None else None

    def holders(self) -> set[int]:
        """The processes whose newest lease on some node is the node's newest, not ended."""
        with self._lock:
            newest = [leases.leases[-1] for leases in self.nodes.values() if leases.leases]
        return {lease.process for lease in newest if not lease.end_invoked}
