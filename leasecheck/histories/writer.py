"""Append-only history writer: every event is one ``write`` of one whole line.

The file is opened unbuffered in append mode, so each event reaches the kernel
as soon as it is recorded: if the harness dies, the history keeps every event
but at most the one being written. Times come from one monotonic clock that no
nemesis skews.

The header promises a ``history-end`` event (``"end_marker": true``) and
:meth:`HistoryWriter.close` writes it, last: the one way a reader can tell a
history its writer finished from one whose writer died between two whole lines.
A harness that is failing calls :meth:`HistoryWriter.abandon` instead, so that
its history says it was never finished (a cut history is never valid).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from leasecheck.histories.format import HISTORY_END, NEMESIS, Header

_encode = msgspec.json.Encoder().encode


class HistoryWriter:
    """Records invokes, completions and nemesis events into a v1 history file.

    Thread-safe: a recorder thread and a nemesis thread may share one writer.
    ``clock`` returns nanoseconds; times are written relative to the writer's
    creation (or to ``start_ns``), and never go backwards in file order.
    The header it writes promises the ``history-end`` event that :meth:`close`
    writes (``header.end_marker`` is set whatever the caller gave); as a
    context manager it closes so when its block ends normally, and
    abandons the history (:meth:`abandon`) when the block raises.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        header: Header,
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        start_ns: int | None = None,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        #: the header it wrote first (what the run told the checker: ttl, effect fence, its metadata, the end's promise)
        self.header = header = msgspec.structs.replace(header, end_marker=True)
        self._clock = clock
        self._start = clock() if start_ns is None else start_ns
        self._fsync = fsync
        self._lock = threading.Lock()
        self._index = 0
        self._last_time = 0
        self._open: dict[int, tuple[str, str]] = {}
        #: lines held by :meth:`batch` (None: each event is written at once)
        self._batch: list[bytes] | None = None
        #: called with every chunk of bytes written, in file order, under the writer's lock (see :meth:`follow`)
        self._tee: Callable[[bytes], None] | None = None
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._header_line = _encode(header.to_json()) + b"\n"
        self._write(header.to_json())

    def follow(self, tee: Callable[[bytes], None]) -> None:
        """Hand ``tee`` every byte of the file, the header first, then each chunk as it is written.

        Why: the harness checks the history while it is written
        (:mod:`leasecheck.run.following`); handing it the bytes the file gets
        spares reading the file back, and makes what it checks the file itself.
        ``tee`` runs under the writer's lock: it must only hand the bytes on.
        """
        with self._lock:
            tee(self._header_line)
            self._tee = tee

    @property
    def events(self) -> int:
        """How many events (not counting the header) have been written."""
        return self._index

    def outstanding(self, process: int) -> bool:
        """Has ``process`` an op invoked but not completed?"""
        return process in self._open

    def now(self) -> int:
        """The history time of this instant, in nanoseconds since the start."""
        return self._clock() - self._start

    def _write(self, obj: dict[str, Any]) -> None:
        line = _encode(obj) + b"\n"
        if self._batch is not None:
            self._batch.append(line)
            return
        os.write(self._fd, line)
        if self._fsync:
            os.fsync(self._fd)
        if self._tee is not None:
            self._tee(line)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Write the events recorded inside in one ``write`` when it ends (the harness's merge writes many at once)."""
        with self._lock:
            self._batch = []
        try:
            yield
        finally:
            with self._lock:
                lines, self._batch = self._batch, None
                if lines and self._fd >= 0:
                    data = b"".join(lines)
                    os.write(self._fd, data)
                    if self._fsync:
                        os.fsync(self._fd)
                    if self._tee is not None:
                        self._tee(data)

    def _event(self, process: int | str, type_: str, f: str, node: str | None, value: Any, at: int | None) -> int:
        with self._lock:
            return self._event_locked(process, type_, f, node, value, at)

    def _event_locked(self, process: int | str, type_: str, f: str, node: str | None, value: Any, at: int | None) -> int:
        if self._fd < 0:
            raise ValueError("history writer is closed")
        t = self.now() if at is None else at
        t = max(t, self._last_time)
        index = self._index
        ev: dict[str, Any] = {"index": index, "time": t, "process": process, "type": type_, "f": f}
        if node is not None:
            ev["node"] = node
        ev["value"] = value
        self._write(ev)
        self._index = index + 1
        self._last_time = t
        return index

    def invoke(self, process: int, f: str, node: str, value: dict[str, Any], *, at: int | None = None) -> int:
        """Record that ``process`` starts ``f`` on ``node``; returns the op's index."""
        if process in self._open:
            raise ValueError(f"process {process} already has an op outstanding")
        self._open[process] = (f, node)
        return self._event(process, "invoke", f, node, value, at)

    def complete(self, process: int, type_: str, value: dict[str, Any] | None = None, *, at: int | None = None) -> int:
        """Record the completion (``ok``, ``fail`` or ``info``) of ``process``'s open op."""
        if type_ not in ("ok", "fail", "info"):
            raise ValueError(f"completion type must be ok, fail or info, not {type_!r}")
        try:
            f, node = self._open.pop(process)
        except KeyError:
            raise ValueError(f"process {process} has no op outstanding") from None
        return self._event(process, type_, f, node, {} if value is None else value, at)

    def nemesis(self, f: str, value: Any = None, *, at: int | None = None) -> int:
        """Record a fault event (start, end or heal of a nemesis)."""
        return self._event(NEMESIS, "info", f, None, value, at)

    def close(self) -> None:
        """Finish the history: write its ``history-end`` event (ops still open stay open: they count as ``info``),
        then close the file. Every normal end of a writer, an interrupted run's included, is this."""
        with self._lock:
            if self._fd >= 0:
                self._event_locked(NEMESIS, "info", HISTORY_END, None, {}, None)
                self._close_locked()

    def abandon(self) -> None:
        """Close the file without finishing the history: the harness failed, and the history must say it was never
        finished (its readers make it ``unknown``, never valid). A no-op once closed."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()
