"""The redis-sentinel cluster kinds against real servers: start, partitions between members, failovers, clients.

Each test starts a cluster of its own (about 1.3 s: three hosts, three
redis-servers, three Sentinels) and asserts on what really happened: a
replica's own ``master_link_status``, a key present on one member and absent
on another, who the Sentinels name as primary, what the reference lease's
client was told. Skipped only where redis-server is not installed; a cluster
that cannot start there (no root for the network namespaces) fails.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecheck.servers.hosts import NETNS_DIR
from leasecheck.servers.redis_sentinel import REDIS_PORT, RedisSentinelCluster, RedisSentinelWaitCluster, client
from leasecheck.targets import registry
from leasecheck.targets.base import Indeterminate, Lease, TargetConfig, Unavailable
from leasecheck.targets.redis_lease import RedisLease
from leasecheck.waiting import wait_for

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (apt-get install -y redis-server)")

TTL_MS = 1000


def _start(cls: type[RedisSentinelCluster], directory: Path) -> Iterator[RedisSentinelCluster]:
    cluster = cls(directory, ttl_ms=TTL_MS)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisSentinelCluster]:
    yield from _start(RedisSentinelCluster, tmp_path / "cluster")


@pytest.fixture
def wait_cluster(tmp_path: Path) -> Iterator[RedisSentinelCluster]:
    yield from _start(RedisSentinelWaitCluster, tmp_path / "cluster")


def _lease(cluster: RedisSentinelCluster) -> RedisLease:
    target = registry.load("redis")(TargetConfig(url=cluster.url, ttl_ms=TTL_MS, timeout_s=2.0))
    assert isinstance(target, RedisLease)
    target.setup()
    return target


def _get(cluster: RedisSentinelCluster, member: str, key: str) -> str | None:
    """``GET key`` on one member itself (a replica answers reads)."""
    c = client(cluster.members[member].host.address, REDIS_PORT)
    try:
        value = c.get(key)
        return None if value is None else str(value)
    finally:
        c.close()


def _follows(cluster: RedisSentinelCluster, replica: str, primary: str) -> bool:
    info = cluster.role(replica) or {}
    return (info.get("role") == "slave" and info.get("master_link_status") == "up"
            and info.get("master_host") == cluster.members[primary].host.address)


def _clock_ahead_s(cluster: RedisSentinelCluster, member: str) -> int:
    c = client(cluster.members[member].host.address, REDIS_PORT)
    try:
        return int(c.time()[0]) - int(time.time())
    finally:
        c.close()


def test_starts_with_m1_primary_both_replicas_attached_and_stops_clean(tmp_path: Path) -> None:
    cluster = RedisSentinelCluster(tmp_path / "cluster", ttl_ms=TTL_MS, skewable=True)
    cluster.start()  # how long it takes: bench/bench_clusters.py
    try:
        assert cluster.primary() == "m1"
        assert (cluster.role("m1") or {}).get("connected_slaves") == "2"
        assert _follows(cluster, "m2", "m1") and _follows(cluster, "m3", "m1")
        assert cluster.url.startswith("redis+sentinel://") and cluster.url.endswith(":26379/leasecheck")
        cluster.skew_member("m2", 60_000)  # the store's clock only (TIME, expiry); its Sentinel keeps the host's
        assert 58 <= _clock_ahead_s(cluster, "m2") <= 61 and abs(_clock_ahead_s(cluster, "m1")) <= 1
        cluster.skew_member("m2", 0)
        assert abs(_clock_ahead_s(cluster, "m2")) <= 1
        pids = [server.pid for member in cluster.members.values() for server in member.servers]
        namespaces = list(cluster.network.namespaces)  # type: ignore[union-attr]
    finally:
        cluster.stop()
    for pid in pids:
        assert pid is not None and not os.path.exists(f"/proc/{pid}"), f"process {pid} outlived stop()"
    assert not any((NETNS_DIR / name).exists() for name in namespaces), "a namespace outlived stop()"


def test_partition_cuts_the_replication_link_it_names_and_heal_restores_it(cluster: RedisSentinelCluster) -> None:
    cluster.partition([("m1", "m2")])
    wait_for(lambda: (cluster.role("m2") or {}).get("master_link_status") == "down", 10.0, every=0.1,
             what="m2's link to m1 down (repl-timeout)")
    assert _follows(cluster, "m3", "m1"), "a link the partition does not name was cut"
    primary = client(cluster.members["m1"].host.address, REDIS_PORT)  # the root namespace still reaches every member
    try:
        primary.set("while-cut", "written")
    finally:
        primary.close()
    wait_for(lambda: _get(cluster, "m3", "while-cut") == "written", 5.0, what="the write on m3")
    time.sleep(0.3)  # m3 has it: give m2 the same chance it would have had through a whole link
    assert _get(cluster, "m2", "while-cut") is None, "the write crossed the cut link"
    cluster.heal_partition()
    wait_for(lambda: _get(cluster, "m2", "while-cut") == "written", 10.0, every=0.1, what="the write on m2 after the heal")
    assert _follows(cluster, "m2", "m1")
    assert cluster.primary() == "m1", "a partition of one replica must not fail the primary over"


def test_failover_promotes_a_replica_and_the_lease_client_follows_it(cluster: RedisSentinelCluster) -> None:
    lease = _lease(cluster)
    try:
        lease.add_node("before")
        held = lease.try_claim("before", "w1")
        assert isinstance(held, Lease) and lease.commit(held, "done") is None
        wait_for(lambda: _follows(cluster, "m2", "m1") and _follows(cluster, "m3", "m1"), 5.0, what="replicas in sync")

        moved = cluster.failover()
        assert moved["from"] == "m1" and moved["to"] in ("m2", "m3"), moved
        new = moved["to"]
        assert cluster.primary() == new
        assert (cluster.role(new) or {}).get("role") == "master"

        # redis-py keeps its connection to the old primary, still a primary until the Sentinels
        # demote it (about 10 s): a claim acknowledged there now is lost when it resyncs
        lease.add_node("in-the-window")
        assert isinstance(lease.try_claim("in-the-window", "w1"), Lease)

        wait_for(lambda: _follows(cluster, "m1", new), 25.0, every=0.2, what="the old primary a replica of the new one")
        other = "m3" if new == "m2" else "m2"
        wait_for(lambda: _follows(cluster, other, new), 10.0, every=0.1, what="the other replica following the new primary")

        def claims_on_new_primary() -> bool:
            node = f"after-{time.monotonic_ns()}"
            try:
                lease.add_node(node)
                if not isinstance(lease.try_claim(node, "w1"), Lease):
                    return False
            except (Unavailable, Indeterminate):
                return False
            return _get(cluster, new, f"lc:{{{node}}}:epoch") == "1"

        wait_for(claims_on_new_primary, 10.0, every=0.1, what="a claim through Sentinel landing on the new primary")
        assert lease.read("before").status == "SUCCEEDED", "a commit replicated before the failover survives it"
        assert lease.read("in-the-window").epoch == 0, "the claim acknowledged by the demoted primary was not lost"
    finally:
        lease.close()


def test_a_killed_primary_is_replaced_by_the_sentinels_within_a_few_ttl(cluster: RedisSentinelCluster) -> None:
    old = cluster.primary()
    assert old == "m1"
    started = time.monotonic()
    cluster.kill_member(old)

    def replaced() -> str | None:
        now = cluster.primary()
        return now if now not in (None, old) else None

    new = wait_for(replaced, 8 * TTL_MS / 1000, every=0.05, what="the Sentinels failing over on their own")
    took = time.monotonic() - started
    assert (cluster.role(new) or {}).get("role") == "master"
    other = next(name for name in cluster.members if name not in (old, new))
    wait_for(lambda: _follows(cluster, other, new), 10.0, every=0.1, what="the last replica following the new primary")
    print(f"failover after kill: {took:.2f} s")


def test_wait_cluster_never_acknowledges_a_write_no_replica_received(wait_cluster: RedisSentinelCluster) -> None:
    assert wait_cluster.url.endswith("/leasecheck?wait=1")
    lease = _lease(wait_cluster)
    try:
        lease.add_node("whole")
        assert isinstance(lease.try_claim("whole", "w1"), Lease), "a write WAIT saw replicated is acknowledged"
        wait_cluster.partition([("m1", "m2"), ("m1", "m3")])
        outcomes: list[str] = []
        deadline = time.monotonic() + 8.0
        while time.monotonic() < deadline and "Unavailable" not in outcomes:
            node = f"cut-{len(outcomes)}"
            with pytest.raises((Unavailable, Indeterminate)) as raised:
                lease.add_node(node)
                lease.try_claim(node, "w1")
            outcomes.append(type(raised.value).__name__)
            if isinstance(raised.value, Unavailable):
                assert "NOREPLICAS" in str(raised.value)
        assert "Unavailable" in outcomes, f"min-replicas-to-write never refused: {outcomes}"
        print("outcomes with the replicas cut:", outcomes)
    finally:
        lease.close()
