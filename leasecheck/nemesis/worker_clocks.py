"""Per-worker wall clocks in shared memory: each worker reads its own, the harness moves it from outside.

Why per worker, and why not the machine's clock: a real clock fault hits one
machine, and leasecheck's workers are processes on one host. Changing the host's
clock would skew every worker, the store and the harness's own history at once
(and needs privileges a CI job does not have). So each worker gets its own
*logical* wall clock — what :class:`leasecheck.targets.base.TargetConfig.clock` hands its
backend — and the harness moves it from its own process.

How the harness reaches a clock in another process: every worker clock is a
small file (``<directory>/<worker>.clock``) that both sides map into memory
(:mod:`mmap`). The harness writes an offset into it; the worker reads it on
every call with three ``struct.unpack_from`` on shared memory — no system call,
about half a microsecond, cheap enough for every operation. A sequence number
around each write (a seqlock) keeps the reader from mixing two writes; it relies
on stores becoming visible in program order, as they do on x86-64, and on one
writer per clock at a time (the nemesis' lock, or one nemesis process).

A strobe is not a thread flipping the offset: the slot holds the strobe's
delta, period and window in CLOCK_MONOTONIC time (one clock for every process on
a host), and the reader computes which half-period it is in. The harness needs
no timer, the alternation is exact, and it stops by itself when the window ends.

The faults that move these clocks are in :mod:`leasecheck.nemesis.clock`; the
``clock-reset`` undo record (``leasecheck heal`` after the harness died) is here,
with the clocks it resets.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecheck.nemesis.heal import Record, undoes

#: the host's real wall clock, captured before anyone can patch ``time.time``
#: (:func:`leasecheck.nemesis.timepatch.patch_process_time` makes ``time.time`` call a clock that calls this)
_real_time: Callable[[], float] = time.time
_monotonic: Callable[[], float] = time.monotonic

# -- the shared slot ---------------------------------------------------------------------------

#: seq (u64, odd while a write is in progress), then base offset, strobe delta and
#: period (ms), strobe window start and end (CLOCK_MONOTONIC seconds)
_SEQ = struct.Struct("<Q")
_BODY = struct.Struct("<5d")
_SIZE = _SEQ.size + _BODY.size
#: a reader gives up waiting for a consistent read after this many tries (a writer
#: that died mid-write must not hang every worker; the body is then read as is)
_MAX_TRIES = 1000

Key = int | str


@dataclass(frozen=True, slots=True)
class ClockState:
    """What one worker clock's slot says: a fixed offset, and maybe a strobe around it."""

    offset_ms: float = 0.0
    strobe_delta_ms: float = 0.0
    strobe_period_ms: float = 0.0
    strobe_start: float = 0.0
    strobe_until: float = 0.0

    def offset_at(self, monotonic_s: float) -> float:
        """The offset in force at this CLOCK_MONOTONIC instant: base, plus delta in the 1st, 3rd, ... half-period."""
        if self.strobe_start <= monotonic_s < self.strobe_until and self.strobe_period_ms > 0:
            phase = int((monotonic_s - self.strobe_start) * 1000.0 // self.strobe_period_ms)
            if phase % 2 == 0:
                return self.offset_ms + self.strobe_delta_ms
        return self.offset_ms

    def skewed_at(self, monotonic_s: float) -> bool:
        """Is a fault acting on this clock: an offset, or a strobe not over yet?"""
        return self.offset_ms != 0.0 or monotonic_s < self.strobe_until

    def behind_at(self, monotonic_s: float) -> bool:
        """Has a fault set this clock behind the host's at this instant: a negative offset, or a strobe by a negative
        delta not over yet (both its halves count: the worker times its claims to the behind ones)?"""
        return self.offset_ms < 0 or (self.strobe_delta_ms < 0 and monotonic_s < self.strobe_until)


def _read_body(view: mmap.mmap) -> tuple[float, float, float, float, float]:
    """A consistent snapshot of a slot's body (seqlock read); a plain tuple, the worker's hot path."""
    for _ in range(_MAX_TRIES):
        (before,) = _SEQ.unpack_from(view, 0)
        if before & 1:
            continue
        body = _BODY.unpack_from(view, _SEQ.size)
        (after,) = _SEQ.unpack_from(view, 0)
        if before == after:
            return body
    return _BODY.unpack_from(view, _SEQ.size)


def _read(view: mmap.mmap) -> ClockState:
    return ClockState(*_read_body(view))


def _write(view: mmap.mmap, state: ClockState) -> None:
    """Publish a new state (seqlock write: odd sequence while the body changes)."""
    (seq,) = _SEQ.unpack_from(view, 0)
    _SEQ.pack_into(view, 0, seq | 1)
    _BODY.pack_into(
        view, _SEQ.size, state.offset_ms, state.strobe_delta_ms, state.strobe_period_ms, state.strobe_start, state.strobe_until,
    )
    _SEQ.pack_into(view, 0, (seq | 1) + 1)


def _map(path: Path, writable: bool) -> mmap.mmap:
    with open(path, "r+b" if writable else "rb") as f:
        return mmap.mmap(f.fileno(), _SIZE, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)


# -- the worker's side -------------------------------------------------------------------------


class WorkerClock:
    """A worker's wall clock in ms (``TargetConfig.clock``): the host's, plus what the harness set.

    Picklable by path, so it travels to a spawned worker inside a TargetSpec;
    the file is mapped on the first call in each process.
    """

    __slots__ = ("_view", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._view: mmap.mmap | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (WorkerClock, (str(self.path),))

    def __repr__(self) -> str:
        return f"WorkerClock({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkerClock) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def state(self) -> ClockState:
        """What the harness set on this clock now: its offset, and a strobe's schedule (a worker times a claim by it)."""
        if self._view is None:
            self._view = _map(self.path, writable=False)
        return ClockState(*_read_body(self._view))

    def offset_ms(self) -> float:
        """How far ahead (positive) or behind this clock runs right now."""
        if self._view is None:
            self._view = _map(self.path, writable=False)
        body = _read_body(self._view)
        if body[4] == 0.0:  # no strobe (the common case): no ClockState, no monotonic read
            return body[0]
        return ClockState(*body).offset_at(_monotonic())

    def __call__(self) -> float:
        return _real_time() * 1000.0 + self.offset_ms()


# -- the harness's side ------------------------------------------------------------------------

_KEY = re.compile(r"[A-Za-z0-9_.-]+")


class ClockControl:
    """The harness's handle on every worker clock: make one per worker, then bump, strobe, reset.

    ``directory`` holds one small file per worker; a fresh temporary one (removed
    by :meth:`cleanup`) unless given — the runner may pass its run directory so
    the clocks' last offsets stay with the run. Picklable (by directory, and a
    copy never removes it), so a nemesis may run in a process of its own.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._owns_directory = directory is None
        self.directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="leasecheck-clocks-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self._views: dict[str, mmap.mmap] = {}
        #: the sign of every bump and strobe made through this handle, in order (the clock faults' directions so far)
        self.directions: list[int] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": str(self.directory)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.directory = Path(state["directory"])
        self._owns_directory = False  # only the original removes the directory
        self._views = {}
        self.directions = []

    def _path(self, worker: Key) -> Path:
        name = str(worker)
        if not _KEY.fullmatch(name):
            raise ValueError(f"worker clock key {worker!r}: letters, digits, '_', '.' and '-' only")
        return self.directory / f"{name}.clock"

    def clock(self, worker: Key) -> WorkerClock:
        """The clock to put in worker ``worker``'s TargetConfig; created at offset 0 if new."""
        path = self._path(worker)
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(bytes(_SIZE))
            tmp.chmod(0o644)  # workers may run as another user (they only read it)
            tmp.replace(path)  # a reader never maps a short file
        return WorkerClock(path)

    def _view(self, worker: Key) -> mmap.mmap:
        name = str(worker)
        view = self._views.get(name)
        if view is None:
            path = self._path(worker)
            if not path.exists():
                raise KeyError(f"no clock for worker {worker!r} (make it with ClockControl.clock first)")
            view = self._views[name] = _map(path, writable=True)
        return view

    def state(self, worker: Key) -> ClockState:
        return _read(self._view(worker))

    def offset_ms(self, worker: Key) -> float:
        """The offset the worker sees right now (strobe included)."""
        return self.state(worker).offset_at(_monotonic())

    def is_skewed(self, worker: Key) -> bool:
        """Does a fault act on this worker's clock now? (A runner picks other victims: heals reset to 0.)"""
        return self.state(worker).skewed_at(_monotonic())

    def lagging(self, worker: Key) -> bool:
        """Has a fault set this worker's clock behind the host's (a negative offset, or a strobe by a negative delta not
        over yet)? False for a worker with no clock."""
        try:
            state = self.state(worker)
        except KeyError:
            return False
        return state.behind_at(_monotonic())

    def set_offset(self, worker: Key, offset_ms: float) -> None:
        """Make the worker's clock run exactly ``offset_ms`` ahead of the host's; ends any strobe."""
        _write(self._view(worker), ClockState(float(offset_ms)))

    def bump(self, worker: Key, delta_ms: float) -> float:
        """Jump the worker's clock by ``delta_ms`` (as an NTP step would); returns the new offset."""
        offset = self.state(worker).offset_ms + float(delta_ms)
        self.set_offset(worker, offset)
        self.directions.append(1 if delta_ms >= 0 else -1)
        return offset

    def strobe(self, worker: Key, delta_ms: float, period_ms: float, duration_s: float) -> None:
        """For ``duration_s``, alternate every ``period_ms`` between offset + ``delta_ms`` and the offset.

        The first half-period is the bumped one; afterwards the clock stays at
        its offset without anyone having to come back.
        """
        if period_ms <= 0 or duration_s < 0:
            raise ValueError("strobe: period_ms must be positive and duration_s not negative")
        start = _monotonic()
        base = self.state(worker).offset_ms
        _write(self._view(worker), ClockState(base, float(delta_ms), float(period_ms), start, start + duration_s))
        self.directions.append(1 if delta_ms >= 0 else -1)

    def reset(self, worker: Key) -> None:
        """Back to the host's clock: offset 0, no strobe."""
        self.set_offset(worker, 0.0)

    def workers(self) -> list[str]:
        """Keys of every clock made in this directory (by any process)."""
        return sorted(p.stem for p in self.directory.glob("*.clock"))

    def reset_all(self) -> list[str]:
        """Reset every worker clock (the final heal, whatever faults were lost track of); the keys reset."""
        keys = self.workers()
        for key in keys:
            self.reset(key)
        return keys

    def close(self) -> None:
        """Unmap the harness's views (workers keep theirs)."""
        for view in self._views.values():
            view.close()
        self._views.clear()

    def cleanup(self) -> None:
        """Close, and remove the directory if this control made it."""
        self.close()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> ClockControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


# -- undo records ----------------------------------------------------------------------------


def reset_record(clocks: ClockControl, victims: Sequence[Key]) -> Record:
    """How ``leasecheck heal`` resets these worker clocks after the harness died (see :mod:`leasecheck.nemesis.heal`)."""
    return {"kind": "clock-reset", "directory": str(clocks.directory), "clocks": [str(v) for v in victims]}


@undoes("clock-reset")
def _undo_worker_clocks(rec: Record) -> str:
    """Reset the recorded worker clocks to offset 0 (those whose files are gone are skipped)."""
    if not Path(rec["directory"]).is_dir():
        return f"{rec['directory']} is gone; no worker clock to reset"
    control = ClockControl(rec["directory"])
    try:
        done = [key for key in rec["clocks"] if (control.directory / f"{key}.clock").exists()]
        for key in done:
            control.reset(key)
    finally:
        control.close()
    return f"worker clocks {done} reset to offset 0" if done else "no such worker clock any more"
