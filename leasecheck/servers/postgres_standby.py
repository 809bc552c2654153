"""A Postgres primary and a streaming standby on hosts of their own: the ``postgres-standby`` kinds.

Each member is a :class:`~leasecheck.servers.postgres.PostgresServer` moved onto
its host (:class:`StandbyMember`): it listens on the host's address only, and
its ``pg_hba.conf`` trusts normal and replication connections from the cluster's
range (the other member, and the root namespace's gateway where workers connect
from). m1 starts as the primary (``initdb``); m2 is copied from it by
``pg_basebackup``, run on m2's host, and streams from it with a physical
replication slot named after itself (so it never falls off, however long it is
cut off). ``postgres-standby`` replicates asynchronously: an acknowledged
commit may be on the primary alone, and a promotion loses it — the finding the
issue expects. ``postgres-standby-sync`` names the standby in
``synchronous_standby_names`` with ``synchronous_commit = remote_apply``: a
commit is acknowledged only once the standby has applied it.

Postgres has no failover of its own; :meth:`PostgresStandbyCluster.failover`
does what an HA manager (Patroni) does when the primary is lost: STONITH first
(SIGKILL of the primary's whole server, so that there are never two read-write
primaries), then ``pg_promote()`` on the standby. Between a failover and its heal
the new primary is alone and commits locally (Patroni's non-strict synchronous
mode: with no standby left, waiting for one would stop every write). The heal
rebuilds the deposed primary as a standby of the new one with a fresh
``pg_basebackup`` (its timeline may hold commits the new primary never saw:
it cannot just follow), and on the sync kind names it synchronous again.
A killed member that was not failed over comes back on its own data as it was
(a killed primary is primary again); a deposed one is only ever started
rebuilt, and only once it can be copied from the new primary: faults overlap,
so a rebuild the new primary's kill, pause or a cut link forbids at the
failover's heal is done when that fault heals. A failover with no standby fit
to promote does nothing (``skipped``), as an HA manager would.

Clients follow the cluster through a libpq multi-host DSN with
``target_session_attrs=read-write``: they connect to whichever member accepts writes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from leasecheck.errors import EnvironmentFailure
from leasecheck.servers.base import enter_netns
from leasecheck.servers.cluster import Cluster, Member
from leasecheck.servers.faketime import FaketimePostgresServer
from leasecheck.servers.hosts import SUBNET_PREFIX, Host
from leasecheck.servers.postgres import DURABLE_SETTINGS, PostgresServer
from leasecheck.targets.postgres_lease import Watchdog
from leasecheck.waiting import poll

#: every member listens on the standard port of its own address
PORT = 5432
#: the range the members and the workers' gateway are in (every cluster's subnet is 10.213.N.0/24)
CLUSTER_RANGE = f"{SUBNET_PREFIX}.0.0/16"
#: how long one question to a member may take (a paused member never answers)
ASK_TIMEOUT_S = 2.0
#: how long a rebuilt standby may take to stream again
STREAM_TIMEOUT_S = 15.0
HBA_LINES = (
    f"host all all {CLUSTER_RANGE} trust\n",
    f"host replication all {CLUSTER_RANGE} trust\n",
)


def member_url(address: str) -> str:
    return f"postgresql://postgres@{address}:{PORT}/postgres"


def ask(url: str, query: str, timeout_s: float = ASK_TIMEOUT_S) -> list[tuple[Any, ...]]:
    """Run ``query`` (autocommit) at ``url`` and return its rows; psycopg.Error if it fails or outlives ``timeout_s``.

    The connect has libpq's timeout; the query a watchdog that shuts the
    socket down (a paused member accepts the connection's bytes but never answers).
    """
    import psycopg

    watchdog = Watchdog()
    try:
        with (psycopg.connect(url, autocommit=True, connect_timeout=max(1, round(timeout_s))) as conn,
              watchdog.guard(conn.pgconn.socket, timeout_s)):
            cur = conn.execute(query)
            return cur.fetchall() if cur.description is not None else []
    finally:
        watchdog.close()


class StandbyMember(PostgresServer):
    """One member: on its host's address and namespace, a primary (``upstream`` None) or a standby of ``upstream``.

    The role lives in ``leasecheck.conf`` (rewritten on every start and by
    :meth:`reconfigure`) and in ``standby.signal``; a standby's empty data
    directory is filled by ``pg_basebackup`` from ``upstream`` at its start.
    """

    def __init__(self, directory: Path, host: Host, sync: bool, upstream: str | None = None) -> None:
        super().__init__(directory, port=PORT)
        self.host = host
        self.netns = host.netns
        self.sync = sync
        #: the primary's address this member streams from; None: it is the primary
        self.upstream = upstream
        #: the standby a primary waits for (the sync kind): its application_name, "" for none
        self.sync_standby = ""

    @property
    def url(self) -> str:
        return member_url(self.host.address)

    def _prepare(self) -> None:
        if self._user is not None:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            if self.upstream is None:
                self._initdb()
            else:
                self._basebackup(self.upstream)
        hba = self.data_dir / "pg_hba.conf"
        text = hba.read_text()
        if HBA_LINES[0] not in text:
            hba.write_text(text + "".join(HBA_LINES))
        self._write_settings()

    def _basebackup(self, upstream: str) -> None:
        """Copy the primary at ``upstream`` into the empty data directory, on this member's host, through its slot."""
        name = self.host.name
        ask(member_url(upstream), f"SELECT pg_create_physical_replication_slot('{name}', true)"
                                  f" WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '{name}')")
        shutil.rmtree(self.data_dir, ignore_errors=True)
        command = [
            str(self.bin_dir / "pg_basebackup"), "-D", str(self.data_dir), "-d", f"{member_url(upstream)}?connect_timeout=15",
            "-S", name, "--checkpoint=fast", "--wal-method=stream",
            *([] if self.layer is not None else ["--no-sync"]),  # on a power-loss layer, a copy must survive a power cut
        ]

        def on_host() -> None:
            enter_netns(self.netns)  # type: ignore[arg-type]  # set in __init__
            self._drop_privileges()

        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
                              preexec_fn=on_host, cwd=self.directory)
        if done.returncode != 0:
            raise EnvironmentFailure(f"postgres-standby: pg_basebackup of {name} from {upstream} failed "
                                     f"(exit {done.returncode}):\n{done.stdout}{done.stderr}".rstrip())

    def _write_settings(self) -> None:
        settings = {
            "listen_addresses": self.host.address,
            "port": str(self.port),
            "unix_socket_directories": str(self.directory) if len(str(self.directory)) < 80 else "",
            **DURABLE_SETTINGS,
            "wal_level": "replica",
            "max_wal_senders": "10",
            "max_replication_slots": "10",
            "hot_standby": "on",
            "wal_receiver_status_interval": "1s",
            "wal_retrieve_retry_interval": "500ms",
            "synchronous_commit": "remote_apply" if self.sync else "on",
            "synchronous_standby_names": self.sync_standby if self.upstream is None else "",
        }
        if self.upstream is not None:
            settings["primary_conninfo"] = (f"host={self.upstream} port={PORT} user=postgres "
                                            f"application_name={self.host.name} connect_timeout=2")
            settings["primary_slot_name"] = self.host.name
        path = self.data_dir / "leasecheck.conf"
        path.write_text("".join(f"{key} = '{value}'\n" for key, value in settings.items()))
        signal_file = self.data_dir / "standby.signal"
        if self.upstream is not None:
            signal_file.touch()
        if self._user is not None:
            for written in (path, signal_file):
                if written.exists():
                    os.chown(written, self._user.pw_uid, self._user.pw_gid)

    def reconfigure(self) -> None:
        """Rewrite ``leasecheck.conf`` for the role now and reload it (``synchronous_standby_names`` takes a reload)."""
        self._write_settings()
        ask(self.url, "SELECT pg_reload_conf()")

    def rebuild(self, upstream: str) -> None:
        """Throw the data away and start again as a standby of ``upstream`` (copied afresh from it)."""
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.upstream, self.sync_standby = upstream, ""
        self.start()


