"""The reference fenced lease on PostgreSQL, with the same rules as :mod:`leasecheck.targets.sqlite_lease`.

Every operation is one autocommit statement: a conditional ``UPDATE ...
RETURNING`` whose ``WHERE`` is the rule, so Postgres' row lock (and its
re-check of the ``WHERE`` on the newest row version under READ COMMITTED)
decides races between workers; epochs come from the row (``epoch = epoch +
1``). Lease expiry is judged by the *server's* clock (``clock_timestamp()``),
never a worker's, so a worker whose clock is skewed cannot steal a live lease.
The protected resource lives in the same database: a per-node fence (the
largest epoch granted or accepted), lifted by each claim and checked and
raised by the same statement that logs an effect; both are read back in one
statement (:meth:`PostgresLease.read_resource`). ``setup`` is idempotent: a
store made by an older leasecheck gains the log's index and keeps its rows.

Failure handling follows the protocol's two exceptions: if no connection can be
made, nothing was sent (:class:`Unavailable`); once a statement was sent, a
lost connection, a server-side ``statement_timeout`` or our own client-side
deadline (a paused or partitioned server never answers) leave the outcome
unknown (:class:`Indeterminate`). A broken connection is dropped and the next
operation connects again.

On a replicated store the URL is a multi-host DSN with
``target_session_attrs=read-write``: each connection (the first, and every one
after a lost one) goes to whichever member accepts writes, so the lease follows
a promoted standby. With a synchronous standby a commit waits for it, and a
wait that is cancelled (``pg_cancel_backend``, an administrator) still reports
success, with only a WARNING ("canceling wait for synchronous replication ...
already committed locally, but might not have been replicated"): the commit may
be lost at the next failover, so the statement is reported Indeterminate
(:meth:`PostgresLease._on_notice`). ``statement_timeout`` never cancels that
wait (Postgres stops the statement timer before it commits): a standby that
does not answer leaves the statement to our own deadline, which cuts the
connection (Indeterminate, as any lost connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
from leasecheck.targets.pg_watchdog import Watchdog, still_open

if TYPE_CHECKING:  # psycopg is imported where it is used: listing the backends must not load it
    import psycopg
    from psycopg import sql

SCHEMA = """
CREATE TABLE IF NOT EXISTS lease_nodes (
    node text PRIMARY KEY,
    status text NOT NULL DEFAULT 'READY' CHECK (status IN ('READY', 'RUNNING', 'SUCCEEDED')),
    epoch bigint NOT NULL DEFAULT 0,
    owner text,
    attempt integer NOT NULL DEFAULT 0,
    expires_at timestamptz,
    result text
);
CREATE TABLE IF NOT EXISTS lease_fences (node text PRIMARY KEY, epoch bigint NOT NULL);
CREATE TABLE IF NOT EXISTS lease_effects (
    id bigserial PRIMARY KEY,
    node text NOT NULL,
    epoch bigint NOT NULL,
    payload text NOT NULL
);
CREATE INDEX IF NOT EXISTS lease_effects_by_node ON lease_effects (node, id);
"""

#: serialises concurrent setup() calls: CREATE TABLE IF NOT EXISTS races on the catalog otherwise
SETUP_LOCK_KEY = 0x1EA5EC4EC


class PostgresLease(Target):
    """Reference fenced lease on PostgreSQL (autocommit conditional UPDATE ... RETURNING, server clock)."""

    name = "postgres"
    fenced = True
    store = "postgres"
    requires = ("psycopg",)
    extra = "postgres"

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self._conn: psycopg.Connection[Any] | None = None
        self._watchdog = Watchdog()
        #: the server's warning that the last statement's commit may not be on the synchronous standby
        self._unreplicated: str | None = None

    # -- connection and failure classification ------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        """The open connection, made anew if there is none, the last one broke, or the server closed it."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken and still_open(self._conn):
            return self._conn
        import psycopg

        self._drop()
        timeout_ms = max(1, int(self.config.timeout_s * 1000))
        try:
            self._conn = psycopg.connect(
                self.config.url, autocommit=True, connect_timeout=max(1, round(self.config.timeout_s)),
                options=f"-c statement_timeout={timeout_ms}", application_name="leasecheck",
            )
        except psycopg.Error as e:
            raise Unavailable(f"cannot connect to postgres: {e}") from None
        self._conn.add_notice_handler(self._on_notice)
        return self._conn

    def _on_notice(self, notice: psycopg.errors.Diagnostic) -> None:
        """Remember a cancelled wait for the synchronous standby (the commit stands locally, maybe nowhere else).

        Postgres sends it as a WARNING before the statement's success, in the
        same response: psycopg calls this while the statement is being read.
        """
        primary, detail = notice.message_primary or "", notice.message_detail or ""
        if "synchronous replication" in primary or "committed locally" in detail:
            self._unreplicated = f"{primary} ({detail})" if detail else primary

    def _drop(self) -> None:
        import psycopg

        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None

    def _run(self, query: sql.SQL | sql.Composed | str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One autocommit statement; its rows. Unavailable before sending, Indeterminate after."""
        import psycopg

        conn = self._connection()
        self._unreplicated = None
        try:
            with self._watchdog.guard(conn.pgconn.socket, self.deadline_s):
                cur = conn.execute(query, params)
                rows = cur.fetchall() if cur.description is not None else []
        except psycopg.OperationalError as e:
            raise self._lost(e) from None
        if self._unreplicated is not None:
            raise Indeterminate(f"postgres committed locally, not confirmed on the synchronous standby: {self._unreplicated}")
        return rows

    @property
    def deadline_s(self) -> float:
        """Our own limit per statement: a little over the server's statement_timeout, which should fire first."""
        return self.config.timeout_s + 1.0

    def _lost(self, error: psycopg.OperationalError) -> Indeterminate:
        """Drop the connection after a failure mid-statement; the statement may or may not have been applied."""
        self._drop()
        if self._watchdog.fired:
            return Indeterminate(f"postgres did not answer within {self.deadline_s:g} s")
        lines = str(error).strip().splitlines()
        return Indeterminate(f"postgres statement outcome unknown: {lines[0] if lines else type(error).__name__}")

    def _now(self) -> sql.Composable:
        """Whose clock judges lease expiry: the server's, the same for every worker."""
        from psycopg import sql

        return sql.SQL("clock_timestamp()")

    def _sql(self, template: str) -> sql.Composed:
        """``template`` with ``{now}`` replaced by the lease clock (see :meth:`_now`)."""
        from psycopg import sql

        return sql.SQL(template).format(now=self._now())

    # -- the protocol ----------------------------------------------------------------------------

    def setup(self) -> None:
        import psycopg

        conn = self._connection()
        try:
            with self._watchdog.guard(conn.pgconn.socket, self.deadline_s), conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK_KEY,))
                conn.execute(SCHEMA)
        except psycopg.OperationalError as e:
            raise self._lost(e) from None

    def add_node(self, node: str) -> None:
        self._run("INSERT INTO lease_nodes (node) VALUES (%s) ON CONFLICT (node) DO NOTHING", (node,))

    def _row_after_refusal(self, node: str) -> tuple[str, int] | Refused:
        """The node's (status, epoch), read after a refusal.

        The refusal itself is certain (nothing was applied), so a failure of
        this read only loses the reason: it is reported as ``error``, never as
        an unknown outcome.
        """
        try:
            rows = self._run("SELECT status, epoch FROM lease_nodes WHERE node = %s", (node,))
        except (Unavailable, Indeterminate) as e:
            return Refused("error", f"refused; could not read why: {e}")
        return (rows[0][0], int(rows[0][1])) if rows else Refused("error", f"no such node {node!r}")

    def _claim_refusal(self, node: str) -> Refused:
        """Why a claim matched no row, from a later read.

        At the claim the row was SUCCEEDED, RUNNING with a live lease, or absent
        (a READY row always matches). SUCCEEDED is final and rows are never
        deleted, so a later non-SUCCEEDED row means the lease was held then —
        unless it is still the untouched READY row of epoch 0, which means it
        did not exist yet.
        """
        row = self._row_after_refusal(node)
        if isinstance(row, Refused):
            return row
        if row == (READY, 0):
            return Refused("error", f"no such node {node!r}")
        return Refused("terminal") if row[0] == SUCCEEDED else Refused("held")

    def _refusal(self, node: str, epoch: int | None) -> Refused:
        """Why a renew, commit or release of ``epoch`` matched no row (same reasons as sqlite_lease)."""
        row = self._row_after_refusal(node)
        if isinstance(row, Refused):
            return row
        status, current = row
        if epoch is None or current != epoch:
            if epoch is not None and current > epoch:
                return Refused("stale", f"epoch {epoch} < current {current}")
            return Refused("error", f"unknown epoch {epoch}")
        if status == SUCCEEDED:
            return Refused("terminal")
        if status != RUNNING:
            return Refused("not-owner", "the lease was released")
        return Refused("expired")

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        """Take the lease and lift the fence to the new epoch in one statement.

        Lifting the fence at the claim (as sqlite_lease does) makes the
        protected resource reject a zombie's write as soon as a newer lease
        exists, not only after the new holder wrote. A data-modifying ``WITH``
        runs to completion even though the outer query reads only the claim.
        """
        rows = self._run(
            self._sql(
                "WITH claimed AS ("
                " UPDATE lease_nodes SET status = 'RUNNING', epoch = epoch + 1, owner = %s, attempt = attempt + 1,"
                " expires_at = {now} + %s * interval '1 millisecond', result = NULL"
                " WHERE node = %s AND (status = 'READY' OR (status = 'RUNNING' AND expires_at <= {now}))"
                " RETURNING node, epoch),"
                " fence AS ("
                " INSERT INTO lease_fences (node, epoch) SELECT node, epoch FROM claimed"
                " ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch >= lease_fences.epoch)"
                " SELECT epoch FROM claimed"
            ),
            (owner, self.config.ttl_ms, node),
        )
        return Lease(node, owner, int(rows[0][0])) if rows else self._claim_refusal(node)

    def _update_held(self, lease: Lease, assignments: str, params: tuple[Any, ...]) -> Outcome:
        """An update allowed only to the current, unexpired holder of ``lease``'s epoch."""
        rows = self._run(
            self._sql(
                f"UPDATE lease_nodes SET {assignments}"
                " WHERE node = %s AND status = 'RUNNING' AND epoch = %s AND expires_at > {now} RETURNING epoch"
            ),
            (*params, lease.node, lease.epoch),
        )
        return None if rows else self._refusal(lease.node, lease.epoch)

    def renew(self, lease: Lease) -> Outcome:
        return self._update_held(lease, "expires_at = {now} + %s * interval '1 millisecond'", (self.config.ttl_ms,))

    def commit(self, lease: Lease, result: str) -> Outcome:
        return self._update_held(lease, "status = 'SUCCEEDED', result = %s, expires_at = NULL", (result,))

    def release(self, lease: Lease) -> Outcome:
        rows = self._run(
            "UPDATE lease_nodes SET status = 'READY', owner = NULL, expires_at = NULL"
            " WHERE node = %s AND status = 'RUNNING' AND epoch = %s RETURNING epoch",
            (lease.node, lease.epoch),
        )
        return None if rows else self._refusal(lease.node, lease.epoch)

    def effect(self, lease: Lease, payload: str) -> Outcome:
        """Check and raise the fence and log the effect in one statement: no write slips in between."""
        rows = self._run(
            "WITH fence AS ("
            " INSERT INTO lease_fences (node, epoch) VALUES (%s, %s)"
            " ON CONFLICT (node) DO UPDATE SET epoch = excluded.epoch WHERE excluded.epoch >= lease_fences.epoch"
            " RETURNING node, epoch)"
            " INSERT INTO lease_effects (node, epoch, payload) SELECT node, epoch, %s FROM fence RETURNING epoch",
            (lease.node, lease.epoch, payload),
        )
        if rows:
            return None
        return Refused("stale", f"epoch {lease.epoch} < the fence (a larger epoch was accepted)")

    def read(self, node: str) -> NodeState:
        rows = self._run("SELECT status, epoch, owner, result FROM lease_nodes WHERE node = %s", (node,))
        if not rows:
            return NodeState(READY, 0)
        status, epoch, owner, result = rows[0]
        return NodeState(status, int(epoch), owner if status != READY else None, result)

    def read_resource(self, node: str) -> ResourceState:
        """The fence and the effects log in ONE statement, so one snapshot (READ COMMITTED takes one per statement).

        The log's order is ``id``'s: an effect draws its id only once it holds the
        node's fence row (the upsert before its insert), so ids follow the order
        the fence accepted them. No fence row yet reads as 0: nothing is refused.
        """
        rows = self._run(
            "SELECT (SELECT epoch FROM lease_fences WHERE node = %s),"
            " (SELECT coalesce(json_agg(json_build_array(epoch, payload) ORDER BY id), '[]') FROM lease_effects WHERE node = %s)",
            (node, node),
        )
        fence, log = rows[0]
        return ResourceState(tuple(Accepted(int(epoch), payload) for epoch, payload in log), int(fence or 0))

    def close(self) -> None:
        self._drop()
        self._watchdog.close()
