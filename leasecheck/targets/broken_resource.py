"""Deliberately broken protected resources on SQLite: damage only a read of the resource can prove.

Each variant keeps the reference's leases and gets its resource wrong in one
real way. What they break lands in the resource (an entry written after the
takeover, a fence set back, an acknowledged write never stored, an entry
stamped with an epoch its writer never had), so the checker proves it from the
history's ``read-resource`` ops (:mod:`leasecheck.checker.kinds_resource`), in
runs where the ops alone would look linearizable.
"""

from __future__ import annotations

import sqlite3
import time

from leasecheck.targets.base import Lease, Outcome, Refused, TargetConfig
from leasecheck.targets.sqlite_lease import RUNNING, SqliteLease, store_now_ns


class CheckThenWriteSqlite(SqliteLease):
    """BROKEN check-then-write effect: the lease is checked in one transaction, the write lands in another.

    The effect asks the store "is my lease still the newest?" (and lifts the
    fence), then does the write a round trip later (the ``think_s`` option,
    500 ms by default: a call to the service that holds the data), without
    asking again. A worker paused between the two writes after another worker
    took the node over and wrote: the resource lists the older epoch's entry
    after the newer one (``stale-effect``, proven by the read alone: the effect
    op was invoked before the takeover, so its ops are linearizable).
    """

    name = "sqlite-check-then-write-effect"
    bug = "an effect checks the lease in one transaction and writes in another, a round trip later"
    expected = ("stale-effect",)
    exposed_by = ("pause",)

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self.think_s = float(config.options.get("think_s", 0.5))

    def effect(self, lease: Lease, payload: str) -> Outcome:
        with self._tx() as db:
            if self._raise_fence(db, lease.node, lease.epoch) != 1:
                (largest,) = db.execute("SELECT epoch FROM fences WHERE node = ?", (lease.node,)).fetchone()
                return Refused("stale", f"epoch {lease.epoch} < fence {largest}")
        time.sleep(self.think_s)
        with self._tx() as db:
            db.execute("INSERT INTO effects (node, epoch, payload) VALUES (?, ?, ?)", (lease.node, lease.epoch, payload))
        return None


class FenceFollowsWritesSqlite(SqliteLease):
    """BROKEN fence set by the last write: the resource stores the epoch of its latest write as its fence.

    Effects are guarded by the lease's expiry alone (the ttl-only design); the
    resource's fence is overwritten by every accepted write rather than raised
    to the largest. A zombie's write after a takeover sets the fence back below
    an epoch the resource already accepted or a claim lifted it to:
    ``fence-regression`` (and the zombie's write itself, ``stale-effect``).
    """

    name = "sqlite-fence-follows-writes"
    bug = "an accepted effect overwrites the resource's fence with its own epoch, even a lower one"
    expected = ("fence-regression", "stale-effect")
    exposed_by = ("pause",)

    def effect(self, lease: Lease, payload: str) -> Outcome:
        with self._tx() as db:
            db.execute("INSERT INTO fences (node, epoch) VALUES (?, ?) ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch",
                       (lease.node, lease.epoch))
            db.execute("INSERT INTO effects (node, epoch, payload) VALUES (?, ?, ?)", (lease.node, lease.epoch, payload))
        return None


class WriteBehindSqlite(SqliteLease):
    """BROKEN write-behind effects: a write is acknowledged at once and stored only when its lease commits.

    The client buffers its lease's effects and flushes them with the commit, to
    save round trips. An execution that gives its lease back, loses it or
    crashes never stores what it was told was written, and a reader meanwhile
    misses every acknowledged write: ``lost-effect``. The acknowledgement
    checks nothing either, so a zombie's write is acknowledged after the
    takeover: ``stale-effect``.
    """

    name = "sqlite-write-behind-effects"
    bug = "effects are acknowledged at once and stored only when the lease commits"
    expected = ("lost-effect", "stale-effect")
    exposed_by = ("pause",)

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self._buffered: dict[tuple[str, int | None], list[str]] = {}

    def effect(self, lease: Lease, payload: str) -> Outcome:
        self._buffered.setdefault((lease.node, lease.epoch), []).append(payload)
        return None

    def commit(self, lease: Lease, result: str) -> Outcome:
        outcome = super().commit(lease, result)
        buffered = self._buffered.pop((lease.node, lease.epoch), [])
        if outcome is None and buffered:
            with self._tx() as db:
                db.executemany("INSERT INTO effects (node, epoch, payload) VALUES (?, ?, ?)",
                               [(lease.node, lease.epoch, p) for p in buffered])
        return outcome


