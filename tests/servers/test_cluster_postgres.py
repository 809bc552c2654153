"""The postgres-standby kinds: start, a partition between the members, failover and its heal, the reference lease.

Real servers in real namespaces (root only). What each test holds: each kind
starts with m1 primary and m2 streaming from it (its start-up time: ``bench/bench_clusters.py``)
(``sync_state = 'sync'`` on the sync kind); a killed primary comes back as the
primary; cutting m1 from m2 really stops replication (a row written on m1 does
not reach m2 while cut, and does after the heal) and, on the sync kind, holds a
commit unacknowledged until the heal; ``failover()`` really promotes m2 (the
multi-host DSN then reaches m2 read-write) and ``heal_failover()`` makes m1 a
streaming standby of it, so that a second failover works; the reference lease
claims and commits through the DSN before and after each failover; and a commit
whose wait for the synchronous standby is cancelled is reported Indeterminate,
never ok.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from leasecheck.servers.hosts import run_namespaces
from leasecheck.servers.postgres_standby import PostgresStandbyCluster, PostgresSyncStandbyCluster, ask
from leasecheck.targets.base import Indeterminate, Lease, TargetConfig
from leasecheck.targets.postgres_lease import PostgresLease
from leasecheck.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cluster members run in network namespaces: root only")

KINDS = [PostgresStandbyCluster, PostgresSyncStandbyCluster]
MakeCluster = Callable[..., PostgresStandbyCluster]


@pytest.fixture
def make_cluster() -> Iterator[MakeCluster]:
    """Start a cluster; stop it at the end, and check that nothing of it is left."""
    made: list[PostgresStandbyCluster] = []

    def make(cls: type[PostgresStandbyCluster], skewable: bool = False) -> PostgresStandbyCluster:
        # under /tmp, not pytest's folder: the postgres user the members run as cannot enter that
        cluster = cls(Path(tempfile.mkdtemp(prefix="leasecheck-test-pgs-")), ttl_ms=1000, skewable=skewable)
        made.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in made:
        namespaces = cluster.network.namespaces if cluster.network is not None else []
        cluster.stop()
        assert not set(namespaces) & set(run_namespaces())
        assert all(m.server.pid is None for m in cluster.members.values())
        cluster.cleanup()


def replicas(cluster: PostgresStandbyCluster, primary: str) -> list[tuple[str, str, str]]:
    """(application_name, state, sync_state) of every standby connected to ``primary``."""
    rows = ask(cluster.server(primary).url, "SELECT application_name, state, sync_state FROM pg_stat_replication")
    return [(row[0], row[1], row[2]) for row in rows]


def expected_link(cluster: PostgresStandbyCluster, standby: str) -> list[tuple[str, str, str]]:
    return [(standby, "streaming", "sync" if cluster.synchronous else "async")]


def rows_on(cluster: PostgresStandbyCluster, member: str) -> set[int]:
    """The rows of table ``t`` on ``member`` (none while the table itself has not reached it)."""
    try:
        return {row[0] for row in ask(cluster.server(member).url, "SELECT x FROM t")}
    except psycopg.errors.UndefinedTable:
        return set()


@pytest.mark.parametrize("cls, skewable", [(PostgresStandbyCluster, True), (PostgresSyncStandbyCluster, False)])
def test_starts_with_m1_primary_and_m2_streaming(
    make_cluster: MakeCluster, cls: type[PostgresStandbyCluster], skewable: bool,
) -> None:
    cluster = make_cluster(cls, skewable)
    assert cluster.primary() == "m1"
    assert replicas(cluster, "m1") == expected_link(cluster, "m2")
    assert ask(cluster.server("m2").url, "SELECT pg_is_in_recovery()") == [(True,)]
    if skewable:  # a member's clock moves alone (libfaketime), the other's stays the host's
        cluster.skew_member("m2", 3_600_000)
        skewed, = ask(cluster.server("m2").url, "SELECT extract(epoch FROM clock_timestamp())")[0]
        assert float(skewed) - time.time() > 3500
        cluster.skew_member("m2", 0)
    # a killed primary comes back on its data as the primary (Postgres fails over only when told to)
    cluster.kill_member("m1")
    assert cluster.primary() is None
    cluster.start_member("m1")
    assert cluster.primary() == "m1"
    wait_for(lambda: replicas(cluster, "m1") == expected_link(cluster, "m2"), 10.0, every=0.1, what="m2 streaming again")


@pytest.mark.parametrize("cls", KINDS)
def test_a_partition_of_m1_from_m2_stops_replication(make_cluster: MakeCluster, cls: type[PostgresStandbyCluster]) -> None:
    cluster = make_cluster(cls)
    ask(cluster.server("m1").url, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
    wait_for(lambda: rows_on(cluster, "m2") == {1}, 5.0, every=0.05, what="row 1 on m2 before the cut")

    cluster.partition([("m1", "m2")])
    acknowledged = threading.Event()
    with psycopg.connect(cluster.server("m1").url, autocommit=True) as conn:
        def write() -> None:
            conn.execute("INSERT INTO t VALUES (2)")
            acknowledged.set()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:  # healed before the connection closes: closing it would wait for the blocked insert
            time.sleep(1.5)
            assert rows_on(cluster, "m2") == {1}, "a row written on m1 reached m2 through the cut"
            if cluster.synchronous:
                # the commit waits for the standby, and until it is acknowledged no one else sees it either
                assert not acknowledged.is_set(), "a commit on the sync primary was acknowledged while cut from its standby"
                assert rows_on(cluster, "m1") == {1}
            else:
                assert acknowledged.is_set(), "an asynchronous commit waited for the standby"
                assert rows_on(cluster, "m1") == {1, 2}
        finally:
            cluster.heal_partition()
        assert acknowledged.wait(20.0), "the commit was not acknowledged after the heal"
        writer.join()
    if cluster.synchronous:  # remote_apply: acknowledged means applied on the standby
        assert rows_on(cluster, "m2") == {1, 2}
    else:
        wait_for(lambda: rows_on(cluster, "m2") == {1, 2}, 20.0, every=0.1, what="row 2 on m2 after the heal")


def claim_and_commit(lease_target: PostgresLease, owner: str) -> str:
    """A claim of a fresh node through the cluster's DSN, committed and read back; the node."""
    node = f"n-{uuid.uuid4().hex[:8]}"
    lease_target.add_node(node)
    lease = lease_target.try_claim(node, owner)
    assert isinstance(lease, Lease), lease
    assert lease_target.effect(lease, "payload") is None
    assert lease_target.commit(lease, f"done by {owner}") is None
    state = lease_target.read(node)
    assert (state.status, state.epoch, state.result) == ("SUCCEEDED", 1, f"done by {owner}")
    return node


