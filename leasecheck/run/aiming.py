"""The harness's side of aiming a fault inside an op (:mod:`leasecheck.nemesis.inside`): arm, then wait for the word.

The nemesis thread arms a kind of op in the shared slot and waits; the
recorder's thread, serving the workers' pipes, passes on each ``between`` note a
held op sends (:meth:`Aimer.note`), and the first from the armed serial at the
armed boundary wakes the nemesis, which stops or kills that worker while it holds.
It also learns, from every note, how many request boundaries each kind of op has
shown, so the next draw of a boundary is among those that exist.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS, READ_RESOURCE
from leasecheck.nemesis.inside import AimSlot, InFlight

#: the slot's file, in the run's clocks folder (shared memory the nemesis writes and the workers read, removed at the end)
AIM_SLOT = "aim"
#: the boundaries an aim draws among for a kind of op no aimed op has shown yet (an SQLite write: BEGIN, the
#: statement, the fence, COMMIT; a read-decide-write claim has more)
UNSEEN_BOUNDARIES = 3


class Aimer:
    """Arms the slot at ``path`` (created here) and waits for the worker that holds the armed op."""

    def __init__(self, path: Path, resource_reads: bool) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.slot = AimSlot(path, create=True)
        self._ops = tuple(f for f in INSIDE_FUNCTIONS if resource_reads or f != READ_RESOURCE)
        self._hits: dict[str, set[str]] = defaultdict(set)
        self._boundaries: dict[str, int] = {}
        self._cond = threading.Condition()
        self._serial = 0
        #: the armed (serial, f, at, hold_ms), and what landed on it
        self._want: tuple[int, str, int, float] | None = None
        self._landed: InFlight | None = None

    @property
    def ops(self) -> tuple[str, ...]:
        return self._ops

    def hit(self, fault: str) -> set[str]:
        return self._hits[fault]

    def boundaries(self, f: str) -> int:
        """The most request boundaries an op of kind ``f`` has shown, else :data:`UNSEEN_BOUNDARIES` (an aim past the
        op's last one misses, and the op's notes teach the real count)."""
        return self._boundaries.get(f, UNSEEN_BOUNDARIES)

    def aim(self, f: str, at: int, hold_ms: float, timeout_s: float) -> InFlight | None:
        with self._cond:
            self._serial += 1
            serial = self._serial
            self._want, self._landed = (serial, f, at, hold_ms), None
        self.slot.arm(serial, f, at, hold_ms)
        try:
            with self._cond:
                self._cond.wait_for(lambda: self._landed is not None, timeout_s)
                landed, self._want = self._landed, None
        finally:
            self.slot.disarm(serial)
        return landed

    def note(self, process: int, serial: int, f: str, boundary: int, invoked: int) -> None:
        """A held op of ``process`` reached request ``boundary`` (the recorder's thread)."""
        if boundary > self._boundaries.get(f, 0):
            self._boundaries[f] = boundary
        with self._cond:
            want = self._want
            if want is not None and self._landed is None and want[:3] == (serial, f, boundary):
                self._landed = InFlight(process, f, invoked, boundary, want[3])
                self._cond.notify_all()

    def close(self) -> None:
        self.slot.close()
