"""The machine's mounts as /proc/mounts shows them: which are leasecheck's power-loss layers, and taking them off.

The power-loss layer (:mod:`leasecheck.servers.powerfs`) is a FUSE file system served by
a process of ours, named ``leasecheck-powerfs-PID`` after that process. A layer whose
process died (SIGKILLed, or its harness was) leaves its mount behind, dead: every access
to it fails with ENOTCONN. This module is the one place that unmounts one: the harness
at the end of a store's life (:class:`leasecheck.servers.powerfs_layer.PowerLayer`), the
guard after a killed harness (:mod:`leasecheck.servers.guard`), and ``leasecheck heal``
(through :func:`leasecheck.rundir.files.remove_leftovers`), which takes off every layer
whose process is gone or orphaned, and never a live run's.

Here, beside the process table (:mod:`.processes`), because all three read it, and the
run folder's clean-up may not import the servers.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from dataclasses import dataclass

from leasecheck.machine.processes import Process, read_process, signal_process

#: the layer's mounts are named ``POWERFS_FSNAME-PID`` (PID: the layer's process)
POWERFS_FSNAME = "leasecheck-powerfs"
_NAME = re.compile(rf"^{re.escape(POWERFS_FSNAME)}-(\d+)$")
#: the program that serves a layer, as its command line names it
_PROGRAM = b"leasecheck.servers.powerfs"


@dataclass(frozen=True)
class Mount:
    """One line of /proc/mounts: what is mounted (``source``), where, and its type."""

    source: str
    target: str
    fstype: str


def _unescape(field: str) -> str:
    """/proc/mounts writes a space, tab, newline or backslash of a path as an octal escape (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(table: str = "/proc/mounts") -> list[Mount]:
    """Every mount of the machine (of this mount namespace), read now."""
    with open(table) as f:
        return [Mount(_unescape(fields[0]), _unescape(fields[1]), fields[2])
                for fields in (line.split() for line in f) if len(fields) >= 3]


def powerfs_mounts(table: str = "/proc/mounts") -> list[tuple[int, str]]:
    """The power-loss layers mounted now: (the layer's pid, the mount point)."""
    found = []
    for mount in mounts(table):
        m = _NAME.match(mount.source)
        if m is not None and mount.fstype.startswith("fuse"):
            found.append((int(m.group(1)), mount.target))
    return found


def mounted(path: str) -> bool:
    """Is a power-loss layer mounted at ``path`` now (dead or alive)?"""
    return any(target == path for _, target in powerfs_mounts())


def unmount(path: str, lazy: bool = False) -> str | None:
    """Take the layer at ``path`` off (``fusermount3 -u``, ``-z`` when ``lazy``: detached now, gone once nothing uses
    it); None once done, else why not (one line). A lazy unmount is for clean-ups: a dead layer's, or one whose users
    may still hold files open."""
    tool = shutil.which("fusermount3") or shutil.which("umount")
    if tool is None:
        return "neither fusermount3 nor umount is on PATH (apt-get install fuse3)"
    flags = (["-u", "-z"] if lazy else ["-u"]) if tool.endswith("fusermount3") else (["-l"] if lazy else [])
    done = subprocess.run([tool, *flags, path], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode == 0 or not mounted(path):
        return None
    return (done.stderr or done.stdout).strip().splitlines()[-1] if (done.stderr or done.stdout).strip() else f"exit {done.returncode}"


def _layer(pid: int) -> Process | None:
    """``pid`` if it is a layer's process, alive (a recycled pid running something else is not)."""
    process = read_process(pid)
    if process is None or process.exited:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return process if _PROGRAM in f.read() else None
    except OSError:
        return None


def unmount_orphans() -> list[str]:
    """Take off every layer whose process is gone, or whose harness is (its process, re-parented to init, is ended
    first): the mount points taken off. A live run's layers are left alone."""
    done = []
    for pid, target in powerfs_mounts():
        layer = _layer(pid)
        if layer is not None and layer.ppid != 1:
            continue
        if layer is not None:
            signal_process(pid, signal.SIGTERM)  # libfuse's handler ends its loop and unmounts
        if unmount(target, lazy=True) is None:
            done.append(target)
    return done
