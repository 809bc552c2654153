"""The machine's processes as /proc shows them: who is whose child, who is still alive.

Why our own reading of /proc and not psutil: the faults and their undo run in
the harness and in ``leasecheck heal``, and the guard (:mod:`leasecheck.servers.guard`)
runs as a bare interpreter that must start in milliseconds; all need only the
parent, the state and the start time of each process, which one read of
``/proc/<pid>/stat`` gives. Why trees at all: Postgres' children leave the
postmaster's process group (each calls ``setsid()``), so "the server and
everything below it" can only be found by walking parent links.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Process:
    """One line of the process table: enough to walk trees and to recognise a recycled pid."""

    pid: int
    ppid: int
    #: ``R``, ``S``, ``T`` (stopped), ``Z`` (zombie: exited, not yet reaped) ...
    state: str
    #: clock ticks after boot at which it started: the same pid with another start time is another process
    start_time: int

    @property
    def exited(self) -> bool:
        """A zombie has exited: it runs nothing and holds no memory, only its exit status."""
        return self.state == "Z"


def read_process(pid: int) -> Process | None:
    """``pid``'s line of the table, or None if there is no such process (any more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) is in parentheses and may hold spaces or ")"
            fields = f.read().rsplit(")", 1)[1].split()
        return Process(pid, int(fields[1]), fields[0], int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def process_table() -> list[Process]:
    """Every process of the machine, read now (one that exits meanwhile is left out)."""
    table = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            process = read_process(int(entry))
            if process is not None:
                table.append(process)
    return table


def start_time(pid: int) -> int | None:
    """When ``pid`` started (None if it does not exist): compare two readings to tell a recycled pid."""
    process = read_process(pid)
    return None if process is None else process.start_time


def descendants(pid: int, table: list[Process] | None = None) -> list[int]:
    """``pid`` and every process below it (zombies included), from ``table`` or a fresh reading."""
    children: dict[int, list[int]] = {}
    for process in process_table() if table is None else table:
        children.setdefault(process.ppid, []).append(process.pid)
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def children(pid: int) -> list[int]:
    """``pid``'s direct children that have not exited."""
    return [p.pid for p in process_table() if p.ppid == pid and not p.exited]


def running(pids: list[int]) -> set[int]:
    """Those of ``pids`` that have not exited (a zombie has)."""
    wanted = set(pids)
    return {p.pid for p in process_table() if p.pid in wanted and not p.exited}


def working_in(directory: str) -> list[int]:
    """Processes (not exited) whose working directory is ``directory`` or below it.

    Postgres backends run in the data directory: this finds one forked in the
    instant before its postmaster died, already orphaned and so no longer
    anyone's child.
    """
    home = os.path.realpath(directory) + os.sep
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd") + os.sep  # fails for a zombie: it has none
            except OSError:
                continue
            if cwd.startswith(home):
                found.append(int(entry))
    return found


def stopped(pid: int) -> bool:
    """``pid`` is stopped by a signal (or gone): a stopped process forks nothing more."""
    process = read_process(pid)
    return process is None or process.state in ("T", "t") or process.exited


def freeze(pid: int, timeout: float = 5.0) -> list[int] | None:
    """SIGSTOP ``pid``, wait until it is stopped, and return what runs below it (not exited).

    A signal lands after ``kill()`` returns: a fork in flight finishes first, so
    the tree is read only once ``pid`` is stopped; then it forks nothing more,
    and no child is missed. Empty if there is no such process.
    """
    if not signal_process(pid, signal.SIGSTOP):
        return []
    deadline = time.monotonic() + timeout
    while not stopped(pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    table = process_table()
    alive = {p.pid for p in table if not p.exited}
    return [p for p in descendants(pid, table)[1:] if p in alive]


def signal_process(pid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``pid``; False if there is no such process (any more), which is no error here."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
