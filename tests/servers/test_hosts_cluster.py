"""The member faults done on hosts leasecheck did not start, reached over ssh only, with their real effects.

The lab (tests/support/hostlab.py): two members in network namespaces of their own,
each with an sshd on its address, a redis-server per member started *through
ssh* by the deployment's start command (m2 a replica of m1), m1 with a
companion process and a faketime file. The harness acts only through a
:class:`~leasecheck.hosts.control.DeployedCluster` built from the deployment
file; every assertion reads the effect from outside: a TCP connection from one
namespace to the other opens or not, ``/proc/PID/status`` says ``T``, a pid is
gone and a new one answers PING, the faketime file holds the offset, an
iptables rule another run or the team put there is still there after the heal.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostlab import Lab, member_lab
from paths import REPO

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts.checks import check
from leasecheck.hosts.control import DeployedCluster
from leasecheck.hosts.deployment import load_deployment
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.faults import make_kill_store, make_pause_store
from leasecheck.nemesis.members import make_isolate_primary, make_pause_primary
from leasecheck.waiting import poll, wait_for


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with member_lab(tmp_path_factory.mktemp("hostlab")) as the_lab:
        cluster = DeployedCluster.open(load_deployment(the_lab.deployment), "setup")
        try:
            for name in ("m1", "m2"):
                cluster.start_member(name)
        finally:
            cluster.close()
        yield the_lab


@pytest.fixture
def cluster(lab: Lab) -> Iterator[DeployedCluster]:
    """This test's run (its own run id) on the lab; healed and its members up again after the test."""
    the_cluster = DeployedCluster.open(load_deployment(lab.deployment), f"run-{os.getpid()}")
    yield the_cluster
    the_cluster.heal_all()
    for name in the_cluster.down_members():
        the_cluster.start_member(name)
    the_cluster.close()


def state(pid: int) -> str:
    """A process's state letter from /proc (``T``: stopped), or ``gone``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "gone"
    return status.split("State:")[1].split()[0]


def redis_ping(lab: Lab, name: str) -> bool:
    """Does the member's redis answer PING within a second (asked from its own namespace)?"""
    probe = (f"import socket; s = socket.create_connection(({lab.address(name)!r}, 6379), timeout=1); "
             f"s.sendall(b'PING\\r\\n'); print(s.recv(64).decode())")
    return lab.in_netns(name, ["python3", "-c", probe]).stdout.strip() == "+PONG"


def iptables(lab: Lab, name: str, *args: str) -> str:
    done = lab.in_netns(name, ["iptables", "-w", "10", *args])
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_members_are_up_and_the_primary_is_asked_of_redis(lab: Lab, cluster: DeployedCluster) -> None:
    assert redis_ping(lab, "m1") and redis_ping(lab, "m2")
    assert cluster.primary() == "m1", "m1 says role:master, m2 role:slave (INFO replication on each host)"
    assert cluster.member_names() == ["m1", "m2"] and cluster.kind == "deployed-redis"


def test_a_partition_drops_the_traffic_between_members_and_its_heal_only_its_own_rules(
        lab: Lab, cluster: DeployedCluster) -> None:
    assert lab.connects("m2", "m1") and lab.connects("m1", "m2")
    iptables(lab, "m1", "-A", "INPUT", "-s", "192.0.2.7/32", "-j", "DROP")  # the team's own rule, untagged
    iptables(lab, "m1", "-A", "INPUT", "-s", "192.0.2.8/32", "-m", "comment", "--comment", "leasecheck:another-run",
             "-j", "DROP")  # another run's, at the same time
    try:
        cluster.partition([("m1", "m2")])
        assert not lab.connects("m2", "m1") and not lab.connects("m1", "m2"), "the link is cut both ways"
        assert f"leasecheck:{cluster.run_id}" in iptables(lab, "m1", "-S", "INPUT")
        assert cluster.primary() == "m1", "the harness still reaches every member (it is not a member)"

        cluster.partition([("m2", "m1")])  # a second fault cutting the same link
        cluster.heal_partition([("m1", "m2")])
        assert not lab.connects("m2", "m1"), "the link another fault still cuts stays cut"
        cluster.heal_partition([("m1", "m2")])
        assert lab.connects("m2", "m1") and lab.connects("m1", "m2"), "healed: the link is whole"

        cluster.partition([("m1", "m2")])
        cluster.heal_partition()  # every rule of this run
        assert lab.connects("m2", "m1") and lab.connects("m1", "m2")
        rules = iptables(lab, "m1", "-S", "INPUT")
        assert "192.0.2.7/32" in rules and "leasecheck:another-run" in rules, f"only this run's rules go: {rules}"
        assert f"leasecheck:{cluster.run_id}" not in rules + iptables(lab, "m2", "-S", "INPUT")
    finally:
        iptables(lab, "m1", "-D", "INPUT", "-s", "192.0.2.7/32", "-j", "DROP")
        iptables(lab, "m1", "-D", "INPUT", "-s", "192.0.2.8/32", "-m", "comment", "--comment", "leasecheck:another-run",
                 "-j", "DROP")


