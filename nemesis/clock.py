"""Clock skew: per-worker wall clocks the nemesis can bump and strobe, and the store's clock.

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

The store's clock is a different matter (see :class:`ServerClockSkew` and
:mod:`leasecheck.servers.faketime`): the reference backends judge expiry by the
store's clock, so only a skew of the *store* can make a correct backend look
wrong, and only that skew belongs in the history's ``clock_uncertainty_ms``
(:func:`required_uncertainty_ms`). Worker-clock skew exists to catch backends
that wrongly trust the worker's clock (``leasecheck.targets.broken_postgres.ClientClockPostgres``).
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import gc
import mmap
import os
import re
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leasecheck.nemesis.heal import Record, undoes

#: the host's real wall clock, captured before anyone can patch ``time.time``
#: (:func:`patch_process_time` makes ``time.time`` call a clock that calls this)
_real_time: Callable[[], float] = time.time
_monotonic: Callable[[], float] = time.monotonic

#: nemesis event ``f`` at start and heal, per fault kind (merge into leasecheck.nemesis.faults.EVENTS)
CLOCK_EVENTS: dict[str, tuple[str, str]] = {
    "clock-bump": ("clock-skew", "clock-reset"),
    "clock-strobe": ("clock-skew", "clock-reset"),
    "clock-store": ("clock-skew", "clock-reset"),
}

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


def _read_body(view: mmap.mmap) -> tuple[float, float, float, float, float]:
    """A consistent snapshot of a slot's body (seqlock read); a plain tuple, the worker's hot path."""
    for _ in range(_MAX_TRIES):
        (before,) = _SEQ.unpack_from(view, 0)
        if before & 1:
            continue
        body = _BODY.unpack_from(view, _SEQ.size)
        (after,) = _SEQ.unpack_from(view, 0)
        if before == after:
            return body  # type: ignore[return-value]
    return _BODY.unpack_from(view, _SEQ.size)  # type: ignore[return-value]


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

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": str(self.directory)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.directory = Path(state["directory"])
        self._owns_directory = False  # only the original removes the directory
        self._views = {}

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

    def set_offset(self, worker: Key, offset_ms: float) -> None:
        """Make the worker's clock run exactly ``offset_ms`` ahead of the host's; ends any strobe."""
        _write(self._view(worker), ClockState(float(offset_ms)))

    def bump(self, worker: Key, delta_ms: float) -> float:
        """Jump the worker's clock by ``delta_ms`` (as an NTP step would); returns the new offset."""
        offset = self.state(worker).offset_ms + float(delta_ms)
        self.set_offset(worker, offset)
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


# -- faults ------------------------------------------------------------------------------------


def _reset_record(clocks: ClockControl, victims: Sequence[Key]) -> Record:
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


def _names(victims: Sequence[Key], processes: Sequence[int] | None) -> dict[str, Any]:
    """The ``victims`` of a nemesis event: the history's process numbers when known, else the clock keys."""
    if processes is None:
        return {"victims": list(victims)}
    return {"victims": list(processes), "clocks": list(victims)}


class _ResetsClocks:
    """Heal for every worker-clock fault: reset the victims' clocks to 0 (once)."""

    clocks: ClockControl
    victims: Sequence[Key]
    processes: Sequence[int] | None
    active: bool

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.active = False
        for victim in self.victims:
            self.clocks.reset(victim)
        return _names(self.victims, self.processes)

    def undo_record(self) -> dict[str, Any] | None:
        return _reset_record(self.clocks, self.victims) if self.active else None


@dataclass
class ClockBump(_ResetsClocks):
    """Step the victims' clocks by ``delta_ms`` (an NTP step, a VM restored from a snapshot); heal resets them to 0.

    ``victims`` are clock keys (the runner's worker slots); ``processes``
    optionally names the same workers by their history process numbers, for
    the event's value.
    """

    clocks: ClockControl
    victims: Sequence[Key]
    delta_ms: float
    processes: Sequence[int] | None = None
    name: str = "clock-bump"
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        for victim in self.victims:
            self.clocks.bump(victim, self.delta_ms)
        self.active = True
        return {**_names(self.victims, self.processes), "delta_ms": self.delta_ms}


