"""Every replicated store leasecheck can start, one row each: what ``--cluster`` accepts.

A row names the cluster kind, the store kind its clients speak (a target's
``store`` must match), whether one member's clock can be skewed, and the class
that starts it, imported only when a run uses it (each needs its store's client,
an optional extra). ``leasecheck clusters`` and ``--cluster`` validation read the
rows without importing any of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leasecheck.servers.cluster import Cluster


@dataclass(frozen=True)
class ClusterKind:
    """One row: a kind of cluster and where its class lives."""

    name: str
    store: str
    description: str
    module: str
    cls: str
    #: can ``clock-member`` skew one member's clock (its servers run under libfaketime)?
    skewable: bool = False

    def load(self) -> type[Cluster]:
        found: type[Cluster] = getattr(importlib.import_module(self.module), self.cls)
        return found


CLUSTER_KINDS: tuple[ClusterKind, ...] = (
    ClusterKind("redis-sentinel", "redis",
                "a Redis primary, two replicas (asynchronous replication) and three Sentinels, one host each",
                "leasecheck.servers.redis_sentinel", "RedisSentinelCluster", skewable=True),
    ClusterKind("redis-sentinel-wait", "redis",
                "redis-sentinel with min-replicas-to-write 1, and clients that WAIT for a replica after every write",
                "leasecheck.servers.redis_sentinel", "RedisSentinelWaitCluster", skewable=True),
    ClusterKind("postgres-standby", "postgres",
                "a Postgres primary and an asynchronous streaming standby; clients by a multi-host DSN (read-write)",
                "leasecheck.servers.postgres_standby", "PostgresStandbyCluster", skewable=True),
    ClusterKind("postgres-standby-sync", "postgres",
                "postgres-standby with the standby synchronous (synchronous_commit = remote_apply)",
                "leasecheck.servers.postgres_standby", "PostgresSyncStandbyCluster", skewable=True),
    ClusterKind("etcd-cluster", "etcd", "three etcd members (raft); clients given every member's address",
                "leasecheck.servers.etcd_cluster", "EtcdCluster"),
    ClusterKind("zookeeper-ensemble", "zookeeper", "three ZooKeeper servers (an ensemble); clients given every server's address",
                "leasecheck.servers.zookeeper_ensemble", "ZooKeeperEnsemble"),
)

#: the rows by name
CLUSTERS: dict[str, ClusterKind] = {kind.name: kind for kind in CLUSTER_KINDS}
