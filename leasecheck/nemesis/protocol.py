"""The one protocol every fault of every module follows: :class:`Fault`.

It is apart from the faults themselves because everyone names it: the context a
factory sees (a skewable server makes one), the catalogue's factories, the
schedule that starts and heals them, and the runner. In a module of its own,
which imports nothing of ours, every one of them imports it one way.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

#: the nemesis event of a fault's start or heal that lost its host (a connection dropped mid-run, an engine that
#: stopped answering): ``{"fault": name, "step": "start" | "heal",
#: "error": what failed}``. Such a fault may be half applied, or still on: the run cannot be valid
#: (docs/contracts/run-verdict.md), and ``leasecheck heal`` undoes what is left. Written by the schedule
#: (:mod:`leasecheck.nemesis.schedule`), read by the run verdict.
FAULT_FAILED = "fault-failed"


class Fault(Protocol):
    """One fault in flight: what it did (for the history) and how to undo it."""

    name: str

    def start(self) -> dict[str, Any]:
        """Inflict the fault; return the nemesis event's value (its victims). An
        :class:`~leasecheck.hosts.protocol.HostUnreachable` (its host lost) is the schedule's to record
        (:data:`FAULT_FAILED`)."""

    def heal(self) -> dict[str, Any] | None:
        """Undo it; return the heal event's value, or None when nothing was left to undo."""

    def undo_record(self) -> dict[str, Any] | None:
        """How to undo it without this object (see :mod:`leasecheck.nemesis.heal`); None if nothing outlives us."""


@runtime_checkable
class Outlasting(Protocol):
    """A fault whose heal, once due, waits for evidence (a pause aimed before a queue task's write: until its job has
    run again, within a bound); the schedule asks again every :data:`~leasecheck.nemesis.schedule.OUTLAST_POLL_S`."""

    def awaiting(self) -> bool:
        """True while the heal should wait still."""
