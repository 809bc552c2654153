"""Deliberately broken SQLite leases: real failure modes, to prove the checker catches them."""

from __future__ import annotations

import sqlite3
import time

from leasecheck.histories.vocabulary import RUNNING, SUCCEEDED
from leasecheck.targets.base import Lease, NodeState, Outcome, Refused, TargetConfig
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


class SwallowedHeartbeatSqlite(SqliteLease):
    """BROKEN swallowed heartbeat: a refused renew is logged and reported as done.

    The "heartbeats are best effort" library: its extend call catches the
    refusal so that a slow store never crashes the worker, and the worker goes
    on believing it holds the lease. A worker whose lease was taken over while
    it stalled renews "successfully" with its old epoch: ``stale-renew``
    whenever a zombie heartbeats after the takeover.
    """

    name = "sqlite-swallowed-heartbeat"
    bug = "a renew the store refused is reported as a success"
    expected = ("stale-renew",)
    exposed_by = ("pause",)

    def renew(self, lease: Lease) -> Outcome:
        super().renew(lease)  # refused or not: "the heartbeat was sent"
        return None


class AnyEpochReleaseSqlite(SqliteLease):
    """BROKEN release by node: giving a lease back does not check whose lease it is.

    ``UPDATE ... SET status = 'READY' WHERE node = ?``: the release trusts its
    caller. A zombie's release after a takeover frees the *new* holder's lease,
    and the node can be claimed a third time while the second holder still
    works: ``non-linearizable`` (a release of an epoch that is not the current
    one cannot take effect), and ``overlapping-lease`` when the third claim
    comes in time.
    """

    name = "sqlite-release-any-epoch"
    bug = "release sets the node READY without checking the epoch"
    expected = ("non-linearizable", "overlapping-lease")
    exposed_by = ("pause",)

    def release(self, lease: Lease) -> Outcome:
        with self._tx() as db:
            cur = db.execute(
                "UPDATE nodes SET status = 'READY', owner = NULL, expires_ns = NULL WHERE node = ? AND status = 'RUNNING'",
                (lease.node,),
            )
            return None if cur.rowcount == 1 else self._refusal(db, lease.node, lease.epoch)


class FenceAtCommitSqlite(SqliteLease):
    """BROKEN fence moved at commit: the protected resource learns of a new epoch only when a lease commits.

    The resource keeps a fence, but only the commit raises it ("the work is
    done, older writers may no longer touch it"); neither a claim nor an
    accepted effect does. A zombie's effects after a takeover and before the
    new holder's commit are all accepted: ``stale-effect`` (the lease rule: a
    newer epoch was granted before the effect was sent). A read of the resource
    shows a fence below the epochs it accepted: ``fence-regression``.
    """

    name = "sqlite-fence-at-commit"
    bug = "the resource's fence is raised by commits only, not by claims or accepted effects"
    expected = ("stale-effect", "fence-regression")
    exposed_by = ("pause",)

    @staticmethod
    def _raise_fence(db: sqlite3.Connection, node: str, epoch: int | None) -> int:
        return 1  # claims do not move the fence (effects call this too, and are then never refused here)

    def commit(self, lease: Lease, result: str) -> Outcome:
        outcome = super().commit(lease, result)
        if outcome is None:
            with self._tx() as db:
                SqliteLease._raise_fence(db, lease.node, lease.epoch)
        return outcome

    def effect(self, lease: Lease, payload: str) -> Outcome:
        with self._tx() as db:
            row = db.execute("SELECT epoch FROM fences WHERE node = ?", (lease.node,)).fetchone()
            if row is not None and lease.epoch is not None and lease.epoch < row[0]:
                return Refused("stale", f"epoch {lease.epoch} < fence {row[0]}")
            db.execute("INSERT INTO effects (node, epoch, payload) VALUES (?, ?, ?)", (lease.node, lease.epoch, payload))
            return None


class CachedReadSqlite(SqliteLease):
    """BROKEN cached read: reads come from the client's own cache of the leases it took.

    A read-through cache in the worker's client, filled by its claims and never
    invalidated by anyone else's: once it has claimed a node, the client reads
    "RUNNING, my epoch" for it, whoever holds it now, and whatever happened
    since: ``lost-commit`` when it reads a node it committed, ``non-linearizable``
    when a zombie reads its node after the takeover.
    """

    name = "sqlite-cached-read"
    bug = "a read returns the client's cached copy of its own last claim, never invalidated"
    expected = ("lost-commit", "non-linearizable")
    exposed_by = ("pause",)

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self._cache: dict[str, NodeState] = {}

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        out = super().try_claim(node, owner)
        if isinstance(out, Lease):
            self._cache[node] = NodeState(RUNNING, out.epoch, owner)
        return out

    def read(self, node: str) -> NodeState:
        return self._cache.get(node) or super().read(node)


class WorkerClockRenewSqlite(SqliteLease):
    """BROKEN renew from the worker's clock: a heartbeat sets the deadline to the worker's own now + ttl.

    The store judges every claim, renew and commit by its own clock, as the
    reference does, but the renew is written the way a client library writes
    it: "the lease now runs until my now + ttl", the worker's wall clock.
    Harmless while every clock agrees. A worker whose clock runs behind (an
    NTP step back, a VM resumed with a stale clock) renews into the past: the
    store accepts the renew and the lease is over at once, so the worker's
    next heartbeat or its commit is refused ``expired`` moments after a renew
    that should have bought it a whole ttl: ``premature-expiry`` under the
    ``clock-bump`` fault whenever it steps a worker back, and
    ``overlapping-lease`` when another worker claims the node it cut short. (A
    worker whose clock runs ahead writes a deadline far in the future instead:
    ``stuck-lease`` when it then stops renewing without ending its lease.)
    """

    name = "sqlite-renew-worker-clock"
    bug = "renew sets the deadline to the worker's wall-clock now + ttl; every check reads the store's clock"
    #: a clock stepped back cuts the lease short (and another worker's claim then overlaps it); a clock stepped ahead,
    #: as a run's second clock fault does, holds the node long after its holder went quiet
    expected = ("premature-expiry", "overlapping-lease", "stuck-lease")
    exposed_by = ("clock-bump",)

    def renew(self, lease: Lease) -> Outcome:
        # the worker's deadline, in the store's timebase: the store's now, shifted by how far the
        # worker's wall clock is from the host's (a clock fault's step), plus the ttl
        skew_ns = int(self.config.clock() * 1_000_000) - time.clock_gettime_ns(time.CLOCK_REALTIME)
        return self._update_held(lease, "expires_ns = ?", (store_now_ns() + skew_ns + self.ttl_ns,))
