"""Deliberately broken Postgres leases: each one a real-world mistake, each one the checker must catch.

Both subclass :class:`leasecheck.targets.postgres_lease.PostgresLease` and override as
little as possible, so the only difference from the reference is the bug in
the class name. They exist to prove that leasecheck's faults and checker find
these mistakes: a run against one of them that comes back valid is a bug in
leasecheck.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from leasecheck.targets.base import Lease, Outcome, Refused, TargetConfig
from leasecheck.targets.postgres_lease import PostgresLease

if TYPE_CHECKING:  # imported where used, as in postgres_lease
    import psycopg
    from psycopg import sql


class FenceInMemoryPostgres(PostgresLease):
    """Postgres lease whose epoch check lives in the worker's memory, not at the store.

    The worker remembers the epoch each claim granted it and checks a lease
    against that memory before an *unconditional* write. Its memory cannot know
    that the lease expired and another worker claimed a larger epoch, so a
    worker paused past the ttl wakes up and its renew, effect and commit are all
    accepted: expected ``stale-commit`` and ``stale-effect`` (and ``stale-renew``)
    under the ``pause`` fault (old owner paused past the ttl, then resumed).
    """

    name = "postgres-fence-in-memory"
    bug = "epoch checked in the worker's memory; renew, effect and commit write unconditionally"
    expected = ("stale-commit", "stale-effect")
    exposed_by = ("pause",)

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self._my_epoch: dict[str, int | None] = {}

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        granted = super().try_claim(node, owner)
        if isinstance(granted, Lease):
            self._my_epoch[node] = granted.epoch
        return granted

    def _mine(self, lease: Lease) -> bool:
        return lease.epoch == self._my_epoch.get(lease.node)

    def _update_held(self, lease: Lease, assignments: str, params: tuple[Any, ...]) -> Outcome:
        if not self._mine(lease):
            return Refused("stale", f"epoch {lease.epoch} is not the one this worker was granted")
        self._run(self._sql(f"UPDATE lease_nodes SET {assignments} WHERE node = %s"), (*params, lease.node))
        return None

    def effect(self, lease: Lease, payload: str) -> Outcome:
        if not self._mine(lease):
            return Refused("stale", f"epoch {lease.epoch} is not the one this worker was granted")
        self._run(
            "INSERT INTO lease_effects (node, epoch, payload) VALUES (%s, %s, %s)",
            (lease.node, lease.epoch, payload),
        )
        return None


class ClientClockPostgres(PostgresLease):
    """Postgres lease whose expiry is computed and judged by the worker's own wall clock.

    ``expires_at`` is written as the worker's ``now + ttl``, and a claim or renew
    judges "expired" by comparing with the worker's ``now``. Under the
    ``clock-bump`` fault (one worker's wall clock stepped by 2-10 ttl), a worker
    whose clock runs *ahead* sees every live lease as expired: it takes others'
    over (``overlapping-lease``) and has its own renew refused as expired while
    it still held the lease (``premature-expiry``); the deadlines it writes lie
    far ahead, so other workers' claims are refused ``held`` long after the lease
    provably expired (``stuck-lease``). A worker whose clock runs *behind* writes
    deadlines already past: its lease is taken over while it works
    (``overlapping-lease``).
    """

    name = "postgres-client-clock"
    bug = "lease expiry written and judged with the worker's wall clock instead of the server's"
    expected = ("overlapping-lease", "stuck-lease", "premature-expiry")
    exposed_by = ("clock-bump",)

    def _now(self) -> sql.Composable:
        from psycopg import sql

        return sql.Literal(datetime.fromtimestamp(self.config.clock() / 1000.0, tz=UTC))


class GraceAfterFailoverPostgres(PostgresLease):
    """BROKEN grace after failover: a client that reconnects gives every running lease a fresh ttl.

    The "be kind after an outage" recovery routine: when the store was down,
    holders could not heartbeat, so on reconnecting the client extends every
    RUNNING lease by a grace period (three ttls) to spare them a needless
    takeover. It also
    resurrects the leases whose holders stalled or died while the store was
    down: their nodes stay held long after every lease on them provably
    expired, and every other worker's claim is refused ``held``:
    ``stuck-lease`` after a store crash (``kill-store``).
    """

    name = "postgres-grace-after-failover"
    bug = "on reconnecting after a lost connection, the client extends every running lease by a grace period"
    expected = ("stuck-lease",)
    exposed_by = ("kill-store",)

    #: the grace period, in ttls
    GRACE_TTLS = 3

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self._connected_before = False

    def _connection(self) -> psycopg.Connection[Any]:
        import psycopg

        before = self._conn
        conn = super()._connection()
        reconnecting = self._connected_before and conn is not before
        self._connected_before = True
        if reconnecting:
            try:
                conn.execute(
                    self._sql("UPDATE lease_nodes SET expires_at = {now} + %s * interval '1 millisecond' WHERE status = 'RUNNING'"),
                    (self.GRACE_TTLS * self.config.ttl_ms,),
                )
            except psycopg.OperationalError as e:
                raise self._lost(e) from None
        return conn
