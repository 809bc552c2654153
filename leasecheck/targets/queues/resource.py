"""The protected resource a queue task writes to: leasecheck's own, in one SQLite file of the run's folder.

Why leasecheck's own and not the broker: the resource is what a job *does*
(a row in a customer's database, a payment), not the queue; its writes are the
history's ``effect`` ops, and a fault of the broker must not reach them. SQLite in
WAL mode takes writers from every worker process; each write is one short
``BEGIN IMMEDIATE`` transaction. Two kinds of write:

* plain (the ``documented`` mode): appended whoever writes, as a task that trusts
  the queue writes;
* fenced (the ``fenced`` mode): appended only if no larger attempt number has been
  accepted for the job, and the fence raised to it, atomically: the fencing-token
  check of a storage service (``effect_fence: "token"``).

``begin`` counts the executions of each job (1, 2, …) so that what an execution
does (stall or not) is drawn from the seed, the job and that number alone.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from leasecheck.targets.base import Accepted, ResourceState

SCHEMA = """
CREATE TABLE IF NOT EXISTS executions (job TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fences (job TEXT PRIMARY KEY, fence INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS effects (seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL,
                                    execution TEXT NOT NULL, epoch INTEGER, payload TEXT NOT NULL, token TEXT);
CREATE INDEX IF NOT EXISTS effects_by_job ON effects (job, seq);
"""


class Resource:
    """One process's handle on the run's resource file (a connection per thread: some libraries run tasks on threads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA busy_timeout = 60000")
            self._local.db = db
        return db

    def create(self) -> None:
        """The tables (the harness, before any worker starts)."""
        db = self._db()
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(SCHEMA)

    def begin(self, job: str) -> int:
        """This execution's number among the job's executions (1 for the first to start)."""
        db = self._db()
        with _immediate(db):
            db.execute("INSERT INTO executions (job, n) VALUES (?, 1) ON CONFLICT (job) DO UPDATE SET n = n + 1", (job,))
            (n,) = db.execute("SELECT n FROM executions WHERE job = ?", (job,)).fetchone()
        return int(n)

    def append(self, job: str, execution: str, epoch: int | None, payload: str, fenced: bool, token: str | None = None) -> bool:
        """Write one effect; fenced: only if ``epoch`` is at least the job's fence (then the fence is ``epoch``).

        ``token`` names the execution's lease where it has no epoch (the history's token), so a read of the
        resource can say whose each entry was."""
        db = self._db()
        with _immediate(db):
            if fenced:
                assert epoch is not None
                row = db.execute("SELECT fence FROM fences WHERE job = ?", (job,)).fetchone()
                if row is not None and row[0] > epoch:
                    return False
                db.execute("INSERT INTO fences (job, fence) VALUES (?, ?) ON CONFLICT (job) DO UPDATE SET fence = ?",
                           (job, epoch, epoch))
            db.execute("INSERT INTO effects (job, execution, epoch, payload, token) VALUES (?, ?, ?, ?, ?)",
                       (job, execution, epoch, payload, token))
        return True

    def executions(self, job: str) -> int:
        """How many executions of the job have begun (0: none yet)."""
        row = self._db().execute("SELECT n FROM executions WHERE job = ?", (job,)).fetchone()
        return int(row[0]) if row is not None else 0

    def fence(self, job: str) -> int | None:
        """The largest attempt number the job's resource accepted (None: no fenced write yet)."""
        row = self._db().execute("SELECT fence FROM fences WHERE job = ?", (job,)).fetchone()
        return int(row[0]) if row is not None else None

    def effects(self, job: str) -> list[dict[str, Any]]:
        """The job's accepted effects, oldest first (for tests and post-mortems)."""
        rows = self._db().execute("SELECT execution, epoch, payload FROM effects WHERE job = ? ORDER BY seq", (job,))
        return [{"execution": x, "epoch": e, "payload": p} for x, e, p in rows]

    def read(self, job: str) -> ResourceState:
        """The job's resource as a ``read-resource`` op reports it: fence and accepted effects, in one read transaction.

        Oldest first (``seq``); each entry with its attempt number, or its token where the
        library gives none. The fence is the largest attempt accepted by a fenced write
        (``effect_fence: "token"``); None in the documented mode, whose writes keep none.
        """
        db = self._db()
        db.execute("BEGIN")
        try:
            row = db.execute("SELECT fence FROM fences WHERE job = ?", (job,)).fetchone()
            rows = db.execute("SELECT epoch, payload, token FROM effects WHERE job = ? ORDER BY seq", (job,)).fetchall()
        finally:
            db.execute("COMMIT")
        accepted = tuple(Accepted(epoch, payload, None if epoch is not None else token) for epoch, payload, token in rows)
        return ResourceState(accepted, int(row[0]) if row is not None else None)


class _immediate:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an exception): one writer at a time, no upgrade deadlock."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
