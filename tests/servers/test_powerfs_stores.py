"""Real stores on the power-loss layer: a store that acknowledges before it fsyncs loses acknowledged writes at a
power cut, one that fsyncs first loses none; and the ``power-loss`` fault of the catalogue records what it dropped.

redis-server and Postgres are started by the project's own server classes with a durability profile
(:mod:`leasecheck.targets.durability`); SQLite runs in a child process with the profile's PRAGMAs, and is SIGKILLed
(a clean close would checkpoint its WAL, which no crash does) before the power is cut.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from stores import serve

from leasecheck.nemesis.catalogue import FAULTS, Need, unmet
from leasecheck.nemesis.context import FaultContext
from leasecheck.servers.base import EnvironmentFailure
from leasecheck.servers.postgres import PostgresServer
from leasecheck.servers.powerfs_layer import PowerLayer, on_powerfs
from leasecheck.servers.redis import RedisServer
from leasecheck.targets.durability import SQLITE

#: how many acknowledged SETs a burst sends before the power is cut
BURST = 2000


@pytest.fixture
def redis_on_layer(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    yield from serve(lambda: on_powerfs(RedisServer(tmp_path / "redis", profile=request.param)), "redis on the power-loss layer")


def burst_then_power_loss(server: RedisServer, tag: str) -> tuple[list[str], list[str], dict[str, int]]:
    """BURST acknowledged SETs, the power cut right after the last reply: (keys acknowledged, keys lost, dropped)."""
    client = redis.Redis.from_url(server.url)
    acked = []
    for i in range(BURST):
        assert client.set(f"{tag}:{i}", i)
        acked.append(f"{tag}:{i}")
    client.close()
    dropped = server.power_loss()
    client = redis.Redis.from_url(server.url)
    lost = [key for key in acked if client.get(key) is None]
    client.close()
    return acked, lost, dropped


@pytest.mark.parametrize("redis_on_layer", ["fast"], indirect=True)
def test_redis_appendfsync_everysec_loses_writes_it_acknowledged(redis_on_layer: RedisServer) -> None:
    """everysec: the AOF is fsynced once a second in the background, so a power cut loses the last second's SETs,
    all acknowledged. The burst lasts well under a second; the bio thread's fsync could land between the last reply
    and the cut (a few ms of a second), so up to three bursts are tried and one must lose."""
    for attempt in range(3):
        acked, lost, dropped = burst_then_power_loss(redis_on_layer, f"burst{attempt}")
        if lost:
            break
    assert lost, "no acknowledged SET was lost in three bursts"
    assert dropped["bytes"] > 0 and dropped["files"] >= 1
    kept = acked[: len(acked) - len(lost)]
    assert lost == acked[len(kept):], "what is lost is the tail of the burst: the AOF is a prefix of what was acknowledged"
    client = redis.Redis.from_url(redis_on_layer.url)
    assert all(client.get(key) is not None for key in kept)
    client.close()


@pytest.mark.parametrize("redis_on_layer", ["durable"], indirect=True)
def test_redis_appendfsync_always_loses_nothing_it_acknowledged(redis_on_layer: RedisServer) -> None:
    for attempt in range(2):
        acked, lost, dropped = burst_then_power_loss(redis_on_layer, f"burst{attempt}")
        assert lost == [] and len(acked) == BURST
        assert dropped == {"bytes": 0, "files": 0, "entries": 0}


@pytest.mark.parametrize("redis_on_layer", ["fast"], indirect=True)
def test_the_power_loss_fault_records_what_it_dropped_and_brings_the_store_back(redis_on_layer: RedisServer) -> None:
    kind = FAULTS["power-loss"]
    assert kind.events == ("kill", "start") and Need.POWERFS in kind.needs
    fault = kind.make(FaultContext(ttl_ms=1000, server=redis_on_layer), random.Random(1))
    assert fault is not None
    unsynced = redis_on_layer.directory / "unsynced"  # written in the store's folder, never fsynced: surely lost
    unsynced.write_bytes(b"x" * 1000)
    started = fault.start()
    assert started["victims"] == ["store"]
    assert started["dropped"]["bytes"] >= 1000 and started["dropped"]["files"] >= 1 and started["dropped"]["entries"] >= 1
    assert redis_on_layer.pid is None and not unsynced.exists()
    assert fault.heal() == {"victims": ["store"]} and fault.heal() is None
    assert redis.Redis.from_url(redis_on_layer.url).ping()
    assert fault.undo_record() is None


def test_the_power_loss_fault_has_no_victim_off_the_layer(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    assert FAULTS["power-loss"].make(FaultContext(ttl_ms=1000, server=server), random.Random(1)) is None
    assert unmet([FAULTS["power-loss"], FAULTS["kill-store"]], {Need.SERVER}) == (
        "power-loss needs the store's server on the power-loss layer (powerfs)")
    assert unmet([FAULTS["power-loss"]], {Need.SERVER, Need.POWERFS}) is None


# ------------------------------------------------------------------------- Postgres


@pytest.fixture
def postgres_on_layer(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """Postgres on a journaled layer (any fsync makes every pending name durable, as on ext4): Postgres never fsyncs
    the folder of a relation file it creates, and under the strict rules a checkpoint's power cut loses the file."""
    server = on_powerfs(PostgresServer(profile=request.param), names="journaled")  # its own folder: the postgres user's
    try:
        server.start(timeout=120)
    except EnvironmentFailure as e:
        pytest.fail(f"cannot start postgres on the power-loss layer: {e}", pytrace=False)
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (i int)")
            conn.execute("CHECKPOINT")  # the table on the disk: only the commits are at stake
        yield server
    finally:
        server.stop()
        server.cleanup()


