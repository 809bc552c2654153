"""Third-party code inside a worker: this process's Python wall-clock functions, redirected to a skewed clock.

A third-party lease library reads the time itself, not through
``TargetConfig.clock``; :func:`patch_process_time` lets its adapter make
``time.time`` and ``datetime.now`` follow the worker's clock
(:class:`leasecheck.nemesis.worker_clocks.WorkerClock`), with a ctypes patch of
CPython's built-in ``datetime`` type.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

#: the host's real wall clock, captured before this module can patch ``time.time``
_real_time: Callable[[], float] = time.time


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
