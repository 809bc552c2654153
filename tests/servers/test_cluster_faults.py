"""The member faults on a real cluster, and what the harness owes the machine: hosts that go on every exit.

etcd's cluster is the cheapest to start (about a second), so it stands for every kind
here: what is held is the cluster base's and the faults', not etcd's. Overlapping
partitions heal one at a time (a heal mends only the links its own fault cut); a
failover is not tried while a member is down; and a harness killed with SIGKILL
leaves no network namespace behind (its hosts' guard deletes them), nor does one
that exits normally.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from leasecheck.hosts import firewall
from leasecheck.nemesis.catalogue import FAULTS
from leasecheck.nemesis.context import FaultContext
from leasecheck.servers.etcd_cluster import EtcdCluster
from leasecheck.servers.hosts import run_namespaces
from leasecheck.waiting import wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cluster members run in network namespaces: root only")


@pytest.fixture
def cluster(tmp_path: Path) -> EtcdCluster:
    c = EtcdCluster(tmp_path / "etcd-cluster")
    c.start()
    yield c
    c.stop()


def dropped(cluster: EtcdCluster) -> set[tuple[str, str]]:
    """The links the members' own firewalls drop now, read back from each host's rules tagged with the network."""
    network = cluster.network
    assert network is not None
    by_address = {host.address: host.name for host in network.hosts}
    out = set()
    for host in network.hosts:
        for rule in firewall.tagged(network.shell(host.name), network.run_id):
            peer = by_address[rule[rule.index("-s") + 1].removesuffix("/32")]
            out.add((min(host.name, peer), max(host.name, peer)))
    return out


def test_overlapping_partitions_heal_one_at_a_time(cluster: EtcdCluster) -> None:
    """Through the host interface's firewall (the code that cuts a team's hosts): the rules on the members' hosts are
    the links cut, tagged with the run, and every heal leaves a rule of someone else's in place."""
    ctx = FaultContext(ttl_ms=1000, cluster=cluster)
    assert cluster.network is not None
    m1 = cluster.network.shell("m1")
    theirs = ["iptables", "-w", "10", "-I", "INPUT", "-s", "192.0.2.7/32", "-j", "DROP"]  # a rule of the team's own
    assert m1.run(theirs).ok
    bridge = FAULTS["partition-bridge"].make(ctx, random.Random(1))
    isolate = FAULTS["isolate-primary"].make(ctx, random.Random(1))
    assert bridge is not None and isolate is not None
    bridge.start()
    isolate.start()
    both = set(map(tuple, bridge.links)) | set(map(tuple, isolate.links))
    assert set(cluster.network.links_cut()) == both == dropped(cluster)
    bridge.heal()
    assert set(cluster.network.links_cut()) == set(map(tuple, isolate.links)) == dropped(cluster), \
        "a heal mended another fault's cuts"
    isolate.heal()
    assert cluster.network.links_cut() == [] and dropped(cluster) == set()
    assert "-A INPUT -s 192.0.2.7/32 -j DROP" in m1.run(["iptables", "-S", "INPUT"]).out


def test_no_failover_and_no_second_primary_lost_while_a_member_is_down(cluster: EtcdCluster) -> None:
    ctx = FaultContext(ttl_ms=1000, cluster=cluster)
    kill = FAULTS["kill-primary"].make(ctx, random.Random(1))
    assert kill is not None
    value = kill.start()
    assert cluster.down_members() == value["victims"]
    assert FAULTS["failover"].make(ctx, random.Random(1)) is None
    assert FAULTS["kill-primary"].make(ctx, random.Random(1)) is None  # a second loss would take the majority
    assert FAULTS["pause-primary"].make(ctx, random.Random(1)) is None
    kill.heal()
    assert cluster.down_members() == []
    wait_for(lambda: cluster.primary() is not None, 10, what="a leader after the killed member came back")
    assert FAULTS["failover"].make(ctx, random.Random(1)) is not None


HARNESS = """
import sys, time
from pathlib import Path
from leasecheck.servers.etcd_cluster import EtcdCluster
c = EtcdCluster(Path(sys.argv[1])).start()
print(" ".join(m.host.netns for m in c.members.values()), flush=True)
time.sleep(600)
"""


def test_a_killed_harness_leaves_no_host_behind(tmp_path: Path) -> None:
    harness = subprocess.Popen([sys.executable, "-c", HARNESS, str(tmp_path / "c")], stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    mine = harness.stdout.readline().split()
    assert len(mine) == 3 and set(mine) <= set(run_namespaces())
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    wait_for(lambda: not set(mine) & set(run_namespaces()), 15, what="the guard deleting the killed harness's hosts")
