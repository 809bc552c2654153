"""The aim slot: a few bytes of shared memory the harness arms and every worker reads at each op.

Why here, below the faults and the targets: the nemesis arms it
(:mod:`leasecheck.nemesis.inside`), and two kinds of worker read it: a lease run's
(:mod:`leasecheck.run.worker_pipe`) and the task a job queue's own workers run
(:mod:`leasecheck.targets.queues.task`), which may not import a fault. The slot is
a file both sides map (:mod:`mmap`), with a sequence number around each write as
:mod:`leasecheck.nemesis.worker_clocks` has it: a worker reads it for about a
microsecond, without a system call. Each arm names its kind of op in a few
bytes of its own, so the slot needs no list of kinds.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: the most kinds of op armed at once (the nemesis arms at most one per kind there is)
CAPACITY = 8
#: seq (u64, odd while a write is in progress), the aim's serial (u32), then per arm the op's kind (its name, NUL
#: padded; empty: none), the boundary to hold at and the hold (µs)
_SEQ = struct.Struct("<Q")
_SERIAL = struct.Struct("<I")
_ARM = struct.Struct("<16s2I")
_SIZE = _SEQ.size + _SERIAL.size + CAPACITY * _ARM.size
_MAX_TRIES = 1000


def _holding_path(slot: Path, pid: int) -> Path:
    return slot.with_name(f"{slot.name}.holding-{pid}")


class HoldMark:
    """A worker's mark, set while it holds an aimed op (a byte in a file of its own, by its pid).

    Why: the harness stops a victim some milliseconds after its hold began (it
    gathers several victims one by one), and on a loaded machine the hold may run
    out first; the op then completes, and the worker is stopped after it, not
    inside it. Stopped, the worker cannot change its mark, so the harness reads
    it after the stop (:meth:`AimSlot.holding`) and claims the op only if it was
    still held (ci: a pause said it stopped a release the worker had completed).
    """

    def __init__(self, slot: str | os.PathLike[str]) -> None:
        self._fd = os.open(_holding_path(Path(slot), os.getpid()), os.O_RDWR | os.O_CREAT, 0o600)

    def __call__(self, held: bool) -> None:
        os.pwrite(self._fd, b"\1" if held else b"\0", 0)

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True)
class Arm:
    """What the slot asks of the next op of kind ``f`` (once per worker and ``serial``): hold at request boundary
    ``at`` (0: before its first request) for ``hold_s``."""

    serial: int
    f: str
    at: int
    hold_s: float


class AimSlot:
    """The shared slot: the nemesis arms and disarms it (one writer), every worker reads it."""

    def __init__(self, path: str | os.PathLike[str], create: bool = False) -> None:
        self.path = Path(path)
        if create:
            self.path.write_bytes(b"\0" * _SIZE)
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)

    def arm(self, serial: int, arms: Sequence[tuple[str, int, float]]) -> None:
        """Arm up to :data:`CAPACITY` kinds at once under one ``serial``, each ``(kind, boundary, hold in ms)`` (a worker
        holds one op per serial)."""
        if len(arms) > CAPACITY:
            raise ValueError(f"the aim slot holds {CAPACITY} arms, not {len(arms)}")
        (seq,) = _SEQ.unpack_from(self._map, 0)
        _SEQ.pack_into(self._map, 0, seq + 1)
        _SERIAL.pack_into(self._map, _SEQ.size, serial)
        for i in range(CAPACITY):
            body = (arms[i][0].encode(), arms[i][1], int(arms[i][2] * 1000)) if i < len(arms) else (b"", 0, 0)
            _ARM.pack_into(self._map, _SEQ.size + _SERIAL.size + i * _ARM.size, *body)
        _SEQ.pack_into(self._map, 0, seq + 2)

    def disarm(self, serial: int) -> None:
        self.arm(serial, ())

    def armed(self) -> tuple[Arm, ...]:
        """What the slot asks now (nothing: an empty tuple)."""
        raw = b""
        for _ in range(_MAX_TRIES):
            (before,) = _SEQ.unpack_from(self._map, 0)
            raw = self._map[_SEQ.size:_SIZE]
            (after,) = _SEQ.unpack_from(self._map, 0)
            if before == after and not before & 1:
                break
        (serial,) = _SERIAL.unpack_from(raw, 0)
        arms = []
        for i in range(CAPACITY):
            name, at, hold_us = _ARM.unpack_from(raw, _SERIAL.size + i * _ARM.size)
            if f := name.rstrip(b"\0").decode():
                arms.append(Arm(serial, f, at, hold_us / 1e6))
        return tuple(arms)

    def holding(self, pid: int) -> bool:
        """Is the worker ``pid`` holding an aimed op now (its :class:`HoldMark`)? Asked once it is stopped."""
        try:
            with open(_holding_path(self.path, pid), "rb") as f:
                return f.read(1) == b"\1"
        except OSError:
            return False

    def forget_marks(self) -> None:
        """Remove the workers' marks (the harness, at the run's end)."""
        for mark in self.path.parent.glob(f"{self.path.name}.holding-*"):
            mark.unlink(missing_ok=True)

    def close(self) -> None:
        self._map.close()


__all__ = ["CAPACITY", "AimSlot", "Arm", "HoldMark"]
