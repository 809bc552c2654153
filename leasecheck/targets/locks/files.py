"""filelock (``FileLock``, ``SoftFileLock``) audited as a lease: a lock file per node, records as files beside it.

filelock is a process lock on one host: :class:`filelock.FileLock` is ``flock``
on Linux (the kernel drops it when its holder closes the file or dies), and
:class:`filelock.SoftFileLock` is a marker file that exists while held (4.x
writes the holder's PID, host and start time into it, and a contender that
finds the recorded process gone takes the marker over). Neither has a ttl, a
heartbeat or a fencing token: a holder that is alive, however stalled, holds
the lock. So ``renew`` is only the library's own answer to "do I still hold
it?", and the records are plain file writes that trust the lock, as a user of
``with FileLock(path):`` writes their job's files.

The folder ``config.url`` (the runner's fresh ``files`` folder of the run,
shared by the workers of this host) holds ``locks/`` (one lock file per node)
and ``records/`` (one JSON record per node, replaced atomically, and one
append-only effects log per node). Node names (``run-1/node-3``) are
percent-encoded into file names.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.parse
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

# filelock is imported where it is used (listing the backends must not load it)
from leasecheck.histories.vocabulary import READY
from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.locks.lockbase import Held, LockLease, Record, Records


def file_name(node: str) -> str:
    """``node`` as one file name: reversible, no separators (``run-1/node-3`` → ``run-1%2Fnode-3``)."""
    return urllib.parse.quote(node, safe="")


class FileRecords(Records):
    """Jobs' records as files: one JSON file per node, written whole and swapped in with ``os.replace``.

    Why files and not the lock file itself: a user of a file lock keeps the job
    state in ordinary files next to it, and a reader must never see half a
    record, hence write-to-temp + rename. filelock gives no fencing token, so
    only plain writes exist here: a fenced ``put`` or ``append_effect`` raises
    ValueError (a fenced mode would need a store that can compare and write in
    one step).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder) / "records"

    def _record(self, node: str) -> Path:
        return self.folder / f"{file_name(node)}.json"

    def _effects(self, node: str) -> Path:
        return self.folder / f"{file_name(node)}.effects"

    def setup(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def add_nodes(self, nodes: list[str]) -> None:
        for node in nodes:
            self._write(node, Record(READY), create=True)

    def get(self, node: str) -> Record | None:
        try:
            data = json.loads(self._record(node).read_text())
        except FileNotFoundError:
            return None
        return Record(**data)

    def put(self, node: str, changes: dict[str, Any], fence: int | None = None) -> bool:
        """A plain read-modify-write: whoever believes it holds the lock writes."""
        if fence is not None:
            raise ValueError("FileRecords has no conditional write: filelock gives no fencing token")
        current = asdict(self.get(node) or Record(READY))
        self._write(node, Record(**{**current, **changes}))
        return True

    def append_effect(self, node: str, token: str, payload: str, fence: int | None = None) -> bool:
        """One JSON line appended (``O_APPEND``: concurrent appends never interleave within a short line)."""
        if fence is not None:
            raise ValueError("FileRecords has no conditional write: filelock gives no fencing token")
        line = json.dumps({"token": token, "payload": payload}) + "\n"
        fd = os.open(self._effects(node), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return True

    def effects(self, node: str) -> list[dict[str, Any]]:
        """The node's effects log, oldest first (for tests and post-mortems)."""
        try:
            return [json.loads(line) for line in self._effects(node).read_text().splitlines()]
        except FileNotFoundError:
            return []

    def resource(self, node: str) -> tuple[int | None, list[dict[str, Any]]]:
        """The effects log in one read of the file; no fence (filelock gives none). A last line without its
        newline is an append still being written: not accepted yet, so not listed."""
        try:
            text = self._effects(node).read_text()
        except FileNotFoundError:
            return None, []
        return None, [json.loads(line) for line in text.split("\n")[:-1]]

    def close(self) -> None:
        pass

    def _write(self, node: str, record: Record, create: bool = False) -> None:
        """Write ``record`` to a temp file, then publish it: ``os.replace``, or ``os.link`` to create only if absent."""
        path = self._record(node)
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        temp.write_text(json.dumps(asdict(record)))
        try:
            if create:
                try:
                    os.link(temp, path)
                except FileExistsError:
                    pass  # another worker made it first: never overwrite a record
            else:
                os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)


FILELOCK_FIX = (
    "Valid as promised: a live holder, however stalled, keeps the lock (others wait: no expiry), a dead one "
    "frees it. Use it on one host only; if you add an expiry (SoftFileLock lifetime, SoftFileLease), also fence "
    "the writes, as the library's own docs say."
)


#: measured (5 seeds each, see the report): valid. A stopped holder keeps the lock (no takeover, so no zombie
#: write), a killed one loses it at once; both as filelock promises, and ``lease_expiry = "holder"`` tells the
#: checker so (without it, both runs are "invalid" by the ttl-defined kinds: stuck-lease, overlapping-lease)
AUDITED_FAULTS = (FaultAudit("pause", "valid"), FaultAudit("kill", "valid"))


class FileLockLease(LockLease):
    """filelock's ``FileLock`` (flock) as its README uses it, without a timeout: the job's files are plain writes."""

    name = "filelock"
    fenced = False
    store = "files"
    #: no ttl: the lock is held while the holder's process lives (the ttl-defined kinds do not apply)
    lease_expiry = "holder"
    requires = ("filelock",)
    extra = "audit"
    #: the lock class under audit, by its name in filelock (``FileLock`` is ``UnixFileLock`` on Linux)
    LOCK: ClassVar[str] = "FileLock"
    #: suffix of the lock files, so two adapters on one folder never share a lock
    SUFFIX: ClassVar[str] = ".lock"

    audit = AuditPlan(
        library="filelock",
        mode="documented",
        faults=AUDITED_FAULTS,
        seeds=(1, 2, 3, 4, 5),
        fix=FILELOCK_FIX,
        time_limit=5.0,
        options={"nemesis_interval": 2.0},
    )

    def make_records(self) -> Records:
        return FileRecords(self.config.url)

    def setup(self) -> None:
        (Path(self.config.url) / "locks").mkdir(parents=True, exist_ok=True)
        super().setup()

    def lock_path(self, node: str) -> Path:
        return Path(self.config.url) / "locks" / f"{file_name(node)}{self.SUFFIX}"


    def acquire(self, node: str, owner: str) -> Held | None:
        import filelock

        lock: filelock.BaseFileLock = getattr(filelock, self.LOCK)(self.lock_path(node), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            return None
        return Held(lock, secrets.token_hex(16))

    def extend(self, held: Held) -> bool:
        """No ttl to extend: the lock is ours as long as this process holds it."""
        return bool(held.lock.is_locked)

    def unlock(self, held: Held) -> None:
        held.lock.release()


class SoftFileLockLease(FileLockLease):
    """filelock's ``SoftFileLock`` (a marker file; a dead holder's marker is taken over) as its README uses it."""

    name = "filelock-soft"
    LOCK = "SoftFileLock"
    SUFFIX = ".softlock"

    audit = AuditPlan(
        library="filelock",
        mode="soft",
        faults=AUDITED_FAULTS,
        seeds=(1, 2, 3, 4, 5),
        fix=FILELOCK_FIX,
        time_limit=5.0,
        options={"nemesis_interval": 2.0},
    )

    def extend(self, held: Held) -> bool:
        """The marker still names this process (a peer that judged us dead would have replaced it)."""
        return bool(held.lock.is_locked and held.lock.is_lock_held_by_us)
