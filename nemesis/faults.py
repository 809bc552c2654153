"""Process faults: pause (SIGSTOP / SIGCONT) and kill (SIGKILL), of workers or of a store server.

Each fault names its victims for the history and knows how to undo itself. A
killed worker cannot be undone, only replaced, so its heal is a no-op (the
runner starts a replacement under a new process number); a killed store server
is healed by starting it again on the same data.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class Fault(Protocol):
    """One fault in flight: what it did (for the history) and how to undo it."""

    name: str

    def start(self) -> dict[str, Any]:
        """Inflict the fault; return the nemesis event's value (its victims)."""

    def heal(self) -> dict[str, Any] | None:
        """Undo it; return the heal event's value, or None when nothing was left to undo."""

    def undo_record(self) -> dict[str, Any] | None:
        """How to undo it without this object (see :mod:`leasecheck.nemesis.heal`); None if nothing outlives us."""


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


@dataclass
class PauseProcess:
    """SIGSTOP a worker (its GC pause / VM freeze); heal with SIGCONT."""

    process: int
    pid: int
    name: str = "pause"
    paused: bool = False

    def start(self) -> dict[str, Any]:
        self.paused = _signal(self.pid, signal.SIGSTOP)
        return {"victims": [self.process], "pid": self.pid}

    def heal(self) -> dict[str, Any] | None:
        if not self.paused:
            return None
        self.paused = False
        _signal(self.pid, signal.SIGCONT)
        return {"victims": [self.process], "pid": self.pid}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "sigcont", "pids": [self.pid]} if self.paused else None


@dataclass
class KillProcess:
    """SIGKILL a worker; nothing to undo (its replacement gets a new process number)."""

    process: int
    pid: int
    name: str = "kill"

    def start(self) -> dict[str, Any]:
        _signal(self.pid, signal.SIGCONT)  # a stopped process dies just the same, but be explicit
        _signal(self.pid, signal.SIGKILL)
        return {"victims": [self.process], "pid": self.pid}

    def heal(self) -> dict[str, Any] | None:
        return None

    def undo_record(self) -> dict[str, Any] | None:
        return None


@dataclass
class ServerFault:
    """Pause or kill the store's server through the callables of whoever runs it."""

    name: str
    inflict: Callable[[], None]
    undo: Callable[[], None]
    victim: str = "store"
    #: how to undo it from outside (e.g. SIGCONT the server's process tree); None if nothing to do
    record: dict[str, Any] | None = None
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        self.inflict()
        self.active = True
        return {"victims": [self.victim]}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.active = False
        self.undo()
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return self.record if self.active else None


#: the nemesis event ``f`` recorded when a fault starts, and when it is healed
EVENTS = {
    "pause": ("pause", "resume"),
    "kill": ("kill", "start"),
    "pause-store": ("pause", "resume"),
    "kill-store": ("kill", "start"),
    # leasecheck.nemesis.container's faults (literal here: docker is an optional extra)
    "docker-pause": ("pause", "resume"),
    "docker-kill": ("kill", "start"),
    "docker-disconnect": ("partition", "heal"),
}


# clock and network faults live in their own modules; their events join the table here
from leasecheck.nemesis.clock import CLOCK_EVENTS  # noqa: E402
from leasecheck.nemesis.network import NETWORK_EVENTS  # noqa: E402

EVENTS.update(CLOCK_EVENTS)
EVENTS.update(NETWORK_EVENTS)
