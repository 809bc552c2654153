"""A history file read in byte ranges side by side, and the ranges joined back into the one reading.

Why: a big history is read on every core (:mod:`leasecheck.checker.partitioned`);
each process reads a :class:`HistoryChunk` of whole lines by the reader's own
rules, and the caller joins them in file order with :class:`Stitch`, which
checks the rules that span chunks. Whatever the chunks cannot settle
(:class:`ChunksDisagree`) the one-pass :class:`~leasecheck.histories.reader.HistoryReader`
settles, naming the line and the rule as it always does.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from leasecheck.histories.format import Event, Op, named_epoch
from leasecheck.histories.reader import HistoryReader, never_completed, never_completed_ops
from leasecheck.histories.rules import cut_reason


class HistoryChunk(HistoryReader):
    """One byte range of a history file (whole lines, after the header), read by the same rules.

    A chunk does not know what came before it: which ops were open, which
    processes retired, what index and time to expect. So it checks every rule
    it can on its own lines, and keeps what only the chunks before it can
    judge: its first index and time, the completions whose invoke is not in it
    (``orphans``), the first invoke of each process (that process must have
    been idle), and what it leaves open and retired. :class:`Stitch` joins
    the chunks of a file, in order, and says whether they make a history that
    :class:`HistoryReader` accepts; whenever it cannot tell, the caller reads
    the file in one pass to learn which line is wrong and why.
    """

    def __init__(self, path: str | os.PathLike[str], start: int, end: int, name: str | None = None) -> None:
        self.name = name or str(path)
        self._file = None
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        self._lines = iter(io.BytesIO(data))
        self.warnings = []
        self.nemesis = []
        self.events = 0
        self.last_time = 0
        self._consumed = False
        #: index and time of the chunk's first event (None: it has none)
        self.first_index: int | None = None
        self.first_time = 0
        self.last_index = -1
        self.lines = 0
        self.truncated_at: int | None = None
        self.end_line = None
        self.orphans: list[Any] = []
        self.open: dict[int, Any] = {}
        self.retired: set[int] = set()
        #: every process whose first event here is an invoke: that invoke's index
        self.first_invokes: dict[int, int] = {}

    def _first(self, ev: Any) -> None:
        self.first_index = ev.index
        self.first_time = ev.time

    def _truncated(self, line: int) -> None:
        self.truncated_at = line

    def _ended(self, expected: int | None, last_time: float, lines: int) -> None:
        self.events = 0 if expected is None or self.first_index is None else expected - self.first_index
        self.last_index = -1 if expected is None else expected - 1
        self.last_time = int(last_time) if self.first_index is not None else 0
        self.lines = lines

    def ops(self, open_ops: dict[int, Any] | None = None) -> Iterator[Op]:
        """The ops invoked and completed within the chunk, in completion order; raises ``HistoryError`` on a bad line.

        ``open_ops``: the dict to keep the chunk's ops in flight in (its ``open``), as the reader's."""
        if open_ops is not None:
            self.open = open_ops
        if self._consumed:
            raise RuntimeError("HistoryChunk.ops() can be iterated only once")
        self._consumed = True
        first = self.first_invokes
        for op in self._pairs(None, -math.inf, self.open, self.retired, self.orphans):
            if op.process not in first:  # a process's ops complete in order: its first is its first invoke
                first[op.process] = op.index
            yield op
        for p, inv in self.open.items():
            first.setdefault(p, inv.index)

    def summary(self) -> ChunkSummary:
        """What :class:`Stitch` needs of this chunk (after ``ops()`` ran to its end)."""
        return ChunkSummary(
            self.first_index, self.first_time, self.last_index, self.last_time, self.events, self.lines,
            self.truncated_at, self.orphans, self.open, self.retired, self.first_invokes, self.nemesis, self.end_line,
        )


@dataclass(slots=True)
class ChunkSummary:
    """What one chunk leaves for the stitching: its ends, its loose ops, and its nemesis events."""

    first_index: int | None
    first_time: int
    last_index: int
    last_time: int
    events: int
    lines: int
    truncated_at: int | None
    orphans: list[Any]
    open: dict[int, Any]
    retired: set[int]
    first_invokes: dict[int, int]
    nemesis: list[Event]
    #: the line of the chunk's ``history-end`` event, counted from the chunk's start (None: not in it)
    end_line: int | None = None


class ChunksDisagree(Exception):
    """The chunks of a file do not join into a valid history: read it in one pass to learn where and why."""


class Stitch:
    """Joins a file's chunks, in order, into what :meth:`HistoryReader.ops` gives for the whole file.

    :meth:`add` checks the rules that span chunks (index and time carry on,
    a completion's invoke is open in an earlier chunk with the same ``f`` and
    node, a process invokes only when idle and never after it retired, nothing
    follows the ``history-end`` event) and returns the ops that span chunks;
    :meth:`finish` returns the ops never completed. ``warnings``, ``nemesis``,
    ``events`` and ``cut`` end as the reader's (``promised``: the header's
    ``end_marker``).
    """

    def __init__(self, name: str, header_lines: int = 1, *, promised: bool = False) -> None:
        self.name = name
        self.promised = promised
        self.cut_line: int | None = None
        self.end_line: int | None = None
        self.warnings: list[str] = []
        self.nemesis: list[Event] = []
        self.events = 0
        self.last_time = 0
        self._lines = header_lines
        self._open: dict[int, Any] = {}
        self._retired: set[int] = set()

    def add(self, chunk: ChunkSummary) -> list[Op]:
        """The ops completed in ``chunk`` whose invoke is in an earlier one; raises :class:`ChunksDisagree`."""
        if self.end_line is not None and (chunk.first_index is not None or chunk.truncated_at is not None):
            raise ChunksDisagree(f"a line after the history-end event of line {self.end_line}")
        if chunk.truncated_at is not None:
            self.cut_line = self._lines + chunk.truncated_at
        if chunk.end_line is not None:
            self.end_line = self._lines + chunk.end_line
        self._lines += chunk.lines
        if chunk.first_index is None:
            return []
        if chunk.first_index != self.events or chunk.first_time < self.last_time:
            raise ChunksDisagree(f"chunk starts at index {chunk.first_index}, time {chunk.first_time}")
        spanning: list[Op] = []
        open_, retired = self._open, self._retired
        for ev in chunk.orphans:
            p = ev.process
            inv = open_.pop(p, None)
            first = chunk.first_invokes.get(p)
            if inv is None or (first is not None and first < ev.index):
                raise ChunksDisagree(f"completion {ev.index} of process {p} has no invoke")
            if ev.f != inv.f or (ev.node is not None and ev.node != inv.node):
                raise ChunksDisagree(f"completion {ev.index} does not match invoke {inv.index}")
            done = None if ev.type == "info" else ev.time
            spanning.append(Op(inv.index, p, inv.f, inv.node, inv.value, ev.type, ev.value, inv.time, done, ev.index,
                               named_epoch(inv.f, ev.type, inv.value, ev.value)))
        for p in chunk.first_invokes:
            if p in open_ or p in retired:
                raise ChunksDisagree(f"process {p} invokes while busy or retired")
        open_.update(chunk.open)
        retired |= chunk.retired
        self.events = chunk.last_index + 1
        self.last_time = chunk.last_time
        self.nemesis.extend(chunk.nemesis)
        return spanning

    @property
    def cut(self) -> str | None:
        """Once every chunk was added: what :attr:`HistoryReader.cut` says of the whole file."""
        return cut_reason(self.name, self.promised, self.cut_line, self.end_line, self._lines)

    def finish(self) -> list[Op]:
        """The ops never completed, as info ops (the reader's order), with the reader's warning."""
        if self._open:
            self.warnings.append(never_completed(self.name, len(self._open)))
        return list(never_completed_ops(self._open))
