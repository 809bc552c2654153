"""The reference fenced lease on SQLite: one file, no server.

Every operation is one conditional statement inside ``BEGIN IMMEDIATE`` (the
write lock is taken before anything is read, so two claims cannot both see the
node free). Epochs come from the row itself (``epoch = epoch + 1``), so they
strictly increase per node whoever claims. Lease expiry is judged by the
store's clock: for an embedded store that is the host's CLOCK_MONOTONIC, which
every process on the machine shares and no nemesis skews — never a worker's
wall clock. The protected resource lives in the same file: a per-node fence
(the largest epoch granted or accepted) and the log of accepted effects, in
the order they were accepted (``rowid``: SQLite gives each new row a larger
one, and rows are never deleted), read back with the fence in one read
transaction (:meth:`SqliteLease.read_resource`). How durably a commit is kept is the
config option ``store_config`` (:mod:`leasecheck.targets.durability`; ``durable``,
WAL with ``synchronous = FULL``, unless named).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from leasecheck.histories.vocabulary import READY, RUNNING, SUCCEEDED
from leasecheck.targets.base import (
    Accepted,
    Indeterminate,
    Lease,
    NodeState,
    Outcome,
    Refused,
    ResourceState,
    Target,
    TargetConfig,
    Unavailable,
)
from leasecheck.targets.durability import DEFAULT_PROFILE, OPTION, SQLITE, check_profile

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    node TEXT PRIMARY KEY,
    status TEXT NOT NULL DEFAULT 'READY' CHECK (status IN ('READY', 'RUNNING', 'SUCCEEDED')),
    epoch INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    expires_ns INTEGER,
    result TEXT
);
CREATE TABLE IF NOT EXISTS fences (node TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS effects (node TEXT NOT NULL, epoch INTEGER NOT NULL, payload TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS effects_by_node ON effects (node);
"""


def store_now_ns() -> int:
    """The embedded store's clock: the host's monotonic clock, shared by all its processes."""
    return time.monotonic_ns()