def commits_then_power_loss(server: PostgresServer, first: int) -> tuple[int, dict[str, int]]:
    """BURST acknowledged one-row commits, then the power cut: (how many of them are left, what was dropped)."""
    with psycopg.connect(server.url, autocommit=True) as conn:
        for i in range(first, first + BURST):
            conn.execute("INSERT INTO t VALUES (%s)", (i,))
    dropped = server.power_loss()
    with psycopg.connect(server.url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM t WHERE i >= %s", (first,)).fetchone()
    assert row is not None
    return row[0], dropped


@pytest.mark.parametrize("postgres_on_layer", ["fast"], indirect=True)
def test_postgres_synchronous_commit_off_loses_commits_it_acknowledged(postgres_on_layer: PostgresServer) -> None:
    """The WAL writer flushes an asynchronous commit within 3 x wal_writer_delay (200 ms): a burst's tail is lost."""
    for attempt in range(3):
        kept, dropped = commits_then_power_loss(postgres_on_layer, attempt * BURST)
        if kept < BURST:
            break
    assert kept < BURST, "no acknowledged commit was lost in three bursts"
    assert dropped["bytes"] > 0


@pytest.mark.parametrize("postgres_on_layer", ["durable"], indirect=True)
def test_postgres_synchronous_commit_on_loses_nothing_it_acknowledged(postgres_on_layer: PostgresServer) -> None:
    kept, dropped = commits_then_power_loss(postgres_on_layer, 0)
    assert kept == BURST
    assert dropped["bytes"] > 0, "the heap's pages were dropped, and the WAL brought the commits back"


# ------------------------------------------------------------------------- SQLite

#: the child: the profile's PRAGMAs, then one row per committed transaction, each commit's number printed once done
WRITER = textwrap.dedent("""
    import sqlite3, sys, time
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    for pragma in sys.argv[3:]:
        db.execute(pragma)
    for i in range(int(sys.argv[2])):
        db.execute("INSERT INTO t VALUES (?)", (i,))
        print(i, flush=True)
    time.sleep(60)  # killed here: a close would checkpoint
""")


def sqlite_commits_after_power_loss(tmp_path: Path, profile: str, commits: int = 200) -> tuple[int, dict[str, int]]:
    """``commits`` acknowledged single-row transactions in a child on the layer, the child SIGKILLed, the power cut:
    (rows left, what the layer dropped)."""
    with PowerLayer(tmp_path / "disk", tmp_path / "mnt", tmp_path / "ctl.sock", tmp_path / "powerfs.log") as layer:
        db_path = layer.mount_point / "lease.db"
        setup = sqlite3.connect(db_path)
        for pragma in SQLITE[profile]:
            setup.execute(pragma)
        setup.execute("CREATE TABLE t (i INTEGER)")
        setup.commit()
        setup.close()
        layer.sync()  # the empty table is on the disk: only the commits are at stake
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(db_path), str(commits), *SQLITE[profile]],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            acknowledged = [int(child.stdout.readline()) for _ in range(commits)]
            assert acknowledged == list(range(commits))
        finally:
            child.kill()
            child.wait()
        dropped = layer.power_loss()
        check = sqlite3.connect(db_path)
        try:
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            rows = check.execute("SELECT count(*) FROM t").fetchone()[0]
        finally:
            check.close()
        return rows, dropped


def test_sqlite_wal_with_synchronous_normal_loses_commits_it_acknowledged(tmp_path: Path) -> None:
    """WAL + NORMAL syncs the WAL only at a checkpoint (at 1000 pages; 200 one-row commits never reach it): every
    commit since the table was made is lost, deterministically."""
    rows, dropped = sqlite_commits_after_power_loss(tmp_path, "fast")
    assert rows == 0
    assert dropped["bytes"] > 0


def test_sqlite_wal_with_synchronous_full_loses_nothing_it_acknowledged(tmp_path: Path) -> None:
    rows, dropped = sqlite_commits_after_power_loss(tmp_path, "durable")
    assert rows == 200
    assert dropped == {"bytes": 32768, "files": 1, "entries": 0}, "only the WAL index (-shm: memory SQLite never syncs)"


# ------------------------------------------------------------------------- the profiles as the stores take them


def test_each_store_takes_its_profile_by_name(tmp_path: Path) -> None:
    from leasecheck.targets.base import TargetConfig
    from leasecheck.targets.durability import PROFILES, UnknownProfile
    from leasecheck.targets.sqlite_lease import SqliteLease

    assert PROFILES == ("durable", "default", "fast")
    fsync = {p: RedisServer(tmp_path / p, profile=p)._command() for p in PROFILES}
    assert fsync["durable"][-6:] == ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    assert fsync["fast"][-6:] == ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
    assert "--appendonly" not in fsync["default"]
    expected = {"durable": ("wal", 2), "default": ("delete", 2), "fast": ("wal", 1)}  # synchronous: 2 FULL, 1 NORMAL
    for profile, (journal, synchronous) in expected.items():
        options = {} if profile == "durable" else {"store_config": profile}  # durable unless named
        lease = SqliteLease(TargetConfig(url=f"sqlite:///{tmp_path / profile}.db", ttl_ms=1000, options=options))
        try:
            assert lease.db.execute("PRAGMA journal_mode").fetchone()[0] == journal
            assert lease.db.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        finally:
            lease.close()
    with pytest.raises(UnknownProfile, match=r"unknown store config 'turbo' \(one of durable, default, fast\)"):
        RedisServer(tmp_path / "turbo", profile="turbo")

