"""Duplicated deliveries raced on purpose: two workers handed one node at once, their claims invoked together.

The at-least-once queue duplicates some deliveries (``--dup-rate``). Left to chance, the copy reaches a second worker
long after the first claimed, and the history never shows two claims of a READY node in flight together
(``claim-race-ready``). So the recorder holds a duplicate back (:attr:`Races.twin`) until a second worker asks, hands
the node to both, and lets neither claim reach the store until both are invoked: the history then shows them
concurrent however fast the store answers the first. This is the recorder's state for that, apart from the pipe
serving (:mod:`leasecheck.run.recorder`), which answers through the ``send`` it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from multiprocessing.connection import Connection


class Races:
    """The races in progress: a duplicate held for a second worker, each race's racers, the claims waiting for a rival."""

    def __init__(self, send: Callable[[Connection, object], None]) -> None:
        self._send = send
        #: a duplicated delivery held back until a second worker asks, so that both claim at once: (conn, node, deadline)
        self.twin: tuple[Connection, str, float] | None = None
        #: the two workers a racing node went to, until each has invoked its claim: node -> (conns, deadline)
        self.racers: dict[str, tuple[set[Connection], float]] = {}
        #: a racer's claim, recorded but not yet acknowledged, waiting for its rival's: node -> conn
        self.on_the_line: dict[str, Connection] = {}

    def nodes(self) -> set[str]:
        """The nodes a race holds (a live worker may still send an op on them)."""
        held = set(self.racers) | set(self.on_the_line)
        if self.twin is not None:
            held.add(self.twin[1])
        return held

    def start(self, node: str, first: Connection, second: Connection, deadline: float) -> None:
        """``node`` goes to both workers at once; a racer of its last race still waiting goes now (that race is over)."""
        earlier = self.on_the_line.pop(node, None)
        if earlier is not None:
            self._send(earlier, True)
        self.racers[node] = ({first, second}, deadline)

    def start_stale(self, stopping: bool) -> None:
        """A racer whose rival never claimed in time (it died, or read first for long) goes alone."""
        now = time.monotonic()
        for node, (_, deadline) in list(self.racers.items()):
            if deadline < now or stopping:
                del self.racers[node]
                waiting = self.on_the_line.pop(node, None)
                if waiting is not None:
                    self._send(waiting, True)

    def claim_invoked(self, conn: Connection, node: str) -> bool:
        """A claim was recorded: may its worker go to the store now? Not the first of two racers: it waits for the second.

        Both claims are then invoked before either is sent, so the history shows
        them concurrent however fast the store answers the first.
        """
        racing = self.racers.get(node)
        if racing is None or conn not in racing[0]:
            return True
        racing[0].discard(conn)
        if racing[0]:  # the rival has not claimed yet
            self.on_the_line[node] = conn
            return False
        del self.racers[node]
        waiting = self.on_the_line.pop(node, None)
        if waiting is not None:
            self._send(waiting, True)
        return True
