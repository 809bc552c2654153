"""The harness's side of aiming a fault inside ops (:mod:`leasecheck.nemesis.inside`): arm, then take the words as they come.

The nemesis thread arms up to :data:`~leasecheck.nemesis.inside.SLOTS` kinds of
op in the shared slot under one serial and waits; the recorder's thread, serving
the workers' pipes, passes on each ``between`` note a held op sends
(:meth:`Aimer.note`). The first note from the armed serial at an armed kind's
boundary (or after the last reply of an op that ended before it) from a worker
not landed yet wakes the nemesis, which stops or kills that worker while it
holds, then waits for the next kind. It also learns, from every note, how many
request boundaries each kind of op has shown, so the next draw of a boundary is
among those that exist.

A queue run's aimer (:meth:`Aimer.before_writes`) arms its task's write after a
heartbeat, held before its invoke (:attr:`~leasecheck.nemesis.inside.InFlight.before`),
and every pause aims: the library's workers are not ours, the window between a
heartbeat and the next write is the one a pause makes a zombie in, and a pause
that lands elsewhere meets the library's heartbeat check. Below both runners
(:mod:`leasecheck.frame`): a lease run's recorder and a queue run's note socket
feed the same :meth:`Aimer.note`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS, READ_RESOURCE, inside_situation
from leasecheck.machine.aim_slot import AimSlot
from leasecheck.nemesis.inside import Aim, InFlight

#: the slot's file, in the run's clocks folder (shared memory the nemesis writes and the workers read, removed at the end)
AIM_SLOT = "aim"
#: the boundaries an aim draws among for a kind of op no aimed op has shown yet: the first only, which every op that
#: sends a request has (a guess beyond an op's last request held it after its reply, not between round trips)
UNSEEN_BOUNDARIES = 1


class Aimer:
    """Arms the slot at ``path`` (created here) and hands over the workers that hold the armed ops."""

    def __init__(self, path: Path, resource_reads: bool, want: int | None = None, require: Iterable[str] = ()) -> None:
        self.path = path
        self.want = want
        #: the ops are held before their invoke (:meth:`before_writes`), at boundary 0
        self.before = False
        #: the ``--require``d situations: a fault aims at the op kinds of those it must land inside
        self.require = frozenset(require)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.slot = AimSlot(path, create=True)
        self._ops: tuple[str, ...] = tuple(f for f in INSIDE_FUNCTIONS if resource_reads or f != READ_RESOURCE)
        self._landed: dict[str, Counter[str]] = defaultdict(Counter)
        self._boundaries: dict[str, int] = {}
        self._cond = threading.Condition()
        #: the slot has one writer at a time: the nemesis' thread arms and disarms, the recorder's disarms a landed kind
        self._writing = threading.Lock()
        self._serial = 0
        #: the armed serial and its aims by kind, and what landed on them (in the order they came)
        self._want: tuple[int, dict[str, Aim]] | None = None
        self._came: list[InFlight] = []
        #: a lease run's pauses last their drawn duration, no more
        self._outlast: Callable[[InFlight], Callable[[], bool] | None] = lambda op: None

    @classmethod
    def before_writes(cls, path: Path, writes: Sequence[str], outlast: Callable[[InFlight], Callable[[], bool] | None]) -> Aimer:
        """A job queue's aimer: the kinds of op in ``writes`` held before their invoke, after the task's heartbeat
        (:mod:`leasecheck.targets.queues.task`), every pause aimed, and a pause outlasting its drawn end as ``outlast``
        says (see the module docstring)."""
        aimer = cls(path, resource_reads=False)
        aimer._ops, aimer.before, aimer._outlast = tuple(writes), True, outlast
        return aimer

    def outlast(self, op: InFlight) -> Callable[[], bool] | None:
        return self._outlast(op)

    @property
    def ops(self) -> tuple[str, ...]:
        return self._ops

    def landed(self, fault: str) -> Counter[str]:
        return self._landed[fault]

    def required(self, fault: str) -> frozenset[str]:
        """The op kinds ``fault`` must land inside (``--require paused-inside-claim``: ``claim`` for ``pause``)."""
        return frozenset(f for f in self._ops if inside_situation(fault, f) in self.require)

    def boundaries(self, f: str) -> int:
        """The most request boundaries an op of kind ``f`` has shown, else :data:`UNSEEN_BOUNDARIES`; none (0) for an op
        held before its invoke."""
        return 0 if self.before else self._boundaries.get(f, UNSEEN_BOUNDARIES)

    def aim(self, aims: Sequence[Aim], timeout_s: float, gather_s: float) -> Iterator[InFlight]:
        with self._cond:
            self._serial += 1
            serial = self._serial
            self._want, self._came = (serial, {a.f: a for a in aims}), []
        with self._writing:
            self.slot.arm(serial, [(a.f, a.at, a.hold_ms) for a in aims])
        until = time.monotonic() + timeout_s
        given = 0
        try:
            while given < len(aims):
                with self._cond:
                    while len(self._came) <= given and (left := until - time.monotonic()) > 0:
                        self._cond.wait(left)
                    came = self._came[given:]
                if not came:
                    return
                if not given:  # the first came: the others have ``gather_s`` from now
                    until = time.monotonic() + gather_s
                for op in came:
                    given += 1
                    yield op
        finally:
            with self._cond:
                self._want = None
            with self._writing:
                self.slot.disarm(serial)

    def note(self, process: int, serial: int, f: str, boundary: int, invoked: int, last: bool = False) -> None:
        """A held op of ``process`` reached request ``boundary`` (``last``: it ended there, short of its aim's) (the
        recorder's thread)."""
        if boundary > self._boundaries.get(f, 0):
            self._boundaries[f] = boundary
        with self._cond:
            if self._want is None or self._want[0] != serial or f not in self._want[1]:
                return
            aim = self._want[1][f]
            if (boundary != aim.at and not (last and boundary < aim.at)) or any(
                    op.f == f or op.process == process for op in self._came):
                return
            self._came.append(InFlight(process, f, invoked, boundary, aim.hold_ms, last=boundary != aim.at))
            self._cond.notify_all()
            # that kind landed: disarmed at once, so no other worker holds an op of it for nothing
            left = [a for k, a in self._want[1].items() if all(op.f != k for op in self._came)]
            with self._writing:
                self.slot.arm(serial, [(a.f, a.at, a.hold_ms) for a in left])

    def holding(self, pid: int) -> bool:
        return self.slot.holding(pid)

    def close(self) -> None:
        self.slot.forget_marks()
        self.slot.close()