@dataclass
class ClockStrobe(_ResetsClocks):
    """Flip the victims' clocks between +``delta_ms`` and their offset every ``period_ms`` for ``duration_s``.

    A clock that keeps jumping back and forth (a flapping time source) breaks
    code that measures intervals with the wall clock. Heal stops it and resets
    the clocks to 0.
    """

    clocks: ClockControl
    victims: Sequence[Key]
    delta_ms: float
    period_ms: float
    duration_s: float
    processes: Sequence[int] | None = None
    name: str = "clock-strobe"
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        for victim in self.victims:
            self.clocks.strobe(victim, self.delta_ms, self.period_ms, self.duration_s)
        self.active = True
        return {
            **_names(self.victims, self.processes),
            "delta_ms": self.delta_ms, "period_ms": self.period_ms, "duration_s": self.duration_s,
        }


def faketime_offset(offset_ms: float) -> str:
    """libfaketime's relative-offset syntax, in seconds: ``+1.5``, ``-0.25``, ``+0``."""
    seconds = offset_ms / 1000.0
    text = f"{seconds:+.6f}".rstrip("0").rstrip(".")
    return "+0" if text in ("+", "-", "+0", "-0") else text


def write_faketime_offset(control_file: str | os.PathLike[str], offset_ms: float) -> None:
    """Atomically replace the file libfaketime reads (``FAKETIME_TIMESTAMP_FILE``).

    With ``FAKETIME_NO_CACHE=1`` the server re-reads the file on each clock call;
    writing in place could let it read a half-written ``+3`` for ``+3600``, so
    write beside it and rename (readable by the server's user).
    """
    path = Path(control_file)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(faketime_offset(offset_ms) + "\n")
    tmp.chmod(0o644)
    tmp.replace(path)


@dataclass
class ServerClockSkew:
    """Skew the store server's clock by ``delta_ms`` through its libfaketime control file; heal to ``+0``.

    The server must run under libfaketime reading ``control_file`` with
    ``FAKETIME_NO_CACHE=1`` (:class:`leasecheck.servers.faketime.FaketimePostgresServer`
    and ``FaketimeRedisServer`` do). A run with this fault must record
    ``clock_uncertainty_ms >= required_uncertainty_ms(max |delta_ms|)``.
    """

    control_file: str | os.PathLike[str]
    delta_ms: float
    victim: str = "store"
    name: str = "clock-store"
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        write_faketime_offset(self.control_file, self.delta_ms)
        self.active = True
        return {"victims": [self.victim], "delta_ms": self.delta_ms}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.active = False
        write_faketime_offset(self.control_file, 0.0)
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "faketime-reset", "control_file": str(self.control_file)} if self.active else None


@undoes("faketime-reset")
def _undo_server_clock(rec: Record) -> str:
    """Put a libfaketime control file back to ``+0`` (a server restarted on that directory starts unskewed)."""
    path = Path(rec["control_file"])
    if not path.parent.is_dir():
        return f"{path.parent} is gone; nothing to reset"
    write_faketime_offset(path, 0.0)
    return f"{path} reset to +0"


def required_uncertainty_ms(max_server_skew_ms: float) -> float:
    """The least ``clock_uncertainty_ms`` a history may record when the store's clock is skewed by up to ±s.

    An interval of harness time begins under one offset and may end under
    another; with offsets anywhere in [−s, +s] the store can misjudge its length
    by up to 2s (DESIGN.md, history header). Only the *store's* clock counts:
    worker-clock skew (:class:`ClockBump`, :class:`ClockStrobe`) does not raise
    it, because the reference backends judge expiry by the store's clock, and
    a backend that trusts the worker's clock instead is exactly what the
    checker should then report.
    """
    return 2.0 * abs(float(max_server_skew_ms))


# -- third-party code inside a worker ----------------------------------------------------------


def _type_dict(cls: type) -> dict[str, Any]:
    """The real dict behind a type's read-only ``__dict__`` (CPython)."""
    (inner,) = gc.get_referents(cls.__dict__)
    return inner