class FaketimeStandbyMember(StandbyMember, FaketimePostgresServer):
    """A member under libfaketime (``clock-member``): its clock follows ``faketime.rc`` in its directory.

    The MRO runs :class:`FaketimePostgresServer`'s constructor (the control file)
    under :class:`StandbyMember`'s, and its launcher and kill around the member's server.
    """


class PostgresStandbyCluster(Cluster):
    """m1 the primary, m2 its streaming standby (asynchronous); clients by a multi-host read-write DSN."""

    kind = "postgres-standby"
    layer_names = "journaled"  # Postgres never fsyncs the folder of a relation file it creates
    store = "postgres"
    description = "a Postgres primary and an asynchronous streaming standby; clients by a multi-host DSN (read-write)"
    size = 2
    skewable_members = True
    #: does the primary wait for the standby to apply each commit (``remote_apply``)?
    synchronous = False

    def __init__(self, directory: Path, ttl_ms: int = 1000, skewable: bool = False) -> None:
        super().__init__(directory, ttl_ms, skewable)
        self.directory.chmod(0o755)  # the members run as the postgres user, which must reach their folders
        #: who was made primary last (the promoted standby after a failover): the one :meth:`_ready` asks of
        self.leader = "m1"
        #: former primaries a failover deposed: never started on their own data again (it may hold lost commits)
        self.deposed: set[str] = set()
        #: members paused now (a paused leader cannot be copied from)
        self.paused: set[str] = set()

    # ---------------------------------------------------------------- what each kind says

    @property
    def url(self) -> str:
        hosts = ",".join(f"{m.host.address}:{PORT}" for m in self.members.values())
        timeout = max(2, round(self.ttl_ms / 1000))
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write&connect_timeout={timeout}"

    def _members(self, hosts: list[Host]) -> list[Member]:
        make = FaketimeStandbyMember if self.skewable else StandbyMember
        primary, standby = hosts
        first = make(self.directory / primary.name, primary, self.synchronous)
        first.sync_standby = standby.name if self.synchronous else ""
        second = make(self.directory / standby.name, standby, self.synchronous, upstream=primary.address)
        return [Member(primary.name, primary, first), Member(standby.name, standby, second)]

    def server(self, name: str) -> StandbyMember:
        server = self.members[name].server
        assert isinstance(server, StandbyMember)
        return server

    def _start_members(self) -> None:
        """The primary first: the standby is copied from it."""
        for name in self.members:
            self.server(name).start()

    def start_members(self, names: Iterable[str]) -> None:
        """One after the other (after an outage: a standby answers on its own data, a deposed member waits for the leader)."""
        for name in sorted(names, key=lambda name: name != self.leader):
            self.start_member(name)

    def _other(self, name: str) -> str:
        return next(m for m in self.members if m != name)

    def streaming(self, primary: str, standby: str) -> bool:
        """Does ``primary`` answer read-write, with ``standby`` streaming from it (its synchronous standby on the sync kind)?"""
        query = ("SELECT pg_is_in_recovery(), (SELECT count(*) FROM pg_stat_replication WHERE application_name = '"
                 + standby + "' AND state = 'streaming'" + (" AND sync_state = 'sync'" if self.synchronous else "") + ")")
        try:
            rows = ask(self.server(primary).url, query)
        except Exception:  # psycopg.Error, or a connection the watchdog cut
            return False
        return bool(rows) and rows[0][0] is False and rows[0][1] == 1

    def _ready(self) -> bool:
        return self.streaming(self.leader, self._other(self.leader))

    def primary(self) -> str | None:
        """The member that answers ``pg_is_in_recovery()`` false, asked of both at once with short timeouts.

        None if no member does (the primary killed, paused or not yet promoted),
        and None too if both do: two read-write primaries are a broken cluster,
        never "the" primary (STONITH in :meth:`failover` means we never make one).
        """
        live = [name for name in self.members if name not in self.down]

        def writable(name: str) -> bool:
            try:
                return ask(self.server(name).url, "SELECT pg_is_in_recovery()", timeout_s=1.0) == [(False,)]
            except Exception:
                return False

        if not live:
            return None
        with ThreadPoolExecutor(max_workers=len(live)) as pool:
            answers = dict(zip(live, pool.map(writable, live), strict=True))
        primaries = [name for name, yes in answers.items() if yes]
        return primaries[0] if len(primaries) == 1 else None

    # ---------------------------------------------------------------- failover

    def failover(self) -> dict[str, Any]:
        """As Patroni on a lost primary: SIGKILL the primary (STONITH), promote the standby; ``{"from", "to"}``.

        With no standby fit to promote (down, deposed and not yet rebuilt, paused:
        it does not answer) nothing is done, as an HA manager would do nothing:
        ``{"to": None, "primary": ..., "skipped": why}``.
        """
        old = self.leader
        new = self._other(old)
        if new in self.down or new in self.deposed or new in self.paused or not self._answers(new):
            return {"to": None, "primary": old, "skipped": f"no standby to promote: {new} is down or not answering"}
        self.kill_member(old)
        self.deposed.add(old)
        try:
            promoted = ask(self.server(new).url, "SELECT pg_promote(true, 10)", timeout_s=12.0)
        except Exception as e:
            raise EnvironmentFailure(f"{self.kind}: promoting {new} failed: {e}") from None
        if promoted != [(True,)]:
            raise EnvironmentFailure(f"{self.kind}: {new} was not promoted within 10 s")
        self.leader = new
        server = self.server(new)
        server.upstream, server.sync_standby = None, ""  # alone until the heal: commits are local
        server.reconfigure()
        return {"from": old, "to": new}

    def _answers(self, name: str) -> bool:
        try:
            return bool(ask(self.server(name).url, "SELECT 1", timeout_s=1.0))
        except Exception:
            return False

    def heal_failover(self) -> dict[str, Any] | None:
        """Rebuild each deposed primary as a streaming standby of the new one; None if there was none.

        ``{"rebuilt": [...]}``; ``"pending"`` lists those that cannot be rebuilt
        yet (the new primary down or paused, or cut from them by a partition):
        they are rebuilt when that other fault heals (:meth:`_rebuild_pending`).
        """
        if not self.deposed:
            return None
        rebuilt = self._rebuild_pending()
        pending = sorted(self.deposed)
        return {"rebuilt": rebuilt, **({"pending": pending} if pending else {})}

    def _rebuild_pending(self) -> list[str]:
        """Rebuild every deposed member that can be now: the leader up, answering and linked to it; the names rebuilt."""
        if self.leader in self.down or self.leader in self.paused or self.network is None:
            return []
        cut = self.network.links_cut()
        ready = [n for n in sorted(self.deposed) if (min(n, self.leader), max(n, self.leader)) not in cut]
        for name in ready:
            self._rebuild(name)
        return ready

    def _rebuild(self, name: str) -> None:
        leader = self.server(self.leader)
        self.server(name).rebuild(leader.host.address)
        self.deposed.discard(name)
        self.down.discard(name)
        if self.synchronous:
            leader.sync_standby = name
            leader.reconfigure()
        if not poll(lambda: self.streaming(self.leader, name), STREAM_TIMEOUT_S, every=0.1):
            raise EnvironmentFailure(f"{self.kind}: the rebuilt {name} does not stream from {self.leader} "
                                     f"within {STREAM_TIMEOUT_S:g} s; log {self.server(name).log_path}")

    # ---------------------------------------------------------------- member faults: a deposed member waits for them

    def start_member(self, name: str) -> None:
        """Start a killed member on its data; a deposed primary is only ever rebuilt (never two primaries)."""
        if name not in self.deposed:
            super().start_member(name)
        self._rebuild_pending()

    def pause_member(self, name: str) -> None:
        super().pause_member(name)
        self.paused.add(name)

    def resume_member(self, name: str) -> None:
        super().resume_member(name)
        self.paused.discard(name)
        self._rebuild_pending()

    def heal_partition(self, links: Iterable[tuple[str, str]] | None = None) -> None:
        super().heal_partition(links)
        if self.network is not None:
            self._rebuild_pending()

    def stop(self) -> None:
        """Heal any partition first: a primary's shutdown waits for its standby to receive the last WAL."""
        try:
            if self.network is not None:
                self.network.heal()
        finally:
            super().stop()


class PostgresSyncStandbyCluster(PostgresStandbyCluster):
    """``postgres-standby`` with the standby synchronous: ``synchronous_commit = remote_apply``, the standby named."""

    kind = "postgres-standby-sync"
    description = "postgres-standby with the standby synchronous (synchronous_commit = remote_apply)"
    synchronous = True