def test_a_pause_stops_the_member_and_its_companion_and_resume_continues_them(
        lab: Lab, cluster: DeployedCluster) -> None:
    pids = [lab.pid("m1"), *lab.companion_pids("m1")]
    assert len(pids) == 2 and [state(p) for p in pids] == ["S", "S"]
    cluster.pause_member("m1")
    # the kernel stops a process when it is next scheduled: on a loaded machine /proc says R a moment after the kill
    wait_for(lambda: [state(p) for p in pids] == ["T", "T"], 5.0, every=0.01, what="m1 and its companion stopped")
    assert not redis_ping(lab, "m1"), "a stopped server answers nothing"
    assert state(lab.pid("m2")) != "T", "only m1 is paused"
    cluster.resume_member("m1")
    assert "T" not in [state(p) for p in pids]
    assert redis_ping(lab, "m1")


def test_a_kill_kills_the_member_and_its_companion_and_start_brings_them_back(
        lab: Lab, cluster: DeployedCluster) -> None:
    old, companion = lab.pid("m1"), lab.companion_pids("m1")
    cluster.kill_member("m1")
    assert state(old) in ("gone", "Z") and all(state(p) in ("gone", "Z") for p in companion)
    assert not redis_ping(lab, "m1")
    assert cluster.down_members() == ["m1"]
    assert cluster.primary() is None, "with m1 down, no member says role:master"
    cluster.start_member("m1")
    assert cluster.down_members() == []
    assert lab.pid("m1") != old and state(lab.pid("m1")) in ("S", "R")
    assert lab.companion_pids("m1") and lab.companion_pids("m1") != companion
    assert poll(lambda: redis_ping(lab, "m1"), 10.0, every=0.1)
    assert poll(lambda: cluster.primary() == "m1", 10.0, every=0.2)
    cluster.kill_member("m1")
    with pytest.raises(EnvironmentFailure, match="m1: cannot kill it: no process of it is running"):
        cluster.kill_member("m1")  # a fault that cannot be applied says so: the run is unknown, not quietly thinner
    cluster.start_member("m1")


def test_skew_writes_the_faketime_file_and_is_refused_for_a_member_without_one(
        lab: Lab, cluster: DeployedCluster) -> None:
    control = Path(load_deployment(lab.deployment).member("m1").faketime or "")
    cluster.skew_member("m1", 1500.0)
    assert control.read_text() == "+1.5\n"
    cluster.skew_member("m1", -250.0)
    assert control.read_text() == "-0.25\n"
    assert oct(control.stat().st_mode & 0o777) == "0o644", "readable by a server running as another user"
    cluster.skew_member("m1", 0.0)
    assert control.read_text() == "+0\n"
    with pytest.raises(EnvironmentFailure, match="m2: its clock cannot be skewed: the deployment gives it no faketime"):
        cluster.skew_member("m2", 1500.0)


def test_failover_without_sentinel_is_refused_saying_why(cluster: DeployedCluster) -> None:
    with pytest.raises(EnvironmentFailure, match="no built-in failover without Sentinel"):
        cluster.failover()


