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

Two moments serve issue 34's windows, asked by workers that are no zombies: a holder that writes late
in its lease holds its write until ``rival-granted`` (another worker was granted its node), and the
contender the hub handed that node waits for ``at-lapse`` (the node's newest lease lapsed: silent past
ttl + uncertainty, no renew pending) to claim the moment it does (:mod:`leasecheck.run.steering`).

Two more moments come from issue 25's windows: ``at-new-claim`` (the zombie's own
lease surely lapsed, and another worker's claim of its node is in flight: an effect
sent now is in flight when that claim is granted) and ``while-new-lapsed`` (the newer
lease's holder went silent past ttl + uncertainty, with no renew pending and no end:
the window where a store that only asks "is the current lease live?" lets a zombie
back in). A lease is named by its grant: the latest lease of its epoch or token that
the asking process was granted, so a store that repeats an epoch still shows its takeovers.

Everything here is fed by the recorder's thread, in history order, and is a pure
function of the events fed so far and of the history time it is asked at.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from leasecheck.histories.format import lease_key

#: the moments a worker can ask to be woken at: relative to a takeover, a zombie's (:data:`PHASES`), then a late
#: writer's (``rival-granted``) and its contender's (``at-lapse``)
Phase = Literal["at-new-claim", "before-new-effect", "while-new-runs", "while-new-lapsed", "after-new-ends",
                "rival-granted", "at-lapse"]
#: a zombie's moments, in the order they come
PHASES: tuple[Phase, ...] = ("at-new-claim", "before-new-effect", "while-new-runs", "while-new-lapsed", "after-new-ends")

#: what the hub answers a zombie's wait: its phase is here, was missed, or never came in time
Wake = Literal["reached", "passed", "timeout"]


@dataclass
class _Lease:
    """One granted lease of a node, and how far its holder has got."""

    key: Any
    process: int
    #: history time (ns) of its grant, and of its latest sign of life (the completion of its ok claim or latest ok renew)
    granted: int = 0
    life: int = 0
    effect_invoked: bool = False
    end_invoked: bool = False
    ended: bool = False
    #: ended by an ok release (its node claimable again at once), not a commit
    released: bool = False

    def lapsed(self, now: int, lapse: int, pending: Callable[[str, int | None], bool]) -> bool:
        """Silent past ``lapse`` (ttl + uncertainty + a margin) since its latest sign of life at ``now``, no renew of
        its holder in flight, not ended: no store still holds it."""
        return not self.ended and now > self.life + lapse and not pending("renew", self.process)


