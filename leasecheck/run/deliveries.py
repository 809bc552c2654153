"""The at-least-once queue of nodes the recorder hands out to the workers, and the names of its nodes.

A real consumer of a job queue (SQS, a Redis stream with a pending-entries
list) sees the same job twice: a duplicated delivery, or a redelivery after its
visibility timeout while the first holder still works on it. That is the
workload's contention: two claims for one node, one of them by a worker whose
lease may already be gone. :class:`Deliveries` reproduces it, seeded; the
recorder (:mod:`leasecheck.run.recorder`) asks it for a node whenever a worker
wants one.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable

from leasecheck.targets.base import Indeterminate, Unavailable

#: share of deliveries whose consumer extends the message's visibility with every heartbeat (as
#: SQS's ChangeMessageVisibility would): its node comes back as soon as the holder went silent.
#: The others come back a visibility timeout after delivery, heartbeats or not, so a live lease
#: meets a second claim (a duplicate delivery of a running node) as it does with a plain queue
EXTENDED_SHARE = 0.5

#: share of duplicated deliveries handed to two workers at the same moment (the hub holds the
#: first back until a second worker asks), so that two claims race for one READY node; the
#: rest reach the next worker that asks, usually while the first holds the lease
RACING_SHARE = 0.5
#: while the run's coverage goal is short of ``claim-race-ready`` (:attr:`Deliveries.race_more`), the share of first
#: deliveries duplicated, every copy raced: left to ``--dup-rate``, 2 in 100 deliveries raced a READY node and a
#: default gate reached the situation 0-2 times in 40 s
STEERED_RACES = 0.3


def node_name(run_id: str, run: int, index: int) -> str:
    """The queue's name for node ``index`` of workflow run ``run``: ``RUNID/run-N/node-I``."""
    return f"{run_id}/run-{run}/node-{index}" if run_id else f"run-{run}/node-{index}"


