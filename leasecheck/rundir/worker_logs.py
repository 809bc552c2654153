"""The run's per-worker logs: what makes a history survive a crash of the harness.

The harness writes ``history.jsonl`` as it merges the workers' streams
(:mod:`leasecheck.run.merge`), so at any moment some stamped events exist only in
its memory or in the pipes. Each worker therefore also appends every event it
stamps to its own log, ``RUN_DIR/workers/worker-<slot>.jsonl``, written (not
fsynced: a dead process's writes stay in the page cache) before it sends the
event and, for an invoke, before it talks to the store. The harness journals
the nemesis events it stamps in ``RUN_DIR/workers/harness.jsonl`` and holds an
exclusive ``flock`` on that file for the whole run: the kernel drops it when the
harness dies, however it dies.

:func:`recover` (``leasecheck check RUN_DIR``, ``leasecheck heal RUN_DIR``) takes
that lock, so it never touches a live run's history, and appends to the history
what the logs hold beyond it: for each process, the events past those the
history already has (the history holds a prefix of each worker's stream, plus
at most the ``info`` the harness wrote for a worker that died, which ends the
process), and the nemesis events past those written, in time order. A normal
run removes the folder once everything is merged.

Recovery never finishes the history: it writes no ``history-end`` event (only
the harness's writer does, at its normal end), so a recovered history still
says its writer never finished it, and is never valid. A history that has its
``history-end`` event was finished, and is left as it is.
"""

from __future__ import annotations

import fcntl
import heapq
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from leasecheck.histories.format import HISTORY_END, NEMESIS, Stamped
from leasecheck.rundir.runfolder import RunFolder

#: the run folder's subfolder of worker logs
WORKERS_DIR = "workers"
#: the harness's journal of nemesis events (and the lock that says the harness is alive)
JOURNAL = "harness.jsonl"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class _Seen(msgspec.Struct):
    """What recovery needs of a history line."""

    index: int
    time: int
    process: int | str
    type: str
    f: str = ""
    node: str | None = None


class WorkerLog:
    """A worker's append-only log of the events it stamps (a write per event, or per invoke with the completion before it)."""

    def __init__(self, folder: str | os.PathLike[str], slot: int) -> None:
        self._fd = os.open(Path(folder) / f"worker-{slot}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, time: int, process: int, type_: str, f: str, node: str, value: Any) -> None:
        os.write(self._fd, self.line(time, process, type_, f, node, value))

    @staticmethod
    def line(time: int, process: int, type_: str, f: str, node: str, value: Any) -> bytes:
        """One event as its log line."""
        return _encode(Stamped(time, process, type_, f, node, value)) + b"\n"

    def write_bytes(self, lines: bytes) -> None:
        """Whole lines made by :meth:`line`, in one write."""
        os.write(self._fd, lines)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Journal:
    """The harness's journal of nemesis events; holds the run's lock while open."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.folder / JOURNAL, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def nemesis(self, time: int, f: str, value: Any) -> None:
        os.write(self._fd, _encode(Stamped(time, NEMESIS, "info", f, None, value)) + b"\n")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        """Everything is in the history: the logs are redundant now."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _lines(path: Path) -> list[Stamped]:
    """A log's whole lines (a line cut short by a kill mid-write is dropped)."""
    out: list[Stamped] = []
    decode = msgspec.json.Decoder(Stamped).decode
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                out.append(decode(raw))
            except msgspec.MsgspecError:
                break
    return out


def _harness_alive(folder: Path) -> bool:
    """Does a live harness hold the run's lock?"""
    try:
        fd = os.open(folder / JOURNAL, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if we took it
    return False


def harness_alive(run_dir: str | os.PathLike[str]) -> bool:
    """Is the run's harness still running (it holds the lock of its journal)?"""
    return _harness_alive(Path(run_dir) / WORKERS_DIR)


def recover(run_dir: str | os.PathLike[str]) -> int | None:
    """Append to ``run_dir/history.jsonl`` what the worker logs hold beyond it; the number of events added.

    None when there is nothing to recover from (no logs: the run ended
    normally) or the run's harness is still alive.
    """
    run_dir = Path(run_dir)
    folder, history = run_dir / WORKERS_DIR, RunFolder(run_dir).history
    if not folder.is_dir() or not history.is_file() or _harness_alive(folder):
        return None
    data = history.read_bytes()
    end = data.rfind(b"\n") + 1  # a line the harness was killed writing is cut off
    seen: Counter[int | str] = Counter()
    index, last = 0, 0
    decode = msgspec.json.Decoder(_Seen).decode
    for i, raw in enumerate(data[:end].splitlines()):
        if i == 0 or not raw.strip():
            continue
        try:
            ev = decode(raw)
        except msgspec.MsgspecError:
            return None  # not a history we wrote: leave it to the checker to report
        if ev.f == HISTORY_END and ev.process == NEMESIS:
            return None  # finished by its writer: nothing to add, and nothing may follow its end
        seen[ev.process] += 1
        index, last = ev.index + 1, max(last, ev.time)
    added: list[tuple[int, int, Stamped]] = []
    for n, path in enumerate(sorted(folder.glob("*.jsonl"))):
        per_process: Counter[int | str] = Counter()
        for k, line in enumerate(_lines(path)):
            per_process[line.process] += 1
            if per_process[line.process] > seen[line.process]:
                heapq.heappush(added, (line.time, n * 1_000_000_000 + k, line))
    count = 0
    with open(history, "r+b") as f:
        f.truncate(end)
        f.seek(end)
        while added:
            _, _, line = heapq.heappop(added)
            t = max(last, line.time)
            out: dict[str, Any] = {"index": index, "time": t, "process": line.process, "type": line.type, "f": line.f}
            if line.node is not None:
                out["node"] = line.node
            out["value"] = line.value
            f.write(_encode(out) + b"\n")
            index, last, count = index + 1, t, count + 1
        f.flush()
        os.fsync(f.fileno())
    shutil.rmtree(folder, ignore_errors=True)
    return count