class SqliteLease(Target):
    """Reference fenced lease on a SQLite file (WAL, BEGIN IMMEDIATE, conditional UPDATE ... RETURNING)."""

    name = "sqlite"
    fenced = True
    store = "sqlite"

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self.path = config.url.removeprefix("sqlite:///").removeprefix("sqlite://")
        try:
            self.db = sqlite3.connect(self.path, timeout=config.timeout_s, isolation_level=None, check_same_thread=False)
            for pragma in SQLITE[check_profile(config.options.get(OPTION, DEFAULT_PROFILE))]:  # durable: WAL, FULL
                self.db.execute(pragma)
        except sqlite3.Error as e:
            raise Unavailable(f"cannot open {self.path}: {e}") from None

    @property
    def ttl_ns(self) -> int:
        return self.config.ttl_ms * 1_000_000

    @contextmanager
    def _tx(self, writes: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction; a lock timeout before BEGIN succeeded means nothing was applied."""
        try:
            self.db.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
        except sqlite3.OperationalError as e:
            raise Unavailable(f"sqlite busy: {e}") from None
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        try:
            self.db.execute("COMMIT")
        except sqlite3.Error as e:
            raise Indeterminate(f"commit failed: {e}") from None

    def setup(self) -> None:
        self.db.executescript(SCHEMA)

    def add_node(self, node: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO nodes (node) VALUES (?)", (node,))

    def add_nodes(self, nodes: list[str]) -> None:
        with self._tx() as db:  # one write transaction, not one per node
            db.executemany("INSERT OR IGNORE INTO nodes (node) VALUES (?)", [(n,) for n in nodes])

    def _refusal(self, db: sqlite3.Connection, node: str, epoch: int | None) -> Refused:
        """Why a conditional update matched no row: read the row inside the same transaction."""
        row = db.execute("SELECT status, epoch, expires_ns FROM nodes WHERE node = ?", (node,)).fetchone()
        if row is None:
            return Refused("error", f"no such node {node!r}")
        status, current, _ = row
        if epoch is None:  # a claim
            return Refused("terminal") if status == SUCCEEDED else Refused("held")
        if current != epoch:
            return Refused("stale", f"epoch {epoch} < current {current}") if current > epoch else Refused("error", f"unknown epoch {epoch}")
        if status == SUCCEEDED:
            return Refused("terminal")
        if status != RUNNING:
            return Refused("not-owner", "the lease was released")
        return Refused("expired")

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        now = store_now_ns()
        with self._tx() as db:
            row = db.execute(
                "UPDATE nodes SET status = 'RUNNING', epoch = epoch + 1, owner = ?, attempt = attempt + 1,"
                " expires_ns = ?, result = NULL"
                " WHERE node = ? AND (status = 'READY' OR (status = 'RUNNING' AND expires_ns <= ?))"
                " RETURNING epoch",
                (owner, now + self.ttl_ns, node, now),
            ).fetchone()
            if row is None:
                return self._refusal(db, node, None)
            epoch = int(row[0])
            self._raise_fence(db, node, epoch)
            return Lease(node, owner, epoch)

    @staticmethod
    def _raise_fence(db: sqlite3.Connection, node: str, epoch: int | None) -> int:
        """Lift the node's fence to ``epoch`` if it is not already higher; 1 if it moved or held.

        A claim lifts it too, so the protected resource rejects a zombie's write
        as soon as a newer lease exists, not only after the new holder wrote.
        """
        return db.execute(
            "INSERT INTO fences (node, epoch) VALUES (?, ?)"
            " ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch >= fences.epoch",
            (node, epoch),
        ).rowcount

    def _update_held(self, lease: Lease, assignments: str, params: tuple[Any, ...]) -> Outcome:
        """An update allowed only to the current, unexpired holder of ``lease``'s epoch."""
        now = store_now_ns()
        with self._tx() as db:
            cur = db.execute(
                f"UPDATE nodes SET {assignments} WHERE node = ? AND status = 'RUNNING' AND epoch = ? AND expires_ns > ?",
                (*params, lease.node, lease.epoch, now),
            )
            return None if cur.rowcount == 1 else self._refusal(db, lease.node, lease.epoch)

    def renew(self, lease: Lease) -> Outcome:
        return self._update_held(lease, "expires_ns = ?", (store_now_ns() + self.ttl_ns,))

    def commit(self, lease: Lease, result: str) -> Outcome:
        return self._update_held(lease, "status = 'SUCCEEDED', result = ?, expires_ns = NULL", (result,))

    def release(self, lease: Lease) -> Outcome:
        with self._tx() as db:
            cur = db.execute(
                "UPDATE nodes SET status = 'READY', owner = NULL, expires_ns = NULL"
                " WHERE node = ? AND status = 'RUNNING' AND epoch = ?",
                (lease.node, lease.epoch),
            )
            return None if cur.rowcount == 1 else self._refusal(db, lease.node, lease.epoch)

    def effect(self, lease: Lease, payload: str) -> Outcome:
        with self._tx() as db:
            if self._raise_fence(db, lease.node, lease.epoch) != 1:
                (largest,) = db.execute("SELECT epoch FROM fences WHERE node = ?", (lease.node,)).fetchone()
                return Refused("stale", f"epoch {lease.epoch} < fence {largest}")
            db.execute("INSERT INTO effects (node, epoch, payload) VALUES (?, ?, ?)", (lease.node, lease.epoch, payload))
            return None

    def read(self, node: str) -> NodeState:
        with self._tx(writes=False) as db:
            row = db.execute("SELECT status, epoch, owner, result FROM nodes WHERE node = ?", (node,)).fetchone()
        if row is None:
            return NodeState(READY, 0)
        status, epoch, owner, result = row
        return NodeState(status, epoch, owner if status != READY else None, result)

    def read_resource(self, node: str) -> ResourceState:
        """The fence and the effects log in one read transaction (a WAL snapshot: both as of one commit).

        No fence row yet (nothing claimed, nothing written) reads as fence 0: the
        resource keeps a fence, and it refuses nothing yet.
        """
        with self._tx(writes=False) as db:
            row = db.execute("SELECT epoch FROM fences WHERE node = ?", (node,)).fetchone()
            rows = db.execute("SELECT epoch, payload FROM effects WHERE node = ? ORDER BY rowid", (node,)).fetchall()
        return ResourceState(tuple(Accepted(epoch, payload) for epoch, payload in rows), int(row[0]) if row else 0)

    def close(self) -> None:
        self.db.close()
