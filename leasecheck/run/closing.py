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

A node is forgotten only once it was read *cleanly*: its read ok and no store fault
on while it went (the checker decides, on the history: :attr:`Following.on_read`,
and closes the node then). No node is handed over while the store is out (the
nemesis says so); a read that failed, or that a store fault met, gives the node
back, to be read again on a later tick, up to :data:`CLOSING_TRIES` times, then by
the final phase once every fault is healed. So a write lost on a node under a
store fault is still proven by a read after the store came back.
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
from leasecheck.waiting import poll

if TYPE_CHECKING:  # the recorder imports this module's type the same way: neither needs the other to load
    from leasecheck.run.recorder import Recorder

log = logging.getLogger("leasecheck.run")

#: how often the recorder's thread looks for settled nodes (seconds)
SETTLE_EVERY_S = 0.5
#: how often the closer reads a node whose read was not clean before it leaves it to the final phase
CLOSING_TRIES = 3


class Closer:
    """Finds settled nodes (on the recorder's thread) and reads them (on a thread of its own); see the module docstring."""

    def __init__(self, spec: TargetSpec, merge: Merge, deliveries: Deliveries, takeovers: Takeovers,
                 following: Following, new_process: Callable[[], int], quiet_s: float,
                 store_out: Callable[[], bool] = lambda: False) -> None:
        self.spec = spec
        #: is a store fault on (the nemesis's word)? No node is read meanwhile
        self.store_out = store_out
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
        self._tries: dict[str, int] = {}
        #: nodes left to the final phase (their reads were not clean CLOSING_TRIES times)
        self._left: set[str] = set()
        self._todo: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        #: (node, closed): closed by the checker on a clean read; else given back (its read failed, or met a store fault)
        self._done: queue.SimpleQueue[tuple[str, bool]] = queue.SimpleQueue()
        #: nodes whose ok read awaits the checker's word (the closer's thread adds, the checker's removes)
        self._awaiting: set[str] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="closer", daemon=True)

    @classmethod
    def started(cls, spec: TargetSpec, merge: Merge, deliveries: Deliveries, recorder: Recorder, following: Following,
                quiet_s: float) -> Closer:
        """A closer fed by ``recorder``'s thread, its reading thread started."""
        closer = cls(spec, merge, deliveries, recorder.takeovers, following, recorder.new_process, quiet_s,
                     store_out=lambda: recorder.store_out())
        following.on_read = closer._judged
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

    def settle(self, timeout: float) -> set[str]:
        """Once the history holds every read (the merge drained): wait, up to ``timeout`` s, for the checker's word on
        each ok read, and forget the nodes it closed. The nodes still without its word (it may close them yet: the
        final phase must not read them), none if the checker failed (it closes nothing more)."""
        poll(lambda: not self._awaiting or self.following.error is not None or not self.following.is_alive(), timeout, 0.02)
        self.tick(-1.0, set)
        if self.following.error is not None or not self.following.is_alive():
            return set()
        with self._lock:
            return set(self._awaiting)

    def _judged(self, node: str, closed: bool) -> None:
        """The checker's word on an ok closing read of ``node`` (on its thread): closed, or given back."""
        with self._lock:
            self._awaiting.discard(node)
        self._done.put((node, closed))

    # ------------------------------------------------------------------ the recorder's thread

    def completed(self, node: str) -> None:
        """An op of ``node`` completed now."""
        self._last_done[node] = time.monotonic()

    def tick(self, now: float, busy: Callable[[], set[str]]) -> None:
        """Forget the nodes closed since the last tick (take back those given back); every SETTLE_EVERY_S, unless the
        store is out, hand the settled ones to the reader."""
        while not self._done.empty():
            node, closed = self._done.get_nowait()
            self._closing.discard(node)
            if not closed:  # read again on a later tick, or by the final phase
                self._tries[node] = tries = self._tries.get(node, 0) + 1
                if tries >= CLOSING_TRIES:
                    self._left.add(node)
                continue
            self.closed += 1
            self._tries.pop(node, None)
            self._last_done.pop(node, None)
            self.deliveries.close(node)
            self.takeovers.forget(node)
        if now < self._due or self.error is not None or self.store_out():
            return
        self._due = now + SETTLE_EVERY_S
        taken = busy() | self._closing | self._left
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
                if self.store_out():  # handed over before the fault began: given back untried
                    self._done.put((node, False))
                    continue
                if reader is None:
                    try:
                        reader, process = self.spec.make(), self.new_process()
                    except Exception as e:  # the store not answering yet: given back, nothing was read
                        log.info("closing %s: no client (%s: %s)", node, type(e).__name__, e)
                        self._done.put((node, False))
                        continue
                self.following.close_after(node, process)  # before the read: the checker must know it when it sees it
                with self._lock:
                    self._awaiting.add(node)  # before the read, too: the checker's word may come before it returns
                emit = partial(self._emit, process, node)
                if not last_reads(reader, node, emit):  # a read that failed retires its process; the node is given back
                    with self._lock:
                        self._awaiting.discard(node)
                    reader.close()
                    reader = None
                    self._done.put((node, False))
        except BaseException as e:  # a bug of ours: nodes are left to the final phase, the run goes on
            self.error = e
            log.warning("closing nodes failed (%s: %s); the final phase reads the rest", type(e).__name__, e, exc_info=e)
        finally:
            if reader is not None:
                reader.close()


__all__ = ["SETTLE_EVERY_S", "Closer"]