class StampedByNodeSqlite(SqliteLease):
    """BROKEN entries stamped by the node: the resource records each write under the node's current epoch.

    The write is guarded by the lease's expiry alone, and the resource stamps it
    with the epoch the lease store holds now, not the one its writer carried: a
    zombie's write after a takeover is filed under the new holder's epoch, hiding
    whose it was. The resource lists an entry its writer's op never carried:
    ``phantom-effect`` (and the zombie's write itself, ``stale-effect``).
    """

    name = "sqlite-stamped-by-node"
    bug = "the resource stamps each write with the node's current epoch, not its writer's"
    expected = ("phantom-effect", "stale-effect")
    exposed_by = ("pause",)

    def effect(self, lease: Lease, payload: str) -> Outcome:
        with self._tx() as db:
            db.execute("INSERT INTO effects (node, epoch, payload) SELECT node, epoch, ? FROM nodes WHERE node = ?",
                       (payload, lease.node))
            self._raise_fence(db, lease.node, lease.epoch)
        return None


class LiveLeaseGuardSqlite(SqliteLease):
    """BROKEN guard by the live lease: a write is refused only while a newer lease is live.

    Effects and commits ask "is somebody else's lease live right now?" instead
    of "is my epoch the newest?". While the new holder heartbeats, a zombie is
    refused; once the new holder has gone silent past its ttl (stalled, paused,
    crashed) and before anyone claims the node again, the zombie's effect and
    commit are accepted with its older epoch: ``stale-effect``,
    ``stale-commit``; the commit leaves the node SUCCEEDED under the newer
    epoch with the zombie's result, which a read shows (``lost-commit``). Only a
    zombie acting in that window exposes it (the coverage situation
    ``zombie-op-while-new-lapsed``).
    """

    name = "sqlite-live-lease-guard"
    bug = "a write is refused only while a newer lease is live; once the new holder's lease lapses, a zombie's gets in"
    expected = ("stale-effect", "stale-commit", "lost-commit")
    exposed_by = ("pause",)

    def _lapsed_newer(self, db: sqlite3.Connection, lease: Lease) -> bool:
        """Is the node held by a newer epoch whose lease lapsed (RUNNING, past its expiry)?"""
        row = db.execute("SELECT status, epoch, expires_ns FROM nodes WHERE node = ?", (lease.node,)).fetchone()
        return (row is not None and lease.epoch is not None and row[0] == RUNNING and row[1] > lease.epoch
                and row[2] is not None and row[2] <= store_now_ns())

    def effect(self, lease: Lease, payload: str) -> Outcome:
        with self._tx() as db:
            if self._lapsed_newer(db, lease):
                db.execute("INSERT INTO effects (node, epoch, payload) VALUES (?, ?, ?)", (lease.node, lease.epoch, payload))
                return None
        return super().effect(lease, payload)

    def commit(self, lease: Lease, result: str) -> Outcome:
        with self._tx() as db:
            if self._lapsed_newer(db, lease):
                db.execute("UPDATE nodes SET status = 'SUCCEEDED', result = ?, expires_ns = NULL WHERE node = ?",
                           (result, lease.node))
                return None
        return super().commit(lease, result)


__all__ = ["CheckThenWriteSqlite", "FenceFollowsWritesSqlite", "LiveLeaseGuardSqlite", "StampedByNodeSqlite", "WriteBehindSqlite"]
