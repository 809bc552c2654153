"""A cluster's members on power-loss layers (issue 36): ``power-loss-member`` and ``power-loss-all`` on real members.

Each member's servers run on a layer of their own (a Redis member's redis-server and its Sentinel share the member's
folder, so one layer: one machine's disk), mounted when the cluster starts, synced once it came together (a cluster
set up a while ago, not one whose files were written a moment before) and taken off when it stops; a killed harness
leaves no mount behind (each layer's guard). The catalogue's factories cut the power of one member (the primary half
the time, drawn from the seed) or of every member at once, record what each member's layers dropped, refuse a second
cut while a member is down or the cluster has not yet served two ttls since, and bring the members back on what survived; the cluster answers again, with every write
its members fsynced before acknowledging it. A run that cannot have the layers is refused in one line.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hostlab import TWO_MEMBERS
from paths import REPO

from leasecheck.machine.mounts import powerfs_mounts
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.power import SETTLE_TTLS, make_power_loss_all, make_power_loss_member
from leasecheck.servers.redis_sentinel import RedisSentinelCluster
from leasecheck.waiting import poll, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                                reason="members in network namespaces on FUSE layers: root")


def mounts_under(folder: Path) -> list[str]:
    return [target for _, target in powerfs_mounts() if target.startswith(os.path.realpath(folder))]


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[RedisSentinelCluster]:
    cluster = RedisSentinelCluster(tmp_path / "cluster", ttl_ms=1000).on_powerfs()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.remove_state()
    assert not mounts_under(tmp_path), "a member's layer outlived its cluster"
    assert not list((tmp_path / "cluster").glob("*.disk")), "a member's disk was left behind"


def primary_client(cluster: RedisSentinelCluster) -> redis.Redis:
    primary = cluster.primary()
    assert primary is not None
    return redis.Redis(cluster.members[primary].host.address, 6379, socket_timeout=5)


def test_one_member_then_every_member_loses_its_power_and_comes_back_with_what_it_fsynced(
        sentinel: RedisSentinelCluster) -> None:
    assert len(mounts_under(sentinel.directory)) == 3  # one layer per member, its Sentinel on it too
    assert all(len(layers) == 1 for layers in sentinel.layers.values())
    ctx = FaultContext(ttl_ms=250, cluster=sentinel)  # settles 2 ttl after a power cut: half a second
    client = primary_client(sentinel)
    for i in range(200):
        assert client.set(f"k{i}", i)
    client.close()
    primary = sentinel.primary()
    one = make_power_loss_member(ctx, random.Random(1))  # its first draw is under 0.5: the primary
    assert one is not None and one.members == [primary]
    value = one.start()
    assert value["victims"] == [primary] and value["primary"] == primary
    assert set(value["dropped"]) == {primary} and {"bytes", "files", "entries"} <= set(value["dropped"][primary])
    assert sentinel.down_members() == [primary]
    assert make_power_loss_member(ctx, random.Random(2)) is None and make_power_loss_all(ctx, random.Random(2)) is None
    healed = one.heal()
    assert healed is not None and healed["victims"] == [primary] and sentinel.down_members() == []
    assert one.heal() is None  # healed once
    assert make_power_loss_all(ctx, random.Random(3)) is None  # not again until it served for SETTLE_TTLS
    assert poll(sentinel.ready, 30, every=0.1)
    time.sleep(ctx.ttl_s(SETTLE_TTLS))

    every = make_power_loss_all(ctx, random.Random(3))
    assert every is not None and every.members == ["m1", "m2", "m3"]
    value = every.start()
    assert value["victims"] == ["m1", "m2", "m3"] and set(value["dropped"]) == {"m1", "m2", "m3"}
    assert sentinel.down_members() == ["m1", "m2", "m3"] and sentinel.primary() is None
    every.heal()
    assert poll(sentinel.ready, 30, every=0.1), "the cluster did not come together after the outage"
    client = primary_client(sentinel)
    assert [client.get(f"k{i}") for i in range(200)] == [str(i).encode() for i in range(200)]  # appendfsync always
    client.close()


def test_a_cluster_off_the_layers_has_no_power_to_cut(tmp_path: Path) -> None:
    ctx = FaultContext(ttl_ms=1000, cluster=RedisSentinelCluster(tmp_path / "cluster"))
    assert make_power_loss_member(ctx, random.Random(1)) is None and make_power_loss_all(ctx, random.Random(1)) is None


def test_a_killed_harness_leaves_no_member_mount(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import time
        from leasecheck.servers.redis_sentinel import RedisSentinelCluster
        cluster = RedisSentinelCluster({str(tmp_path / 'cluster')!r}).on_powerfs().start()
        print("up", flush=True)
        time.sleep(120)
    """)
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert harness.stdout is not None and harness.stdout.readline().strip() == "up"
        assert len(mounts_under(tmp_path)) == 3
        harness.kill()
        harness.wait()
        wait_for(lambda: not mounts_under(tmp_path), 20, what="the killed harness's member layers to go")
    finally:
        harness.kill()
        harness.wait()


@pytest.mark.parametrize("args, said", [
    (["--target", "redis", "--nemesis", "power-loss-member"], "power-loss-member acts on the members of a cluster: add --cluster"),
    (["--target", "redis", "--cluster", "redis-sentinel", "--nemesis", "power-loss"], "power-loss acts on one store server"),
    (["--target", "redis", "--hosts", "{hosts}", "--url", "redis://10.0.0.11", "--nemesis", "power-loss-all"],
     "power-loss-all needs the store's server on the power-loss layer (powerfs): leasecheck puts there"),
], ids=["no-cluster", "one-server-fault-on-a-cluster", "a-deployment-of-yours"])
def test_a_member_power_loss_run_that_cannot_have_the_layers_is_refused_in_one_line(
        tmp_path: Path, args: list[str], said: str) -> None:
    hosts = tmp_path / "staging.toml"
    hosts.write_text(TWO_MEMBERS)
    done = subprocess.run(["python3", "-m", "leasecheck", "run", "--store", str(tmp_path / "s"),
                           *(a.format(hosts=hosts) for a in args)], capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3 and len(lines) == 1 and said in lines[0], done.stderr
    assert not (tmp_path / "s").exists()
