"""Closing nodes while the run goes: each settled node read once more, judged and forgotten, so a soak stays flat.

A night-long run produces nodes for hours. Kept to the end, their ops, their
leases and the queue's books would grow all night; so a node is *closed* as soon
as nothing can touch it again: the queue has it done and holds no copy of it, no
live worker works on it or may still read it (a worker reads one of the last
nodes it claimed now and then: the recorder keeps the same list), no race holds
it, and its last op completed a ttl and the clock uncertainty ago, so every lease
of it is surely over. The closer then reads it, as the final phase reads every
node, through a client of its own under a process number of its own; the read
goes into the history through the merge (stamped under its lock, so in time
order), the checker that follows the run (:mod:`leasecheck.run.following`) judges
the node once that read is in and drops its ops, and the harness forgets it.

The reads (its protected resource, then its record: :func:`~leasecheck.run.final_reads.last_reads`)
are the node's last ops, as the final phase's would have been: the offline
checker sees ordinary reads and judges the node the same way.
Whatever the closer had not read when the run ends is read by the final phase.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from leasecheck.run.deliveries import Deliveries
from leasecheck.run.final_reads import last_reads
from leasecheck.run.following import Following
from leasecheck.run.merge import Merge
from leasecheck.run.takeovers import Takeovers
from leasecheck.targets.base import Target
from leasecheck.targets.registry import TargetSpec

if TYPE_CHECKING:  # the recorder imports this module's type the same way: neither needs the other to load
    from leasecheck.run.recorder import Recorder

log = logging.getLogger("leasecheck.run")

#: how often the recorder's thread looks for settled nodes (seconds)
SETTLE_EVERY_S = 0.5


class Closer:
    """Finds settled nodes (on the recorder's thread) and reads them (on a thread of its own); see the module docstring."""

    def __init__(self, spec: TargetSpec, merge: Merge, deliveries: Deliveries, takeovers: Takeovers,
                 following: Following, new_process: Callable[[], int], quiet_s: float) -> None:
        self.spec = spec
        self.merge = merge
        self.deliveries = deliveries
        self.takeovers = takeovers
        self.following = following
        self.new_process = new_process
        self.quiet_s = quiet_s
        #: nodes closed so far
        self.closed = 0
        self.error: BaseException | None = None
        # the recorder's thread alone touches these three
        self._last_done: dict[str, float] = {}
        self._closing: set[str] = set()
        self._due = 0.0
        self._todo: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._read, name="closer", daemon=True)

    @classmethod
    def started(cls, spec: TargetSpec, merge: Merge, deliveries: Deliveries, recorder: Recorder, following: Following,
                quiet_s: float) -> Closer:
        """A closer fed by ``recorder``'s thread, its reading thread started."""
        closer = cls(spec, merge, deliveries, recorder.takeovers, following, recorder.new_process, quiet_s)
        recorder.closer = closer
        closer._thread.start()
        return closer

    def stop(self) -> None:
        """Read what was handed over already, then stop; forget what was closed (the recorder's thread is gone: the
        final phase, which reads every node left, must not read a closed one again)."""
        self._todo.put(None)
        if self._thread.ident is not None:
            self._thread.join(60)
        self.tick(-1.0, set)

    # ------------------------------------------------------------------ the recorder's thread

    def completed(self, node: str) -> None:
        """An op of ``node`` completed now."""
        self._last_done[node] = time.monotonic()

    def tick(self, now: float, busy: Callable[[], set[str]]) -> None:
        """Forget the nodes closed since the last tick; every SETTLE_EVERY_S, hand the settled ones to the reader."""
        while not self._done.empty():
            node = self._done.get_nowait()
            self._closing.discard(node)
            self._last_done.pop(node, None)
            self.deliveries.close(node)
            self.takeovers.forget(node)
        if now < self._due or self.error is not None:
            return
        self._due = now + SETTLE_EVERY_S
        taken = busy() | self._closing
        for node in self.deliveries.settled(taken):
            if now - self._last_done.get(node, 0.0) >= self.quiet_s:
                self._closing.add(node)
                self._todo.put(node)

    # ------------------------------------------------------------------ the closer's thread

    def _emit(self, process: int, node: str, typ: str, f: str, value: dict[str, Any]) -> None:
        self.merge.harness_op(process, typ, f, node, value)

    def _read(self) -> None:
        reader: Target | None = None
        process = -1
        try:
            while (node := self._todo.get()) is not None:
                if reader is None:
                    reader, process = self.spec.make(), self.new_process()
                self.following.close_after(node, process)  # before the read: the checker must know it when it sees it
                emit = partial(self._emit, process, node)
                # a read that failed retires its process; the node is forgotten all the same (if its record was never
                # read, the checker judges it with the rest at the end)
                if not last_reads(reader, node, emit):
                    reader.close()
                    reader = None
                self.closed += 1
                self._done.put(node)
        except BaseException as e:  # a bug of ours: nodes are left to the final phase, the run goes on
            self.error = e
            log.warning("closing nodes failed (%s: %s); the final phase reads the rest", type(e).__name__, e, exc_info=e)
        finally:
            if reader is not None:
                reader.close()


__all__ = ["SETTLE_EVERY_S", "Closer"]