def test_heal_after_a_lost_harness_finds_everything_from_the_deployment_alone(lab: Lab, cluster: DeployedCluster) -> None:
    """A harness SIGKILLed mid-fault leaves a cut link, a stopped member and a skewed clock: a new process, knowing
    only the deployment file, undoes all three (``leasecheck heal --hosts FILE``), and nothing of the team's."""
    iptables(lab, "m2", "-A", "INPUT", "-s", "192.0.2.9/32", "-j", "DROP")
    try:
        cluster.partition([("m1", "m2")])
        cluster.pause_member("m1")
        cluster.skew_member("m1", 3000.0)
        assert not lab.connects("m2", "m1") and state(lab.pid("m1")) == "T"

        healed = subprocess.run([sys.executable, "-m", "leasecheck", "heal", "--hosts", str(lab.deployment)],
                                capture_output=True, text=True, timeout=120, cwd=lab.directory,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        assert healed.returncode == 0, healed.stdout + healed.stderr
        assert f"m1: firewall: removed -A INPUT -s {lab.address('m2')}/32" in healed.stdout, healed.stdout
        assert lab.connects("m2", "m1") and lab.connects("m1", "m2")
        assert "T" not in (state(lab.pid("m1")), *map(state, lab.companion_pids("m1")))
        assert Path(load_deployment(lab.deployment).member("m1").faketime or "").read_text() == "+0\n"
        assert "192.0.2.9/32" in iptables(lab, "m2", "-S", "INPUT"), "the team's rule survives"
    finally:
        iptables(lab, "m2", "-D", "INPUT", "-s", "192.0.2.9/32", "-j", "DROP")


def test_the_catalogues_own_faults_act_through_the_deployed_cluster(lab: Lab, cluster: DeployedCluster) -> None:
    """The nemesis' factories, given the deployed cluster as the run's cluster and a member as its store's server,
    do what they do to a cluster leasecheck started: the protocols are met by structure, not by name."""
    ctx = FaultContext(ttl_ms=1000, cluster=cluster, server=cluster.server("m2"))
    rng = random.Random(7)
    isolate = make_isolate_primary(ctx, rng)
    assert isolate is not None
    assert isolate.start()["groups"] == [["m1"], ["m2"]]
    assert not lab.connects("m2", "m1")
    isolate.heal()
    assert lab.connects("m2", "m1")

    paused = make_pause_primary(ctx, rng)
    assert paused is not None and paused.start()["victims"] == ["m1"]
    assert state(lab.pid("m1")) == "T"
    paused.heal()
    assert state(lab.pid("m1")) != "T"

    store = make_pause_store(ctx, rng)
    assert store is not None and store.undo_record() is None, "no local pid may stand for a process of another host"
    store.start()
    assert state(lab.pid("m2")) == "T"
    store.heal()
    assert state(lab.pid("m2")) != "T"

    old = lab.pid("m2")
    killed = make_kill_store(ctx, rng)
    assert killed is not None
    killed.start()
    assert state(old) in ("gone", "Z")
    killed.heal()
    assert lab.pid("m2") != old and poll(lambda: redis_ping(lab, "m2"), 10.0, every=0.1)


def test_check_tries_every_command_the_faults_need_and_changes_nothing(lab: Lab, cluster: DeployedCluster) -> None:
    before = {name: iptables(lab, name, "-S", "INPUT") for name in ("m1", "m2")}
    pid = lab.pid("m1")
    rows = check(cluster, ["isolate-primary", "kill-primary", "pause-primary", "clock-member"])
    by = {(r.member, r.what): r for r in rows if r.what != "process"}
    assert by["m1", "firewall"].ok and by["m2", "firewall"].ok
    assert by["*", "primary"].ok and by["*", "primary"].detail.startswith("m1")
    assert by["m1", "faketime"].ok
    assert not by["m2", "faketime"].ok and by["m2", "faketime"].config, "clock-member needs a faketime file on each"
    assert all(r.ok for r in rows if r.what == "process"), rows
    assert {name: iptables(lab, name, "-S", "INPUT") for name in ("m1", "m2")} == before
    assert lab.pid("m1") == pid and state(pid) != "T"


def test_hosts_check_on_the_command_line(lab: Lab) -> None:
    def hosts_check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "leasecheck", "hosts", "check", str(lab.deployment), *args],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})

    ok = hosts_check("--nemesis", "isolate-primary,partition-halves,kill-primary,pause-primary,pause")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "m1  firewall  ok" in ok.stdout and "checks passed (not done on the hosts, not checked: pause)" in ok.stdout
    lacking = hosts_check("--nemesis", "clock-member,failover")
    assert lacking.returncode == 3, lacking.stdout + lacking.stderr
    assert "m2  faketime  FAIL  no faketime = ... for this member" in lacking.stdout
    assert "no built-in failover without Sentinel" in lacking.stdout
