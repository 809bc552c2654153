"""When and how to split a history for checking: its size against the memory a check may take, and the cores.

:mod:`leasecheck.checker.partitioned` does the splitting; this module only
decides, from the file's size alone, so that checking a small history imports
and writes nothing more than it always did.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from dataclasses import dataclass

#: below this size a history is checked in memory by one process, however many jobs are allowed: sharing
#: the work costs a fifth more CPU (each op is written out and read back), and spawned workers ~0.1 s each
#: of imports, which two cores only win back above ~64 MB (~250 k ops); memory is no concern there
PARALLEL_MIN_BYTES = 64 << 20
#: the same when the workers are forked (:func:`forks`): up in milliseconds, they win from ~8 MB (~30 k ops)
FORKED_PARALLEL_MIN_BYTES = 8 << 20
#: one process checks a history in memory up to this size (~3 bytes of memory per byte of history)
SERIAL_MAX_BYTES = 384 << 20
#: a partition's share of the history at most, and what all the partitions checked at once may add up to
#: (~3 bytes of memory per byte of history). Small on purpose: a process checks its partitions one after
#: the other, and the ~12 MB of ops a 4 MB partition becomes is reused by the next one where a 48 MB one's
#: ~150 MB was handed back to the system and faulted in again: at a million real-shaped ops on 2 cores,
#: a tenth less CPU, a third of the page faults and 100 MB of peak memory rather than 175 MB
PARTITION_BYTES = 4 << 20
IN_FLIGHT_BYTES = 320 << 20
#: the byte range one process reads at a time when the reading is shared
CHUNK_BYTES = 32 << 20


@dataclass(frozen=True, slots=True)
class Split:
    """How to check one history: in ``partitions`` parts, on ``jobs`` processes, reading ``chunks`` byte ranges side by side."""

    partitions: int
    jobs: int
    #: 1: the caller reads the whole file
    chunks: int = 1


def forks() -> bool:
    """Can worker processes be forked here? Only on Linux and with no other thread in this process (the
    CLI's ``check``): a fork of a process with threads (the runner's) may copy a lock another thread
    held, and hang on it; such a caller's workers are spawned."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


def available_cores() -> int:
    """The cores this process may run on (what ``--jobs`` defaults to)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def plan(source: object, jobs: int, partitions: int | None = None, chunks: int | None = None) -> Split | None:
    """How to split ``source``, or None to check it in memory as one piece.

    Only a file is split (a history given as lines is in memory already). A
    small file is never split: the in-memory path is the fastest there and
    writes nothing. ``partitions`` (and ``chunks``) force a split: tests hold
    the merged verdict to the single one with them.
    """
    if not isinstance(source, (str, os.PathLike)):
        return None
    jobs = max(1, jobs)
    if partitions is not None:
        return Split(max(1, partitions), jobs, max(1, chunks if chunks is not None else (jobs if jobs > 1 else 1)))
    try:
        size = os.path.getsize(source)
    except OSError:
        return None  # the reader says what is wrong with it
    if size < ((FORKED_PARALLEL_MIN_BYTES if forks() else PARALLEL_MIN_BYTES) if jobs > 1 else SERIAL_MAX_BYTES):
        return None
    per_part = min(PARTITION_BYTES, max(1 << 20, IN_FLIGHT_BYTES // jobs))
    k = jobs * math.ceil(size / per_part / jobs)  # a multiple of the jobs: every process gets as many parts
    return Split(k, jobs, max(jobs, math.ceil(size / CHUNK_BYTES)) if jobs > 1 else 1)
