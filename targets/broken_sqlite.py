"""Deliberately broken SQLite leases: real failure modes, to prove the checker catches them."""

from __future__ import annotations

import time

from leasecheck.histories.vocabulary import RUNNING, SUCCEEDED
from leasecheck.targets.base import Lease, Outcome, Refused
from leasecheck.targets.sqlite_lease import SqliteLease, store_now_ns


class TtlOnlySqlite(SqliteLease):
    """BROKEN ttl-only: a lease with an expiry, but commits and effects never check the epoch.

    The classic "we have a lease, so we are the only writer" design. A worker
    paused (GC, SIGSTOP) past its ttl loses the lease to another, then wakes up
    and commits and writes anyway: ``stale-commit`` and ``stale-effect`` under
    process pauses longer than the ttl (an SQLite file has no network to partition).
    """

    name = "sqlite-ttl-only"
    bug = "commits and effects do not check the epoch: only the lease's expiry guards them"
    expected = ("stale-commit", "stale-effect")
    exposed_by = ("pause",)

    def commit(self, lease: Lease, result: str) -> Outcome:
        with self._tx() as db:
            db.execute("UPDATE nodes SET status = 'SUCCEEDED', result = ?, expires_ns = NULL WHERE node = ?", (result, lease.node))
        return None

    def effect(self, lease: Lease, payload: str) -> Outcome:
        with self._tx() as db:
            db.execute("INSERT INTO effects (node, epoch, payload) VALUES (?, ?, ?)", (lease.node, lease.epoch, payload))
        return None


class NonAtomicClaimSqlite(SqliteLease):
    """BROKEN non-atomic claim: read the row, decide in the worker, then write without a condition.

    Between the read and the write (here the ``think_s`` option, 20 ms by
    default: an ORM round trip and a little application logic) another worker
    does the same; both see the node
    free and both win, with the same epoch: ``duplicate-epoch`` and
    ``overlapping-lease`` under concurrent claims (duplicate delivery, races).
    """

    name = "sqlite-non-atomic-claim"
    bug = "claim reads the node, then writes without a condition: two racing claims both win"
    expected = ("duplicate-epoch", "overlapping-lease")
    exposed_by_workload = ("duplicate-delivery",)

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        now = store_now_ns()
        with self._tx(writes=False) as db:
            row = db.execute("SELECT status, epoch, expires_ns FROM nodes WHERE node = ?", (node,)).fetchone()
        if row is None:
            return Refused("error", f"no such node {node!r}")
        status, epoch, expires = row
        if status == SUCCEEDED:
            return Refused("terminal")
        if status == RUNNING and expires > now:
            return Refused("held")
        time.sleep(float(self.config.options.get("think_s", 0.02)))
        with self._tx() as db:
            db.execute(
                "UPDATE nodes SET status = 'RUNNING', epoch = ?, owner = ?, attempt = attempt + 1, expires_ns = ? WHERE node = ?",
                (epoch + 1, owner, store_now_ns() + self.ttl_ns, node),
            )
            self._raise_fence(db, node, epoch + 1)
        return Lease(node, owner, epoch + 1)
