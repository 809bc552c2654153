"""A guard that takes a server's whole process tree down with the harness.

PR_SET_PDEATHSIG kills the server process itself when the harness dies, but a
server that forks children into sessions of their own (Postgres' backends) can
leave them behind — stopped forever, if a pause was in force. The guard is a
tiny process, child of the harness, that keeps watching the server's
descendants; when the harness dies it is told so (its own parent-death signal,
SIGTERM) and SIGKILLs every process of the tree it last saw (checking each
one's start time, so a recycled pid is never hit) and every process whose
working directory is inside the server's directory (children forked since its
last look, already orphaned). It leaves quietly once the server and all its
children are gone.

A guard over a power-loss layer (:mod:`leasecheck.servers.powerfs_layer`) is also given
its mount point: once the tree is gone (the harness died, or the layer's process did), it
takes the mount off, lazily, so that no dead mount outlives them.

It is a program of its own, ``python -m leasecheck.servers.guard PID HOME [MOUNT...]``,
started by :meth:`leasecheck.servers.base.LocalServer.start` for a ``guarded``
server (see :func:`leasecheck.servers.base.start_guard`): a thread of the harness
would die with it, which is the one moment the guard exists for.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import NoReturn

from leasecheck.machine.mounts import mounted, unmount
from leasecheck.machine.processes import descendants, process_table, signal_process, start_time, working_in
from leasecheck.servers.base import die_with_parent

#: how often the guard looks at the server's tree again
LOOK_EVERY_S = 0.2


@dataclass
class Guard:
    """What the guard knows: the server's pid, its directory, and the tree it saw last (pid → start time)."""

    root: int
    #: the server's directory, resolved, with a trailing separator
    home: str
    seen: dict[int, int] = field(default_factory=dict)
    #: mounts to take off once the tree is gone (a power-loss layer's)
    mounts: tuple[str, ...] = ()

    def look(self) -> None:
        """Add the server's tree as it is now; forget the processes that exited (a zombie has: its parent, the
        harness, has not reaped it yet) or whose pid was reused."""
        table = {p.pid: p for p in process_table() if not p.exited}
        for pid in descendants(self.root, list(table.values())):
            if pid in table:
                self.seen[pid] = table[pid].start_time
        self.seen = {pid: started for pid, started in self.seen.items() if pid in table and table[pid].start_time == started}

    def kill_all(self, signum: int = signal.SIGTERM, frame: FrameType | None = None) -> NoReturn:
        """The harness died: SIGKILL everything of the server's, then leave."""
        doomed = {pid for pid, started in self.seen.items() if start_time(pid) == started}
        # children forked since the last look, orphaned by now: found by their working directory
        doomed |= set(working_in(self.home))
        for pid in doomed:
            signal_process(pid, signal.SIGKILL)
        self.unmount()
        os._exit(0)

    def unmount(self) -> None:
        for path in self.mounts:
            if mounted(path):
                unmount(path, lazy=True)

    def watch(self) -> NoReturn:
        """Look at the tree until it is gone (the server stopped): then there is nothing left to guard."""
        while True:
            self.look()
            if not self.seen:
                self.unmount()
                os._exit(0)
            time.sleep(LOOK_EVERY_S)


def main(argv: list[str]) -> NoReturn:
    """``guard PID HOME [MOUNT...]``: guard the tree of ``PID`` and every process working in ``HOME``; then take
    off each ``MOUNT``."""
    if len(argv) < 2 or not argv[0].isdigit():
        sys.exit("usage: python -m leasecheck.servers.guard PID HOME [MOUNT...]")
    die_with_parent(signal.SIGTERM)  # told when the harness dies, and then kill_all
    guard = Guard(int(argv[0]), os.path.realpath(argv[1]) + os.sep, mounts=tuple(argv[2:]))
    if os.getppid() == 1:  # the harness died before we could be told: too late to guard anything
        sys.exit(0)
    signal.signal(signal.SIGTERM, guard.kill_all)
    guard.watch()


if __name__ == "__main__":
    main(sys.argv[1:])