def _set_type_attr(cls: type, name: str, value: Any) -> None:
    """Set an attribute of a built-in (static) type and invalidate CPython's method cache."""
    _type_dict(cls)[name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def _with_default_time(real: Callable[..., Any], clock: Callable[[], float]) -> Callable[..., Any]:
    """``time.localtime``-style function whose omitted seconds argument means the skewed now."""

    def skewed(secs: float | None = None) -> Any:
        return real(clock() / 1000.0 if secs is None else secs)

    skewed.__name__ = real.__name__
    skewed.__doc__ = real.__doc__
    return skewed


class ProcessTimePatch:
    """The wall-clock functions of this process, redirected to a skewed clock; :meth:`undo` restores them.

    Also a context manager. See :func:`patch_process_time` for what it reaches.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._time: dict[str, Any] = {}
        self._datetime: dict[str, Any] = {}
        self.active = False

    def apply(self) -> ProcessTimePatch:
        now_ms = self._reentrant_clock()
        now_s = lambda: now_ms() / 1000.0  # noqa: E731
        replacements: dict[str, Any] = {
            "time": now_s,
            "time_ns": lambda: int(now_ms() * 1_000_000),
            "localtime": _with_default_time(time.localtime, now_ms),
            "gmtime": _with_default_time(time.gmtime, now_ms),
            "ctime": _with_default_time(time.ctime, now_ms),
        }
        real_strftime, real_localtime = time.strftime, time.localtime

        def strftime(fmt: str, t: Any = None) -> str:
            return real_strftime(fmt, real_localtime(now_s()) if t is None else t)

        replacements["strftime"] = strftime
        for name, fn in replacements.items():
            self._time[name] = getattr(time, name)
            setattr(time, name, fn)
        # datetime.now/utcnow read the C clock directly; date.today() and
        # datetime.today() call time.time() and follow the patch above already.
        for name in ("now", "utcnow"):
            self._datetime[name] = _dt.datetime.__dict__[name]
        _set_type_attr(_dt.datetime, "now", classmethod(lambda cls, tz=None: cls.fromtimestamp(now_s(), tz)))
        _set_type_attr(_dt.datetime, "utcnow", classmethod(lambda cls: cls.utcfromtimestamp(now_s())))
        self.active = True
        return self

    def _reentrant_clock(self) -> Callable[[], float]:
        """``clock``, made safe to build on ``time.time``: a call from inside it gets the host's time.

        :class:`leasecheck.targets.base.OffsetClock` and most hand-written clocks call
        ``time.time()``, which is now the skewed clock itself; without this guard
        they would recurse forever. Per thread, so threads do not see each
        other's guard.
        """
        clock, inside = self.clock, threading.local()

        def now_ms() -> float:
            if getattr(inside, "active", False):
                return _real_time() * 1000.0
            inside.active = True
            try:
                return clock()
            finally:
                inside.active = False

        return now_ms

    def undo(self) -> None:
        """Put every original back (idempotent)."""
        if not self.active:
            return
        for name, fn in self._time.items():
            setattr(time, name, fn)
        for name, descriptor in self._datetime.items():
            _set_type_attr(_dt.datetime, name, descriptor)
        self._time.clear()
        self._datetime.clear()
        self.active = False

    def __enter__(self) -> ProcessTimePatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def patch_process_time(clock: Callable[[], float]) -> ProcessTimePatch:
    """Make this process's Python wall-clock functions follow ``clock`` (ms), for third-party code in a worker.

    A third-party lease library reads the time itself, not through
    ``TargetConfig.clock``; its adapter calls this once in the worker process
    (e.g. ``patch_process_time(config.clock)`` in ``__init__``) so a worker-clock
    skew reaches it.

    Reached: ``time.time``, ``time.time_ns``, ``time.localtime()``,
    ``time.gmtime()``, ``time.ctime()``, ``time.strftime(fmt)`` when called
    through the ``time`` module at call time; ``datetime.datetime.now`` and
    ``utcnow`` everywhere (the built-in type itself is patched, so names bound
    earlier by ``from datetime import datetime`` follow too — CPython only);
    ``date.today``/``datetime.today`` (they call ``time.time``); ``logging``
    timestamps.

    Not reached: names bound before the patch by ``from time import time``;
    C code calling ``clock_gettime``/``gettimeofday`` directly (libpq and
    psycopg's C parts, hiredis, OpenSSL certificate checks, SQLite's
    ``datetime('now')``, ``uuid.uuid1`` when the C ``_uuid`` module is
    present); other processes (a driver's helper process, the store).
    Deliberately untouched: ``time.monotonic``/``perf_counter`` and
    ``time.sleep`` — a wall-clock step does not move monotonic clocks. For C
    code the only remedy is libfaketime in the worker (see
    :mod:`leasecheck.servers.faketime`), with its own limits.

    ``clock`` may itself call ``time.time`` (as :class:`leasecheck.targets.base.OffsetClock`
    does): inside it, ``time.time`` is the host's. Returns the patch;
    ``.undo()`` or ``with`` restores.
    """
    return ProcessTimePatch(clock).apply()

