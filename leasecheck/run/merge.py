"""The harness's merge of stamped event streams into one history, in time order.

Each worker stamps its own events with CLOCK_MONOTONIC (one clock for every
process on the host, docs/background.md "Timestamps"): the invoke before it talks to the
store, the completion after the reply, so the recorded interval contains the
real one with no round trip to the harness. The streams reach the harness out
of step with each other, so the merge holds events back until no stream can
still send an earlier one.

A stream's *bound* is the time before which it can send nothing more: the
stamp of its last event (a stream is in time order), or, while the worker
waits for the harness's answer, no limit at all (whatever it sends next is
stamped after that answer). An event is written once every live stream's bound
has reached it — the watermark — or its stream has ended. A worker paused
between two events (SIGSTOP) holds the watermark back: the history lags, and
:meth:`Merge.laggards` names the streams to listen to while the buffer is
full, so memory stays bounded; correctness never depends on the timing.

Events the harness stamps itself (nemesis events, the ``info`` of a worker that
died) are stamped under the merge's lock when they are pushed, so they are
never earlier than anything already written. The nemesis events are also
appended to the run's harness journal (:mod:`leasecheck.rundir.worker_logs`), which
recovery reads if the harness dies before writing them.
"""

from __future__ import annotations

import heapq
import math
import threading
from dataclasses import dataclass
from typing import Any

from leasecheck.histories import NEMESIS, HistoryWriter
from leasecheck.rundir.worker_logs import Journal

#: events held back at most before the recorder listens only to the streams holding the watermark
MAX_BUFFERED = 100_000


@dataclass
class Stream:
    """One worker slot's events as the merge sees them."""

    #: no event still to come from this stream is stamped before this (history ns)
    bound: int
    #: the worker waits for the harness's answer: its next event is stamped after we send it
    blocked: bool = False
    #: the worker is gone: every event of this stream has been pushed
    ended: bool = False
    #: the worker is stopped (a ``pause``) and every event it wrote before was taken in: it holds nothing back
    halted: bool = False
    #: a halt was asked for and not undone since (see :meth:`Merge.halt`)
    halt_wanted: bool = False
    #: its events are stamped no earlier than this (the moment it was continued after a halt)
    floor: int = 0


#: one event on its way to the history: (time, arrival, process, type, f, node, value); ordered by time, then
#: arrival (unique), so that a stream's events with equal stamps keep their order
Stamped = tuple[int, int, int | str, str, str, str | None, Any]


class Merge:
    """Buffers stamped events from many streams and writes them to ``writer`` in time order (see the module docstring)."""

    def __init__(self, writer: HistoryWriter, journal: Journal | None = None) -> None:
        self.writer = writer
        self.journal = journal
        self.streams: list[Stream] = []
        self._heap: list[Stamped] = []
        self._seq = 0
        self._lock = threading.Lock()
        #: every buffered event was written after every stream ended (the run's end)
        self.drained = False

    @property
    def buffered(self) -> int:
        return len(self._heap)

    def now(self) -> int:
        """The history time of this instant (the writer's clock)."""
        return self.writer.now()

    def stream(self) -> Stream:
        """A new stream (a worker about to start).

        Blocked from the start: a worker stamps nothing before the hub has
        answered its first ``next``, and that answer gives it its bound.
        """
        s = Stream(self.now(), blocked=True)
        with self._lock:
            self.streams.append(s)
        return s

    def push(self, stream: Stream, time: int, process: int, type_: str, f: str, node: str, value: Any) -> None:
        """A worker's event, stamped by the worker; its stream's bound moves up to it.

        An event stamped before the stream was last continued after a halt is
        stamped at that moment instead (see :meth:`halt`).
        """
        time = max(time, stream.floor)
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (time, self._seq, process, type_, f, node, value))
            if time > stream.bound:
                stream.bound = time

    def end(self, stream: Stream, process: int | None = None, open_op: tuple[str, str] | None = None) -> None:
        """The stream's worker died: record its open op ``info`` (stamped now), and stop waiting for it."""
        with self._lock:
            if process is not None and open_op is not None:
                self._seq += 1
                f, node = open_op
                heapq.heappush(self._heap, (self.now(), self._seq, process, "info", f, node, {"error": "worker process died"}))
            stream.ended = True
            self.streams = [s for s in self.streams if not s.ended]

    def nemesis(self, f: str, value: Any = None) -> None:
        """A nemesis event, stamped now (journalled first, so recovery has it if the harness dies)."""
        with self._lock:
            t = self.now()
            if self.journal is not None:
                self.journal.nemesis(t, f, value)
            self._seq += 1
            heapq.heappush(self._heap, (t, self._seq, NEMESIS, "info", f, None, value))

    def want_halt(self, stream: Stream) -> None:
        """The stream's worker is stopped (SIGSTOP): it may be halted once what it wrote before is taken in."""
        with self._lock:
            stream.halt_wanted = True

    def halt(self, stream: Stream) -> None:
        """Every event the stopped worker wrote is taken in: stop holding the history back for it.

        Why this is sound: a stopped worker can stamp nothing new, and what it
        stamped but had not written yet is an invoke whose op goes to the store
        only after it is written, or a completion of an op that ended earlier. Such
        an event is stamped at the moment the worker is continued (:meth:`resume`):
        the invoke is still no later than the op's start, the completion no earlier
        than its end; the recorded interval still contains the real one. Without
        this a paused worker would hold every other worker's events back, and the
        checker that follows the run would say an anomaly seconds after its proof.
        """
        with self._lock:
            if stream.halt_wanted:  # not continued meanwhile
                stream.halted = True

    def resume(self, stream: Stream) -> None:
        """The stream's worker is about to be continued: its events are stamped from now on (see :meth:`halt`)."""
        with self._lock:
            t = self.now()
            stream.halt_wanted = stream.halted = False
            stream.bound = max(stream.bound, t)
            stream.floor = t

    def harness_op(self, process: int, type_: str, f: str, node: str, value: Any) -> None:
        """An event of an op the harness does itself (a closing read), stamped now (never earlier than anything written)."""
        with self._lock:
            self._seq += 1
            heapq.heappush(self._heap, (self.now(), self._seq, process, type_, f, node, value))

    def watermark(self) -> float:
        """Every event stamped at or before this can be written: no live stream can still send an earlier one."""
        return min((s.bound for s in self.streams if not s.blocked and not s.ended and not s.halted), default=math.inf)

    def laggards(self) -> list[Stream]:
        """The streams that hold back the oldest buffered event (listen to these alone while the buffer is full)."""
        with self._lock:
            if not self._heap:
                return []
            head = self._heap[0][0]
            return [s for s in self.streams if not s.blocked and not s.ended and not s.halted and s.bound < head]

    def flush(self) -> int:
        """Write every event the watermark has passed; how many."""
        with self._lock:
            return self._write(self.watermark())

    def drain(self) -> int:
        """Write everything buffered (every worker is gone: the run's end, or its failure)."""
        with self._lock:
            n = self._write(math.inf)
            self.drained = True
            return n

    def _write(self, upto: float) -> int:
        heap, w, n = self._heap, self.writer, 0
        if not heap or heap[0][0] > upto:
            return 0
        with w.batch():  # one write for all of them
            while heap and heap[0][0] <= upto:
                t, _, process, typ, f, node, value = heapq.heappop(heap)
                if process == NEMESIS:
                    w.nemesis(f, value, at=t)
                elif typ == "invoke":
                    w.invoke(process, f, node, value, at=t)  # type: ignore[arg-type]
                else:
                    w.complete(process, typ, value, at=t)  # type: ignore[arg-type]
                n += 1
        return n
