"""The etcd-cluster and zookeeper-ensemble kinds: start, leader, isolation of the leader, failover, adapters.

Real servers in real namespaces (root only). What each test holds: the cluster
starts with exactly one leader (how long it takes is
``bench/bench_clusters.py``'s figure, not a test's); cutting the leader off
from the others makes *them* elect a leader among themselves while the cut-off
member cannot commit (etcd: a put through its client URL times out and never
shows on the majority side; ZooKeeper: the server stops serving); a heal brings
it back into the cluster; ``failover()`` really changes who leads; and the
python-etcd3 / kazoo adapters, given the multi-host URL, claim and commit, and
go on doing so after a failover.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from leasecheck.servers.etcd_cluster import EtcdCluster, gateway
from leasecheck.servers.hosts import run_namespaces
from leasecheck.servers.zookeeper_ensemble import ZooKeeperEnsemble, srvr
from leasecheck.targets.base import Lease, NodeState, TargetConfig
from leasecheck.targets.registry import TargetSpec
from leasecheck.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cluster members run in network namespaces: root only")

def started(cluster: EtcdCluster | ZooKeeperEnsemble) -> None:
    """Start ``cluster`` (its start-up time is measured by ``bench/bench_clusters.py``, beside one server's)."""
    cluster.start()


def assert_stopped(cluster: EtcdCluster | ZooKeeperEnsemble) -> None:
    namespaces = [m.host.netns for m in cluster.members.values()]
    cluster.stop()
    assert not set(namespaces) & set(run_namespaces())
    assert all(server.pid is None for m in cluster.members.values() for server in m.servers)


def setup(spec: TargetSpec) -> None:
    target = spec.make()
    try:
        target.setup()
    finally:
        target.close()


def claim_and_commit(spec: TargetSpec, owner: str) -> NodeState:
    """A claim of a fresh node through the cluster's URL, committed; the record read back."""
    target = spec.make()
    try:
        node = f"n-{uuid.uuid4().hex[:8]}"
        target.add_node(node)
        lease = wait_for(lambda: target.try_claim(node, owner), 10.0, every=0.1, what=f"{owner}'s claim")
        assert isinstance(lease, Lease), lease
        assert target.commit(lease, f"done by {owner}") is None
        return target.read(node)
    finally:
        target.close()


# --- etcd -------------------------------------------------------------------------------------


def etcd_put(cluster: EtcdCluster, member: str, key: str, timeout_s: float) -> bool:
    """A put through one member's client URL (the v3 JSON gateway): did it answer in time?"""
    import base64

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    answer = gateway(cluster.server(member).client_url, "/v3/kv/put", {"key": b64(key), "value": b64("v")}, timeout_s)
    return bool(answer and "header" in answer)


def etcd_has(cluster: EtcdCluster, member: str, key: str) -> bool:
    import base64

    answer = gateway(cluster.server(member).client_url, "/v3/kv/range", {"key": base64.b64encode(key.encode()).decode()}, 2.0)
    assert answer is not None, f"{member} did not answer a read"
    return int(answer.get("count", 0)) > 0


def test_etcd_cluster_elects_around_an_isolated_leader_and_fails_over(tmp_path: Path) -> None:
    cluster = EtcdCluster(tmp_path / "etcd")
    try:
        started(cluster)
        assert cluster.url == "etcd://" + ",".join(f"{m.host.address}:2379" for m in cluster.members.values())
        leader = cluster.primary()
        assert leader in cluster.members
        others = [name for name in cluster.members if name != leader]

        cluster.partition([(leader, other) for other in others])
        assert cluster.network is not None and cluster.network.links_cut() == sorted(
            tuple(sorted((leader, o))) for o in others)
        new = wait_for(lambda: cluster.primary() not in (None, leader) and cluster.primary(), 5.0, every=0.05,
                       what="a leader among the majority")
        assert new in others
        assert not etcd_put(cluster, leader, "isolated", timeout_s=1.5), "the cut-off member committed a write"
        assert etcd_put(cluster, new, "majority", timeout_s=2.0)
        assert not etcd_has(cluster, new, "isolated")

        cluster.heal_partition()
        wait_for(lambda: etcd_has(cluster, leader, "majority") if etcd_put(cluster, leader, "healed", 1.0) else None,
                 5.0, every=0.1, what=f"{leader} back in the cluster")
        # back as a follower: etcd 3.4 runs without pre-vote, so the term the cut-off member raised may force
        # one more election at the heal, but whoever leads, all three agree on it
        now = wait_for(cluster.primary, 5.0, every=0.05, what="a leader after the heal")
        statuses = cluster._statuses()
        assert len(statuses) == 3 and len({s["leader"] for s in statuses.values()}) == 1

        moved = cluster.failover()
        assert moved["from"] == now and moved["to"] not in (None, now)
        assert cluster.primary() == moved["to"]
    finally:
        assert_stopped(cluster)


def test_etcd3_adapters_follow_the_cluster_across_a_failover(tmp_path: Path) -> None:
    cluster = EtcdCluster(tmp_path / "etcd")
    try:
        started(cluster)
        specs = [TargetSpec(name, TargetConfig(url=cluster.url, ttl_ms=1000, timeout_s=3.0))
                 for name in ("etcd3-lock", "etcd3-lock-revision")]
        for spec in specs:
            setup(spec)
            assert claim_and_commit(spec, "w1").status == "SUCCEEDED"
        moved = cluster.failover()
        assert moved["to"] != moved["from"]
        cluster.kill_member(moved["to"])  # the new leader dies too: the client must use the members left
        wait_for(lambda: cluster.primary() not in (None, moved["to"]), 5.0, every=0.05, what="a leader of the two left")
        for spec in specs:
            state = claim_and_commit(spec, "w2")
            assert (state.status, state.result) == ("SUCCEEDED", "done by w2")
        cluster.start_member(moved["to"])
    finally:
        assert_stopped(cluster)


# --- ZooKeeper --------------------------------------------------------------------------------


def test_zookeeper_ensemble_elects_around_an_isolated_leader_and_fails_over(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path / "zk")
    try:
        started(ensemble)
        assert ensemble.url == "zookeeper://" + ",".join(f"{m.host.address}:2181" for m in ensemble.members.values())
        modes = ensemble.modes()
        assert sorted(str(mode) for mode in modes.values()) == ["follower", "follower", "leader"]
        leader = ensemble.primary()
        assert leader is not None and modes[leader] == "leader"
        others = [name for name in ensemble.members if name != leader]

        ensemble.partition([(leader, other) for other in others])
        new = wait_for(lambda: ensemble.primary() not in (None, leader) and ensemble.primary(), 5.0, every=0.05,
                       what="a leader among the majority")
        assert new in others
        isolated = ensemble.server(leader)
        wait_for(lambda: isolated.mode() is None, 5.0, every=0.05, what=f"{leader} to stop serving")
        assert "not currently serving" in srvr(isolated.host.address)

        ensemble.heal_partition()
        wait_for(ensemble._ready, 10.0, every=0.1, what=f"{leader} back as a follower")
        assert ensemble.primary() == new and isolated.mode() == "follower"

        moved = ensemble.failover()
        assert moved["from"] == new and moved["to"] not in (None, new)
        assert ensemble.primary() == moved["to"] and ensemble.server(new).mode() == "follower"
    finally:
        assert_stopped(ensemble)


def test_kazoo_adapters_follow_the_ensemble_across_a_failover(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path / "zk")
    try:
        started(ensemble)
        specs = [TargetSpec(name, TargetConfig(url=ensemble.url, ttl_ms=1000, timeout_s=3.0))
                 for name in ("kazoo-lock", "kazoo-lock-zxid")]
        for spec in specs:
            setup(spec)
            assert claim_and_commit(spec, "w1").status == "SUCCEEDED"
        moved = ensemble.failover()
        assert moved["to"] != moved["from"]
        ensemble.kill_member(moved["to"])  # the new leader dies too: the two left elect again
        wait_for(lambda: ensemble.primary() not in (None, moved["to"]), 5.0, every=0.05, what="a leader of the two left")
        for spec in specs:
            state = claim_and_commit(spec, "w2")
            assert (state.status, state.result) == ("SUCCEEDED", "done by w2")
        ensemble.start_member(moved["to"])
    finally:
        assert_stopped(ensemble)


def test_a_records_read_on_a_follower_cut_off_from_its_leader_is_never_stale(tmp_path: Path) -> None:
    """ZooKeeper serves a read from the member a client is on, and a follower cut off from its leader goes on serving
    until it notices (``syncLimit`` ticks): without a ``sync`` first, the history's read of a commit another client had
    acknowledged comes back stale, and the checker would prove a ``lost-commit`` the lock never made. The records' read
    is fresh or fails: it never shows what the ensemble had already replaced."""
    from leasecheck.targets.base import Indeterminate, Unavailable
    from leasecheck.targets.locks.zk_records import ZkConnection, ZkRecords

    ensemble = ZooKeeperEnsemble(tmp_path / "zk")
    try:
        started(ensemble)
        leader = ensemble.primary()
        assert leader is not None
        follower = next(name for name in ensemble.members if name != leader)

        def records(name: str) -> ZkRecords:
            url = f"zookeeper://{ensemble.server(name).host.address}:2181"  # this member only
            return ZkRecords(ZkConnection.of(TargetConfig(url=url, ttl_ms=1000, timeout_s=3.0)))

        on_leader, on_follower = records(leader), records(follower)
        try:
            on_leader.setup()
            on_leader.add_nodes(["n"])
            assert on_leader.put("n", {"status": "RUNNING", "token": "t"})
            wait_for(lambda: (got := on_follower.get("n")) is not None and got.status == "RUNNING", 5.0, every=0.05,
                     what="the follower's first read")
            ensemble.partition([(follower, other) for other in ensemble.members if other != follower])
            assert on_leader.put("n", {"status": "SUCCEEDED", "result": "r"})  # acknowledged by the two others
            try:
                seen = on_follower.get("n")
            except (Indeterminate, Unavailable):
                seen = None  # the follower could not reach the leader: no answer, which is no stale answer
            assert seen is None or seen.status == "SUCCEEDED", seen
        finally:
            on_leader.close()
            on_follower.close()
    finally:
        assert_stopped(ensemble)


class _Watched:
    """A client whose failed ``setup()`` is an event the test waits on (then it lets the ensemble settle)."""

    def __init__(self, target, failed) -> None:
        self.target, self.failed = target, failed

    def setup(self) -> None:
        try:
            self.target.setup()
        except Exception:
            self.failed.set()
            raise

    def close(self) -> None:
        self.target.close()


def test_the_first_client_waits_for_an_ensemble_that_lost_its_quorum(tmp_path: Path) -> None:
    """A run's producer set up on an ensemble that drops it (ci: two CPU-bound jobs broke the quorum right after it
    came together) waits for the ensemble's own readiness and tries again; a store the user gave gets one try."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from leasecheck.run.environment import Environment
    from leasecheck.targets.base import Unavailable

    ensemble = ZooKeeperEnsemble(tmp_path / "zk")
    try:
        started(ensemble)
        spec = TargetSpec("kazoo-lock", TargetConfig(url=ensemble.url, ttl_ms=1000, timeout_s=1.0))
        leader = ensemble.primary()
        followers = [name for name in ensemble.members if name != leader]
        for name in followers:
            ensemble.pause_member(name)
        wait_for(lambda: ensemble.server(leader).mode() is None, 5.0, every=0.05, what=f"{leader} to stop serving")
        failed, made = threading.Event(), []

        def make():
            made.append(_Watched(spec.make(), failed))
            return made[-1]

        with ThreadPoolExecutor(1) as pool:
            client = pool.submit(Environment(ensemble.url, cluster=ensemble).set_up, make)
            assert failed.wait(15.0), "the first setup did not fail on an ensemble without a quorum"
            for name in followers:
                ensemble.resume_member(name)
            producer = client.result(timeout=30.0)
        assert len(made) >= 2 and producer is made[-1]
        producer.close()
        assert claim_and_commit(spec, "w1").status == "SUCCEEDED"

        ensemble.pause_member(followers[0])
        ensemble.pause_member(followers[1])
        wait_for(lambda: ensemble.server(leader).mode() is None, 5.0, every=0.05, what=f"{leader} to stop serving")
        made.clear()
        with pytest.raises(Unavailable):  # the same ensemble given as --url: the user's store, one try
            Environment(ensemble.url).set_up(make)
        assert len(made) == 1
    finally:
        ensemble.heal_all()
        assert_stopped(ensemble)