def dsn_reaches(cluster: PostgresStandbyCluster) -> tuple[str, bool]:
    """The address a fresh connection through the multi-host DSN lands on, and whether it is in recovery."""
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        assert row is not None
        return conn.info.host, bool(row[0])


@pytest.mark.parametrize("cls", KINDS)
def test_failover_promotes_m2_and_the_lease_follows(make_cluster: MakeCluster, cls: type[PostgresStandbyCluster]) -> None:
    cluster = make_cluster(cls)
    address = {name: m.host.address for name, m in cluster.members.items()}
    lease_target = PostgresLease(TargetConfig(url=cluster.url, ttl_ms=5000, timeout_s=5.0))
    try:
        lease_target.setup()
        before = claim_and_commit(lease_target, "w1")
        assert dsn_reaches(cluster) == (address["m1"], False)

        assert cluster.failover() == {"from": "m1", "to": "m2"}
        assert cluster.primary() == "m2"
        assert cluster.server("m1").pid is None  # STONITH: the old primary is down, never a second read-write one
        assert dsn_reaches(cluster) == (address["m2"], False)
        claim_and_commit(lease_target, "w2")  # the same client: its connection to m1 is gone, it reconnects to m2
        if cluster.synchronous:  # an acknowledged commit survived the promotion
            assert lease_target.read(before).status == "SUCCEEDED"

        assert cluster.heal_failover() == {"rebuilt": ["m1"]}
        assert cluster.primary() == "m2"
        assert replicas(cluster, "m2") == expected_link(cluster, "m1")
        assert ask(cluster.server("m1").url, "SELECT pg_is_in_recovery()") == [(True,)]

        # healed, the cluster is primary + standby again: a second failover works the other way
        assert cluster.failover() == {"from": "m2", "to": "m1"}
        assert cluster.primary() == "m1"
        claim_and_commit(lease_target, "w3")
        assert cluster.heal_failover() == {"rebuilt": ["m2"]}
        assert replicas(cluster, "m1") == expected_link(cluster, "m2")
    finally:
        lease_target.close()