class Deliveries:
    """An at-least-once queue of nodes, produced in runs (``RUNID/run-N/node-I``: see :func:`node_name`).

    Each delivery may be duplicated (``dup_rate``); a node not acknowledged as
    done within ``visibility_s`` is delivered again, as SQS or a Redis stream
    with a pending-entries list would. For half the deliveries (seeded) every
    sign of life of the holder (an ok claim or renew, :meth:`touch`) extends
    that, as a worker that heartbeats its message's visibility does: the node
    comes back as soon as its holder went silent. The other half come back a
    visibility timeout after delivery, even while a long execution heartbeats. A producer thread creates each run's
    nodes in the store (READY) ahead of need, so a slow store never stalls the
    hub.
    """

    def __init__(self, rng: random.Random, nodes_per_run: int, dup_rate: float, visibility_s: float,
                 add_nodes: Callable[[list[str]], None], run_id: str = "") -> None:
        self.rng = rng
        self.run_id = run_id
        self.nodes_per_run = nodes_per_run
        self.dup_rate = dup_rate
        self.visibility_s = visibility_s
        self.add_nodes = add_nodes
        self.ready: deque[str] = deque()
        self.inflight: dict[str, float] = {}
        #: the in-flight nodes whose consumer extends the visibility with every heartbeat
        self.extended: set[str] = set()
        self.done: set[str] = set()
        #: every node produced and not yet closed (see :meth:`close`), in the order produced
        self.unclosed: dict[str, None] = {}
        self.runs = 0
        #: the node whose duplicate, delivered just now, should race the original
        self._racing: str | None = None
        self.delivered = 0
        self.duplicated = 0
        #: does the run want more claims racing for a READY node now? (the runner's deadline; only with --dup-rate > 0)
        self.race_more: Callable[[], bool] = lambda: False
        self._lock = threading.Lock()
        self._want = threading.Event()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._produce, name="producer", daemon=True)

    def start(self) -> None:
        self._want.set()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._want.set()
        if self._thread.ident is not None:
            self._thread.join(30)

    def _produce(self) -> None:
        while not self._stop.is_set():
            self._want.wait()
            self._want.clear()
            if self._stop.is_set():
                return
            self.runs += 1
            nodes = [node_name(self.run_id, self.runs, i) for i in range(self.nodes_per_run)]
            try:
                while not self._create(nodes):
                    if self._stop.wait(0.1):
                        return
            except BaseException as e:  # an adapter bug: reported by the runner
                self.error = e
                return
            self.rng.shuffle(nodes)
            with self._lock:
                self.unclosed.update(dict.fromkeys(sorted(nodes, key=lambda n: int(n.rpartition("-")[2]))))
                self.ready.extend(nodes)

    def _create(self, nodes: list[str]) -> bool:
        """Create a run's nodes; False while the store is down (a nemesis may have it), to retry."""
        try:
            self.add_nodes(nodes)  # idempotent: retrying after an unknown outcome is safe
            return True
        except (Unavailable, Indeterminate):
            return False

    def next(self) -> str:
        """A node to work on, or "" when none is ready yet (the worker asks again)."""
        now = time.monotonic()
        with self._lock:
            for node, deadline in list(self.inflight.items()):
                if deadline < now:
                    self.inflight[node] = now + self.visibility_s
                    self.ready.appendleft(node)
            if len(self.ready) < max(2, self.nodes_per_run):
                self._want.set()
            if not self.ready:
                return ""
            node = self.ready.popleft()
            self.delivered += 1
            steer = node not in self.inflight and node not in self.done and self.dup_rate > 0 and self.race_more()
            if node not in self.done:
                self.inflight.setdefault(node, now + self.visibility_s)
                if self.rng.random() < EXTENDED_SHARE:
                    self.extended.add(node)
                else:
                    self.extended.discard(node)
            self._racing = None
            if self.rng.random() < (max(self.dup_rate, STEERED_RACES) if steer else self.dup_rate):
                self.duplicated += 1
                self.ready.appendleft(node)  # the copy goes to the very next consumer
                if self.rng.random() < (1.0 if steer else RACING_SHARE):
                    self._racing = node
            return node

    def duplicate(self, node: str) -> str:
        """``node`` delivered once more, out of turn (a duplicate the steering hands a lagging-clock worker)."""
        with self._lock:
            self.delivered += 1
            self.duplicated += 1
        return node

    def copy_waits(self, node: str) -> bool:
        """Was ``node`` just delivered twice, the copy meant to race the original (see :data:`RACING_SHARE`)?"""
        with self._lock:
            return self._racing == node and bool(self.ready) and self.ready[0] == node

    def touch(self, node: str) -> None:
        """The node's holder is alive (an ok claim or renew): deliver it again only ``visibility_s`` from now,
        if this delivery's consumer extends its message's visibility (see :data:`EXTENDED_SHARE`)."""
        with self._lock:
            if node in self.inflight and node in self.extended:
                self.inflight[node] = time.monotonic() + self.visibility_s

    def requeue(self, node: str) -> None:
        """The node was given back (released): hand it out again first, as a nack would."""
        with self._lock:
            if node not in self.done:
                self.inflight.pop(node, None)
                self.ready.appendleft(node)

    def settled(self, busy: set[str]) -> list[str]:
        """The done nodes the queue will never hand out again (no copy waits in it) and no worker is ``busy`` with."""
        with self._lock:
            waiting = set(self.ready)
            return [n for n in self.done if n not in waiting and n not in busy]

    def close(self, node: str) -> None:
        """``node`` was read for the last time: forget it (it is never handed out again: done, no copy queued)."""
        with self._lock:
            self.done.discard(node)
            self.unclosed.pop(node, None)

    def ack(self, node: str) -> None:
        with self._lock:
            self.done.add(node)
            self.inflight.pop(node, None)
            self.extended.discard(node)
