"""sqlalchemy-dlock (Postgres session advisory locks) audited as a lease, records in Postgres tables.

``create_sadlock(connection, key)`` on a SQLAlchemy connection runs
``pg_try_advisory_lock(key)`` (the key is the BLAKE2b hash of the name): a
*session* lock, held until it is unlocked or the session ends. There is no
ttl and no fencing token; the README's promise is "Locks are tied to your
database connection. Closing a connection releases all associated locks".
So each granted lock keeps its own connection (the README's ``with
engine.connect() as conn:``), ``renew`` is the library's ``lock.locked`` plus a
``SELECT 1`` on that connection (a session that answers still holds its
session locks), and the job's record and effects are plain ``UPDATE`` /
``INSERT`` on another connection that trust the lock.

When does Postgres give a lock away? Exactly when it ends the holder's
session: the holder's process dies (its socket closes), the server restarts,
or a proxy between them closes the connection. A paused holder, or a
connection that silently stops carrying bytes, keeps its session (and the
lock) until TCP notices, which with the server's default keepalive settings
takes hours; nothing here sets ``idle_session_timeout`` or keepalives, as the
README does not either. So a partition (Toxiproxy) frees the lock when the
proxy closes the connection: at once when it refuses ("cut"), at the heal when
it swallows bytes ("hang"); the records sit behind the same proxy, so the cut
holder's own writes are refused until the heal, and only a holder still
writing after it overwrites its successor's work (measured in 60-80 % of 8 s
runs: too rare to publish as a reproducible verdict).

:class:`SqlRecords` can also write *fenced* (``UPDATE ... WHERE fence IS NULL
OR fence <= :fence``), the advice a finding ends with; this unfenced adapter
never uses it, its unit tests do.

Failures follow the reference Postgres backend: no connection → Unavailable;
a statement sent and then lost (or cut by our deadline: a paused server never
answers) → Indeterminate.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leasecheck.histories.vocabulary import READY, AnomalyKind
from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.base import Indeterminate, TargetConfig, Unavailable
from leasecheck.targets.locks.lockbase import Held, LockLease, Record, Records
from leasecheck.targets.pg_watchdog import Watchdog, still_open

if TYPE_CHECKING:  # psycopg and SQLAlchemy are imported where they are used: listing the backends must not load them
    import psycopg
    from sqlalchemy import Connection, Engine

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS dlock_nodes (node text PRIMARY KEY, status text NOT NULL DEFAULT 'READY',"
    " owner text, token text, result text, fence bigint)",
    "CREATE TABLE IF NOT EXISTS dlock_effects (id bigserial PRIMARY KEY, node text NOT NULL, token text NOT NULL,"
    " payload text NOT NULL, fence bigint)",
    # reading one node's resource back (read-resource) without a scan; added to a store made before it too
    "CREATE INDEX IF NOT EXISTS dlock_effects_by_node ON dlock_effects (node, id)",
)
#: serialises concurrent setup() calls (CREATE TABLE IF NOT EXISTS races on the catalog); an advisory lock, fittingly
SETUP_KEY = 0x5AD10C4
#: the record's columns a ``put`` may change
COLUMNS = ("status", "owner", "token", "result")


def make_engine(config: TargetConfig) -> Engine:
    """SQLAlchemy on the ``postgresql+psycopg`` dialect for ``config.url`` (a libpq DSN or a ``postgresql://`` URL).

    Why a ``creator``: libpq reads both spellings of the address itself, and the
    connection gets the reference backend's connect timeout and
    ``statement_timeout``. No pool: a lock lives exactly as long as its
    connection, so each one is opened and closed on purpose.
    """
    import psycopg
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    timeout_ms = max(1, int(config.timeout_s * 1000))

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(
            config.url, autocommit=True, connect_timeout=max(1, round(config.timeout_s)),
            options=f"-c statement_timeout={timeout_ms}", application_name="leasecheck-dlock",
        )

    return create_engine("postgresql+psycopg://", creator=connect, poolclass=NullPool, isolation_level="AUTOCOMMIT")


class Connections:
    """Opens, guards and drops SQLAlchemy connections with the protocol's two exceptions.

    Opening failed → Unavailable (nothing was sent). A statement that fails
    with a connection error (or outlives ``deadline_s``: the watchdog shuts
    its socket) → Indeterminate, and the connection is closed.
    """

    def __init__(self, config: TargetConfig) -> None:
        self.engine = make_engine(config)
        self.watchdog = Watchdog()
        #: a little over the server's statement_timeout, which should fire first
        self.deadline_s = config.timeout_s + 1.0

    def open(self) -> Connection:
        from sqlalchemy.exc import DBAPIError

        try:
            return self.engine.connect()
        except DBAPIError as e:
            raise Unavailable(f"cannot connect to postgres: {_first_line(e)}") from None

    @staticmethod
    def alive(conn: Connection | None) -> bool:
        """Open, and not hung up on by the server (a restart, a proxy that closed it): checked before sending."""
        import psycopg

        if conn is None or conn.closed or conn.invalidated:
            return False
        driver = conn.connection.driver_connection
        return isinstance(driver, psycopg.Connection) and not driver.closed and not driver.broken and still_open(driver)

    def execute(self, conn: Connection, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        """One statement on ``conn``; its rows (none for a statement that returns none)."""
        import psycopg
        from sqlalchemy import text
        from sqlalchemy.exc import DBAPIError

        try:
            with self.watchdog.guard(self._fd(conn), self.deadline_s):
                result = conn.execute(text(statement), params or {})
                return list(result.all()) if result.returns_rows else []
        except DBAPIError as e:
            if not e.connection_invalidated and not isinstance(e.orig, psycopg.OperationalError | psycopg.InterfaceError):
                raise
            fired = self.watchdog.fired
            self.close(conn)
            raise Indeterminate(
                f"postgres did not answer within {self.deadline_s:g} s" if fired
                else f"postgres statement outcome unknown: {_first_line(e)}"
            ) from None

    def guard(self, conn: Connection) -> Any:
        """The watchdog over ``conn``'s socket, for a library call that sends statements itself."""
        return self.watchdog.guard(self._fd(conn), self.deadline_s)

    @staticmethod
    def close(conn: Connection | None) -> None:
        if conn is None:
            return
        try:
            conn.close()
        except Exception:
            pass

    @staticmethod
    def _fd(conn: Connection) -> int:
        import psycopg

        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        return driver.pgconn.socket


def _first_line(error: BaseException) -> str:
    lines = str(getattr(error, "orig", None) or error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


class SqlRecords(Records):
    """Jobs' records in Postgres: a row per node, an effects table; plain or fenced (conditional) writes.

    A plain write is what a lock's user writes while trusting the lock. A
    fenced write is one statement whose ``WHERE`` compares the row's fence: it
    applies (and raises the fence) only if no larger fence wrote before, so a
    zombie's late write is refused by the database itself. An effect is
    guarded by the node row's fence too (a claim's write lifts it: docs/contracts/anomaly-kinds.md's
    ``effect_fence: "lease"``), in the same statement that logs it.
    """

    def __init__(self, db: Connections) -> None:
        self.db = db
        self._conn: Connection | None = None

    def _run(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        conn = self._conn
        if conn is None or not self.db.alive(conn):
            self.db.close(conn)
            self._conn = None
            conn = self._conn = self.db.open()
        try:
            return self.db.execute(conn, statement, params)
        except Indeterminate:
            self._conn = None
            raise

    def setup(self) -> None:
        self._run("SELECT pg_advisory_lock(:key)", {"key": SETUP_KEY})
        try:
            for statement in SCHEMA:
                self._run(statement)
        finally:
            self._run("SELECT pg_advisory_unlock(:key)", {"key": SETUP_KEY})

    def add_nodes(self, nodes: list[str]) -> None:
        self._run(
            "INSERT INTO dlock_nodes (node) SELECT unnest(CAST(:nodes AS text[])) ON CONFLICT (node) DO NOTHING",
            {"nodes": nodes},
        )

    def get(self, node: str) -> Record | None:
        rows = self._run("SELECT status, owner, token, result, fence FROM dlock_nodes WHERE node = :node", {"node": node})
        if not rows:
            return None
        status, owner, token, result, fence = rows[0]
        return Record(status, owner, token, result, fence)

    def put(self, node: str, changes: dict[str, Any], fence: int | None = None) -> bool:
        """Upsert ``changes``; with ``fence``, only if the row's fence is NULL or not above it (and raise it)."""
        unknown = set(changes) - set(COLUMNS)
        if unknown:
            raise ValueError(f"no such record fields: {sorted(unknown)}")
        names = list(changes)
        params = {**{f"v_{name}": value for name, value in changes.items()}, "node": node, "fence": fence}
        inserted = ", ".join(["node", "status", *[n for n in names if n != "status"], "fence"])
        values = ", ".join([":node", f"COALESCE(:v_status, '{READY}')" if "status" in changes else f"'{READY}'",
                            *[f":v_{n}" for n in names if n != "status"], "CAST(:fence AS bigint)"])
        updates = [f"{n} = excluded.{n}" for n in names]
        guard = ""
        if fence is not None:
            updates.append("fence = excluded.fence")
            guard = " WHERE dlock_nodes.fence IS NULL OR dlock_nodes.fence <= excluded.fence"
        rows = self._run(
            f"INSERT INTO dlock_nodes ({inserted}) VALUES ({values})"
            f" ON CONFLICT (node) DO UPDATE SET {', '.join(updates) or 'node = excluded.node'}{guard} RETURNING node",
            params,
        )
        return bool(rows)

    def append_effect(self, node: str, token: str, payload: str, fence: int | None = None) -> bool:
        params = {"node": node, "token": token, "payload": payload, "fence": fence}
        if fence is None:
            self._run("INSERT INTO dlock_effects (node, token, payload) VALUES (:node, :token, :payload)", params)
            return True
        rows = self._run(
            "WITH lifted AS (UPDATE dlock_nodes SET fence = CAST(:fence AS bigint)"
            " WHERE node = :node AND (fence IS NULL OR fence <= CAST(:fence AS bigint)) RETURNING node)"
            " INSERT INTO dlock_effects (node, token, payload, fence)"
            " SELECT node, :token, :payload, CAST(:fence AS bigint) FROM lifted RETURNING id",
            params,
        )
        return bool(rows)

    def effects(self, node: str) -> list[dict[str, Any]]:
        """The node's effects, oldest first (for tests and post-mortems)."""
        rows = self._run("SELECT token, payload, fence FROM dlock_effects WHERE node = :node ORDER BY id", {"node": node})
        return [{"token": r[0], "payload": r[1], "fence": r[2]} for r in rows]

    def resource(self, node: str) -> tuple[int | None, list[dict[str, Any]]]:
        """The row's fence and the node's effects in ONE statement (one snapshot), effects in ``id`` order."""
        rows = self._run(
            "SELECT (SELECT fence FROM dlock_nodes WHERE node = :node), (SELECT coalesce(json_agg(json_build_object("
            "'token', token, 'payload', payload, 'fence', fence) ORDER BY id), '[]') FROM dlock_effects WHERE node = :node)",
            {"node": node},
        )
        fence, entries = rows[0]
        return (int(fence) if fence is not None else None), list(entries)

    def close(self) -> None:
        self.db.close(self._conn)
        self._conn = None


#: what a lost session shows (kill-store, measured over 10 seeds): every lock is gone at once, each holder hears
#: of it at its next heartbeat or never (a stalled one), and goes on writing over the next holder's work
LOST_SESSION_KINDS: tuple[AnomalyKind, ...] = ("stale-effect", "stale-commit", "duplicate-commit", "lost-commit")


@dataclass
class Session:
    """A granted lock and the connection whose session holds it."""

    conn: Connection
    lock: Any


class SqlalchemyDlock(LockLease):
    """sqlalchemy-dlock's Postgres session advisory lock as its README uses it: one connection per held lock."""

    name = "sqlalchemy-dlock"
    fenced = False
    store = "postgres"
    requires = ("psycopg", "sqlalchemy", "sqlalchemy_dlock")
    extra = "audit"
    #: no ttl: the lock is held while the holder's session lives (the ttl-defined kinds do not apply)
    lease_expiry = "holder"

    audit = AuditPlan(
        library="sqlalchemy-dlock",
        mode="session-lock",
        faults=(
            FaultAudit("pause", "valid"),
            FaultAudit("kill", "valid"),
            FaultAudit("pause-store", "valid"),
            # the finding is a holder that wakes after its session died with the server and writes on: a run in which
            # no zombie acted (beside load, a slow restart outlasted every stall in 4 of 5 seeds) tested nothing of it
            FaultAudit("kill-store", "invalid", LOST_SESSION_KINDS, require=("zombie-effect-before-new-effect",)),
        ),
        seeds=(1, 2, 3, 4, 5),
        fix=(
            "A session advisory lock is lost with its session (a server restart, a dropped connection) while its "
            "holder writes on. Fence the writes: a counter bumped under the lock and every write conditional on it "
            "(UPDATE ... WHERE fence <= :mine); checking the connection before writing narrows the window, never closes it."
        ),
        time_limit=8.0,
        options={"ttl_ms": 500, "nemesis_interval": 2.0, "concurrency": 8},
    )

    def __init__(self, config: TargetConfig) -> None:
        self.db = Connections(config)
        super().__init__(config)
        #: a connection that tried a lock and did not get it: the next try uses it
        self._spare: Connection | None = None

    def make_records(self) -> Records:
        return SqlRecords(self.db)


    def acquire(self, node: str, owner: str) -> Held | None:
        from sqlalchemy.exc import DBAPIError
        from sqlalchemy_dlock import create_sadlock

        conn = self._spare if self.db.alive(self._spare) else None
        self._spare = None
        if conn is None:
            conn = self.db.open()
        lock: Any = create_sadlock(conn, node)  # the key: BLAKE2b of the node's name, as the README's strings
        try:
            with self.db.guard(conn):
                got = lock.acquire(block=False)
        except DBAPIError as e:
            self.db.close(conn)
            raise Indeterminate(f"pg_try_advisory_lock outcome unknown: {_first_line(e)}") from None
        if not got:
            self._spare = conn
            return None
        return Held(Session(conn, lock), secrets.token_hex(16))

    def extend(self, held: Held) -> bool:
        """The library's ``locked`` and a round trip: a session that answers still holds its session locks."""
        session: Session = held.lock
        if not session.lock.locked:
            return False
        if not self.db.alive(session.conn):
            return False  # the server ended the session (restart, a closed proxy): the lock went with it
        self.db.execute(session.conn, "SELECT 1")
        return True

    def unlock(self, held: Held) -> None:
        session: Session = held.lock
        try:
            if self.db.alive(session.conn):
                with self.db.guard(session.conn):
                    session.lock.release()
        except Exception:
            pass  # closing the connection ends the session, and its locks with it
        finally:
            self.db.close(session.conn)

    def close(self) -> None:
        super().close()
        self.db.close(self._spare)
        self._spare = None
        self.db.watchdog.close()
        self.db.engine.dispose()