def test_faults_that_overlap_a_failover_never_make_two_primaries(make_cluster: MakeCluster) -> None:
    """The new primary killed before the failover heals: m1 is rebuilt only once m2 is back, and a failover meanwhile is skipped."""
    cluster = make_cluster(PostgresStandbyCluster)
    assert cluster.failover() == {"from": "m1", "to": "m2"}
    cluster.kill_member("m2")  # kill-primary, while the failover is not healed
    assert cluster.heal_failover() == {"rebuilt": [], "pending": ["m1"]}
    assert cluster.server("m1").pid is None and cluster.primary() is None
    cluster.start_member("m1")  # a deposed primary does not come back on its own data
    assert cluster.server("m1").pid is None
    cluster.start_member("m2")  # kill-primary's heal: m2 primary again, and now m1 is rebuilt from it
    assert cluster.primary() == "m2"
    assert replicas(cluster, "m2") == expected_link(cluster, "m1")
    cluster.partition([("m1", "m2")])
    assert cluster.failover() == {"from": "m2", "to": "m1"}  # cut from m2, m1 is promoted all the same
    cluster.kill_member("m1")
    assert cluster.failover()["to"] is None  # nothing fit to promote: m2 is deposed
    assert cluster.heal_failover() == {"rebuilt": [], "pending": ["m2"]}
    cluster.start_member("m1")
    assert cluster.heal_failover() == {"rebuilt": [], "pending": ["m2"]}  # still cut
    cluster.heal_partition()
    assert cluster.primary() == "m1"
    assert replicas(cluster, "m1") == expected_link(cluster, "m2")


def test_a_cancelled_wait_for_the_sync_standby_is_indeterminate(make_cluster: MakeCluster) -> None:
    """Postgres reports such a commit as a success with a WARNING: the lease must not report it ok."""
    cluster = make_cluster(PostgresSyncStandbyCluster)
    lease_target = PostgresLease(TargetConfig(url=cluster.url, ttl_ms=60_000, timeout_s=10.0))
    try:
        lease_target.setup()
        node = f"n-{uuid.uuid4().hex[:8]}"
        lease_target.add_node(node)
        lease = lease_target.try_claim(node, "w1")
        assert isinstance(lease, Lease), lease
        cluster.partition([("m1", "m2")])
        outcome: list[object] = []

        def commit() -> None:
            try:
                outcome.append(lease_target.commit(lease, "done"))
            except Indeterminate as e:
                outcome.append(e)

        committer = threading.Thread(target=commit, daemon=True)
        committer.start()

        def cancelled() -> bool:
            rows = ask(cluster.server("m1").url, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
                                                 " WHERE application_name = 'leasecheck' AND wait_event = 'SyncRep'")
            return rows == [(True,)]

        wait_for(cancelled, 5.0, every=0.1, what="the commit waiting for the standby, cancelled")
        committer.join(5.0)
        assert len(outcome) == 1 and isinstance(outcome[0], Indeterminate), outcome
        assert "synchronous" in str(outcome[0])
        # it did commit on the primary: exactly why "ok" would have been wrong to say, and "failed" too
        assert lease_target.read(node).status == "SUCCEEDED"
    finally:
        cluster.heal_partition()
        lease_target.close()
