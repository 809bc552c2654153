"""What the harness keeps of each worker process (:class:`Slot`) and of the run's outcomes (:class:`Tally`).

Apart from the recorder (:mod:`leasecheck.run.recorder`), which serves them, so
that the runner and the pool name a worker without the recorder's machinery.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from leasecheck.run.merge import Stream


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


__all__ = ["Slot", "Tally"]
