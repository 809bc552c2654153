"""Who is primary and how the store fails over, asked the store's own way on its members' hosts, against real clusters.

The clusters ``--cluster`` starts (Redis with Sentinel, a Postgres primary and
its standby, a ZooKeeper ensemble) are a deployment too: members on hosts of
their own. Described by a deployment file whose hosts are their namespaces
(``netns://``), a :class:`~leasecheck.hosts.control.DeployedCluster` must name
the same primary the cluster names by its own client library, and its failover
must move the primary where the cluster then says it is: Sentinel's FAILOVER,
Postgres' STONITH (the old primary's postmaster killed, found by its
postmaster.pid) then ``pg_promote()``. ZooKeeper has no failover command:
refused, saying so.
"""

from __future__ import annotations

import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts.control import DeployedCluster
from leasecheck.hosts.deployment import parse_deployment
from leasecheck.servers.cluster import Cluster
from leasecheck.waiting import poll


@pytest.fixture
def started() -> Iterator[Callable[[type[Cluster]], Cluster]]:
    made: list[Cluster] = []

    def start(cls: type[Cluster]) -> Cluster:
        # under /tmp, not pytest's folder: a Postgres member runs as a user that cannot enter that
        cluster = cls(Path(tempfile.mkdtemp(prefix="leasecheck-test-hosts-")), ttl_ms=1000)
        made.append(cluster)
        return cluster.start()

    yield start
    for cluster in made:
        cluster.stop()
        cluster.cleanup()


def dead(pid: int) -> bool:
    """Gone, or a zombie (SIGKILLed, not yet reaped by the cluster that started it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def deployed(cluster: Cluster, store: str, table: str, process: Callable[[str], str]) -> DeployedCluster:
    """The running ``cluster`` described by a deployment file over its members' namespaces."""
    members = "".join(textwrap.dedent(f"""
        [[member]]
        name = "{name}"
        host = "netns://{member.host.netns}"
        address = "{member.host.address}"
        process = {process(name)}
        """) for name, member in cluster.members.items())
    text = f'store = "{store}"\n{textwrap.dedent(table)}{members}'
    return DeployedCluster.open(parse_deployment(text, cluster.directory / "deployment.toml"), "stores-test")


def test_redis_primary_and_failover_through_sentinel(started: Callable[[type[Cluster]], Cluster]) -> None:
    from leasecheck.servers.redis_sentinel import SERVICE, RedisSentinelCluster

    cluster = started(RedisSentinelCluster)
    hosts = deployed(cluster, "redis", f"""
        [redis]
        client = "redis-cli -h {{address}} -p 6379"
        sentinel = "redis-cli -h {{address}} -p 26379"
        master-name = "{SERVICE}"
        """, lambda name: f'{{ pattern = "redis-server {cluster.members[name].host.address}:6379" }}')
    before = cluster.primary()
    assert before is not None and hosts.primary() == before
    moved = hosts.failover()
    assert moved["from"] == before and moved["to"] not in (None, before), moved
    assert poll(lambda: cluster.primary() == moved["to"], 30.0, every=0.2), (cluster.primary(), moved)
    assert hosts.primary() == moved["to"]


def test_redis_without_sentinel_asks_every_member_its_role(started: Callable[[type[Cluster]], Cluster]) -> None:
    from leasecheck.servers.redis_sentinel import RedisSentinelCluster

    cluster = started(RedisSentinelCluster)
    hosts = deployed(cluster, "redis", '[redis]\nclient = "redis-cli -h {address} -p 6379"\n',
                     lambda name: f'{{ pattern = "redis-server {cluster.members[name].host.address}:6379" }}')
    assert hosts.primary() == cluster.primary() is not None


def test_postgres_primary_and_failover_kill_then_promote(started: Callable[[type[Cluster]], Cluster]) -> None:
    from leasecheck.servers.postgres_standby import PostgresStandbyCluster

    cluster = started(PostgresStandbyCluster)
    hosts = deployed(cluster, "postgres", """
        [postgres]
        client = "psql -h {address} -p 5432 -U postgres -d postgres"
        """, lambda name: f'{{ pidfile = "{cluster.members[name].server.data_dir}/postmaster.pid" }}')  # type: ignore[attr-defined]
    assert hosts.primary() == cluster.primary() == "m1"
    old_pid = cluster.members["m1"].server.pid
    moved = hosts.failover()
    assert moved == {"from": "m1", "to": "m2"}, moved
    assert old_pid is not None and dead(old_pid), "STONITH: the old primary was killed before the standby was promoted"
    assert hosts.down_members() == ["m1"] and hosts.heal_failover() == {"deposed": ["m1"]}
    assert cluster.primary() == "m2", "the promoted standby is the one writable member"
    assert hosts.primary() == "m2"


def test_zookeeper_leader_is_asked_by_srvr_and_failover_is_refused(started: Callable[[type[Cluster]], Cluster]) -> None:
    from leasecheck.servers.zookeeper_ensemble import ZooKeeperEnsemble

    cluster = started(ZooKeeperEnsemble)
    hosts = deployed(cluster, "zookeeper", '[zookeeper]\nhost = "{address}"\n', lambda name: '{ pattern = "zookeeper" }')
    assert hosts.primary() == cluster.primary() is not None
    with pytest.raises(EnvironmentFailure, match="zookeeper: no built-in failover"):
        hosts.failover()
