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
"""

from __future__ import annotations

import os
import subprocess
import sys

GUARD = r'''
import ctypes, os, signal, sys, time
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: told when the harness dies
root = int(sys.argv[1])
home = os.path.realpath(sys.argv[2]) + os.sep
if os.getppid() == 1:
    sys.exit(0)

def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None

def tree():
    children = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(e))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out

def lives_in_home(pid):
    """A process working in the server's directory is the server's (Postgres backends run in it)."""
    try:
        return (os.path.realpath(f"/proc/{pid}/cwd") + os.sep).startswith(home)
    except OSError:
        return False

seen = {}
def kill_all(*_):
    doomed = {pid for pid, st in seen.items() if start_time(pid) == st}
    # children forked since the last look, orphaned by now: found by their working directory
    doomed |= {int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != os.getpid() and lives_in_home(int(e))}
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(0)

signal.signal(signal.SIGTERM, kill_all)
while True:
    for pid in tree():
        st = start_time(pid)
        if st is not None:
            seen[pid] = st
    seen = {p: st for p, st in seen.items() if start_time(p) == st}
    if not seen:
        os._exit(0)
    time.sleep(0.2)
'''


def guard(pid: int, home: str | os.PathLike[str]) -> subprocess.Popen[bytes]:
    """Start a guard over ``pid``'s process tree and every process working in ``home``."""
    return subprocess.Popen(
        [sys.executable, "-c", GUARD, str(pid), os.fspath(home)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_guard(proc: subprocess.Popen[bytes] | None) -> None:
    """The server stopped on purpose: the guard has nothing left to do."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
