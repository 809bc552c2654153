"""What the harness keeps of each worker process (:class:`Slot`) and of the run's outcomes (:class:`Tally`).

Apart from the recorder (:mod:`leasecheck.run.recorder`), which serves them, so
that the runner and the pool name a worker without the recorder's machinery.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from leasecheck.run.merge import Stream

#: how many of the nodes it last claimed a worker keeps, to read one of them now and then (the recorder keeps the same)
SEEN_NODES = 50

class NodeCloser(Protocol):
    """What the recorder's thread tells the closer of nodes (:class:`leasecheck.run.closing.Closer`)."""

    def completed(self, node: str) -> None:
        """An op of ``node`` completed now."""

    def tick(self, now: float, busy: Callable[[], set[str]]) -> None:
        """A round of the recorder is over: ``busy()`` names the nodes a worker may still send an op on."""


@dataclass
class Slot:
    """One worker process as the hub knows it."""

    process: int
    slot: int
    conn: Connection
    pid: int | None = None
    alive: bool = True
    #: said hello: past its PR_SET_PDEATHSIG, so a fault may pick it as a victim
    ready: bool = False
    #: its events on their way to the history
    stream: Stream = field(default_factory=lambda: Stream(0))
    #: the op it has in flight (invoke received, completion not yet): (f, node)
    open: tuple[str, str] | None = None
    #: the node the queue last delivered to it (it works on it, as a zombie too, until it asks for the next)
    current: str | None = None
    #: the nodes it was last granted a claim on, as it keeps them (it reads one of them now and then)
    seen: deque[str] = field(default_factory=lambda: deque(maxlen=SEEN_NODES))

    def may_touch(self) -> set[str]:
        """Every node this worker may still send an op on: the one it works on, and those it may read."""
        return {*self.seen, *((self.current,) if self.current else ()), *((self.open[1],) if self.open else ())}


@dataclass
class Tally:
    """Live counts for the progress display and the summary."""

    ok: int = 0
    fail: int = 0
    info: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)

    @property
    def ops(self) -> int:
        return self.ok + self.fail + self.info

    def count(self, typ: str, value: dict[str, Any]) -> None:
        """One completion of type ``typ`` (a failure by its reason)."""
        if typ == "ok":
            self.ok += 1
        elif typ == "fail":
            self.fail += 1
            self.by_reason[value.get("reason", "?")] += 1
        else:
            self.info += 1


__all__ = ["SEEN_NODES", "NodeCloser", "Slot", "Tally"]