@dataclass
class NodeLeases:
    """The leases of one node in grant order (ok claims as they completed)."""

    leases: list[_Lease] = field(default_factory=list)
    #: was the node handed out with a stall (:mod:`leasecheck.run.steering`, once per node)?
    stalled: bool = False

    def index(self, key: Any, process: int) -> int | None:
        """Where the lease ``process`` knows as ``key`` is: the latest of that key it was granted, else the latest."""
        found = None
        for i in range(len(self.leases) - 1, -1, -1):
            if self.leases[i].key == key:
                if self.leases[i].process == process:
                    return i
                found = i if found is None else found
        return found

    def find(self, key: Any, process: int) -> _Lease | None:
        i = self.index(key, process)
        return None if i is None else self.leases[i]

    def phase_of(self, key: Any, process: int, phase: Phase, now: int, lapse: int,
                 pending: Callable[[str, int | None], bool]) -> Wake | None:
        """Has the node reached ``phase`` relative to the newest lease granted after ``process``'s lease ``key``?
        None: not yet. ``now``: the history time; ``lapse``: ttl + uncertainty (+ a margin), ns; ``pending(f, p)``:
        has process ``p`` (None: any other than ``process``) an ``f`` of this node in flight?"""
        if phase == "at-lapse":  # a contender: the node's newest lease, another's, lapsed (ended: nothing to wait for)
            if not self.leases:
                return None
            newest = self.leases[-1]
            if newest.process == process or newest.ended:
                return "passed"
            return "reached" if newest.lapsed(now, lapse, pending) else None
        mine = self.index(key, process)
        if mine is None:
            return None
        if phase == "rival-granted":  # a late writer: another worker was granted the node since
            return "reached" if any(lease.process != process for lease in self.leases[mine + 1:]) else None
        if phase == "at-new-claim":  # my lease surely lapsed, and another's claim is on its way
            if mine < len(self.leases) - 1:
                return "passed"
            return "reached" if now > self.leases[mine].life + lapse and pending("claim", None) else None
        if mine == len(self.leases) - 1:
            return None  # no newer lease yet
        new = self.leases[-1]
        if phase == "while-new-lapsed":
            if new.end_invoked:
                return "passed"
            return "reached" if new.lapsed(now, lapse, pending) else None
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
        lease = self._lease(node, value, process) if f in ("effect", "commit", "release") else None
        if lease is not None:
            if f == "effect":
                lease.effect_invoked = True
            else:
                lease.end_invoked = True

    def complete(self, process: int, typ: str, value: dict[str, Any], t: int = 0) -> tuple[str, str] | None:
        """Record a completion stamped ``t``; return (f, node) of an ok claim or renew (a sign of life of a holder), else None."""
        pending = self._pending.pop(process, None)
        if pending is None:
            return None
        f, node, invoked = pending
        if typ != "ok":
            return None
        if f == "claim":
            with self._lock:
                self.nodes.setdefault(node, NodeLeases()).leases.append(_Lease(lease_key(value), process, t, t))
            return f, node
        lease = self._lease(node, invoked, process)
        if lease is not None:
            if f in ("commit", "release"):
                lease.ended = True
                lease.released = f == "release"
            elif f == "renew":
                lease.life = max(lease.life, t)
        return (f, node) if f == "renew" else None

    def _lease(self, node: str, value: dict[str, Any], process: int) -> _Lease | None:
        leases = self.nodes.get(node)
        return leases.find(lease_key(value), process) if leases is not None else None

    def _pending_on(self, node: str, process: int) -> Callable[[str, int | None], bool]:
        def pending(f: str, p: int | None) -> bool:
            if p is not None:
                return self._pending.get(p, ("", "", {}))[:2] == (f, node)
            return any(q != process and op[:2] == (f, node) for q, op in self._pending.items())
        return pending

    def claimable(self, process: int, since: int, now: int, lapse: int) -> list[str]:
        """The nodes whose newest lease another process than ``process`` was granted at history time ``since`` or later
        and that a claim can have now: released, or lapsed (see :meth:`_Lease.lapsed`)."""
        out = []
        for node, leases in list(self.nodes.items()):
            newest = leases.leases[-1] if leases.leases else None
            if newest is None or newest.process == process or newest.granted < since:
                continue
            if newest.released or (not newest.end_invoked and newest.lapsed(now, lapse, self._pending_on(node, process))):
                out.append(node)
        return out

    def silent(self, process: int, since: int, now: int, quiet: int) -> list[str]:
        """The nodes whose newest lease another process than ``process`` was granted at ``since`` or later, not ended,
        its holder silent for more than ``quiet`` ns (no sign of life, no renew in flight): a lease about to lapse."""
        out = []
        for node, leases in list(self.nodes.items()):
            newest = leases.leases[-1] if leases.leases else None
            if newest is None or newest.process == process or newest.granted < since or newest.end_invoked:
                continue
            if now - newest.life > quiet and not self._pending_on(node, process)("renew", newest.process):
                out.append(node)
        return out

    def forget(self, node: str) -> None:
        """``node`` is closed (nobody touches it again): drop its leases, so that a soak's memory stays flat."""
        with self._lock:
            self.nodes.pop(node, None)

    def wake(self, node: str, key: Any, process: int, phase: Phase, now: int, lapse: int) -> Wake | None:
        """Has ``node`` reached ``phase`` for ``process``'s lease ``key`` at history time ``now`` (see NodeLeases.phase_of)?"""
        leases = self.nodes.get(node)
        return leases.phase_of(key, process, phase, now, lapse, self._pending_on(node, process)) if leases is not None else None

    def writing(self) -> set[int]:
        """The processes with an effect or commit in flight now (a pause then stops a write between its check and its
        store: the window of a check-then-write boundary)."""
        pending = self._pending.copy()  # one C call: safe beside the recorder's thread
        return {p for p, (f, _, _) in pending.items() if f in ("effect", "commit")}

    def holders(self) -> set[int]:
        """The processes whose newest lease on some node is the node's newest, not ended."""
        with self._lock:
            newest = [leases.leases[-1] for leases in self.nodes.values() if leases.leases]
        return {lease.process for lease in newest if not lease.end_invoked}
