"""A whole run against a team's own cluster, described in a deployment file and reached over SSH alone (issue 35).

The cluster stands in for a staging deployment: a Redis primary, two replicas and three Sentinels on hosts of
their own (network namespaces), an sshd on each host. leasecheck is told only the deployment file (``ssh://``
addresses, a pattern for each process, the command that starts it again) and the address the clients follow; every
member fault runs as commands over SSH. The published finding reproduces: Sentinel's failover loses acknowledged
writes, caught with the kinds a lost write shows as, each anomaly naming a member fault; nothing of the run is left
on the hosts (no rule tagged with it), and the members' logs are in the run folder.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hostlab import TWO_MEMBERS, Keys, Sshd, start_sshd
from lost_writes import LOST, MEMBER_FAULTS

from leasecheck.run.options import RunOptions
from leasecheck.run.runner import run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hosts are network namespaces: root only")


def _deployment(cluster: object, keys: Keys, known: Path, path: Path) -> Path:
    """The file a team would write for this cluster: ssh:// only, processes by pattern, how each starts again."""
    from leasecheck.servers.redis_sentinel import SERVICE

    members = []
    for name, member in cluster.members.items():  # type: ignore[attr-defined]
        address, home = member.host.address, member.server.directory
        start = (f"redis-server {home}/redis.conf --daemonize yes --logfile {home}/restarted.log"
                 f" && redis-server {member.companions[0].directory}/sentinel.conf --sentinel --daemonize yes"
                 f" --logfile {home}/sentinel-restarted.log")
        members.append(textwrap.dedent(f"""
            [[member]]
            name = "{name}"
            host = "ssh://root@{address}:22"
            address = "{address}"
            process = {{ pattern = "redis-server {address}:6379" }}
            companions = [ {{ pattern = "redis-server {address}:26379" }} ]
            start = "{start}"
            logs = ["{member.server.log_path}"]
            """))
    path.write_text('store = "redis"\n' + keys.ssh_table(known) + textwrap.dedent(f"""\
        [redis]
        client = "redis-cli -h {{address}} -p 6379"
        sentinel = "redis-cli -h {{address}} -p 26379"
        master-name = "{SERVICE}"
        """) + "".join(members))
    return path


def _sshd_on_every_member(cluster: Any, tmp_path: Path, sshds: list[Sshd]) -> tuple[Keys, Path]:
    """An sshd in each member's namespace (added to ``sshds`` as it starts, for the caller's ``finally``), with keys
    made for the test; the keys and the known-hosts file that trusts every member."""
    keys = Keys.make(tmp_path / "keys")
    for member in cluster.members.values():
        sshds.append(start_sshd(tmp_path / "sshd", keys, member.host.address, 22, netns=member.host.netns))
    return keys, keys.known_hosts(tmp_path / "known_hosts", *((m.host.address, 22) for m in cluster.members.values()))


def _no_rule_of_ours_left(cluster: Any) -> None:
    """No iptables rule tagged by a run is left on any member's host."""
    for member in cluster.members.values():
        rules = subprocess.run(["ip", "netns", "exec", member.host.netns, "iptables", "-S", "INPUT"],
                               capture_output=True, text=True, check=True).stdout
        assert "leasecheck:" not in rules, rules


def test_a_teams_sentinel_cluster_reached_over_ssh_alone_loses_acknowledged_writes_at_a_failover(tmp_path: Path) -> None:
    from leasecheck.histories import read_history
    from leasecheck.servers.redis_sentinel import RedisSentinelCluster

    cluster = RedisSentinelCluster(Path(tempfile.mkdtemp(prefix="leasecheck-test-hostruns-")), ttl_ms=1000).start()
    sshds: list[Sshd] = []
    try:
        keys, known = _sshd_on_every_member(cluster, tmp_path, sshds)
        hosts = _deployment(cluster, keys, known, tmp_path / "staging.toml")
        nemesis = ("failover", "kill-primary")
        result = run(RunOptions(target="redis", url=cluster.url, hosts=str(hosts), nemesis=nemesis, seed=1, time_limit=8.0,
                                evidence_wait_s=60.0, nemesis_interval=2.0, store=str(tmp_path / "store")))
        verdict = result.verdict
        assert verdict.valid is False, (result.reason, result.run_dir)
        kinds = {a.kind for a in verdict.anomalies}
        assert kinds and kinds <= LOST, kinds
        blamed = {f.get("fault") for a in verdict.anomalies for f in (a.faults or ())}
        assert blamed & set(nemesis), f"no anomaly names a member fault that hit its processes: {blamed}"
        header, ops, reader = read_history(result.run_dir / "history.jsonl")
        assert set(header.meta["cluster"]["hosts"].values()) == {f"ssh://root@{m.host.address}:22" for m in cluster.members.values()}
        member_events = [e for e in reader.nemesis if isinstance(e.value, dict) and e.value.get("fault") in MEMBER_FAULTS]
        assert member_events and all(set(e.value["victims"]) <= set(cluster.members) for e in member_events)
        indices = {op.index for op in ops}
        assert all(a.ops and set(a.ops) <= indices for a in verdict.anomalies)
        # the members' logs came home, and no rule of the run is left on a host
        assert sorted(p.name for p in (result.run_dir / "members").iterdir()) == sorted(
            f"{name}-{m.server.log_path.name}" for name, m in cluster.members.items())
        _no_rule_of_ours_left(cluster)
    finally:
        for sshd in sshds:
            sshd.stop()
        for member in cluster.members.values():  # the members a kill-primary started again over ssh are daemons of no one
            for port in (6379, 26379):
                subprocess.run(["pkill", "-KILL", "-f", f"redis-server {member.host.address}:{port}"], check=False)
        cluster.stop()
        cluster.cleanup()


def test_a_teams_synchronous_postgres_standby_reached_over_ssh_alone_stays_valid_under_isolate_primary_and_failover(
        tmp_path: Path) -> None:
    """AUDITS.md's synchronous Postgres finding, reproduced on a deployment reached over SSH alone: the primary cut off
    from its standby (iptables rules over ssh) and the HA manager's failover (the primary's postmaster killed by its
    pid file, then ``pg_promote()`` through psql on the standby's host) never lose an acknowledged commit."""
    from leasecheck.servers.postgres_standby import PostgresSyncStandbyCluster

    # under /tmp, not pytest's folder: the members run as the postgres user, which cannot enter that
    cluster = PostgresSyncStandbyCluster(Path(tempfile.mkdtemp(prefix="leasecheck-test-hostruns-")), ttl_ms=1000)
    cluster.start()
    sshds: list[Sshd] = []
    try:
        keys, known = _sshd_on_every_member(cluster, tmp_path, sshds)
        members = "".join(textwrap.dedent(f"""
            [[member]]
            name = "{name}"
            host = "ssh://root@{m.host.address}:22"
            address = "{m.host.address}"
            process = {{ pidfile = "{cluster.server(name).data_dir}/postmaster.pid" }}
            logs = ["{m.server.log_path}"]
            """) for name, m in cluster.members.items())
        hosts = tmp_path / "staging.toml"
        hosts.write_text('store = "postgres"\n' + keys.ssh_table(known) + textwrap.dedent("""\
            [postgres]
            client = "psql -h {address} -p 5432 -U postgres -d postgres"
            """) + members)
        nemesis = ("isolate-primary", "failover")
        result = run(RunOptions(target="postgres", url=cluster.url, hosts=str(hosts), nemesis=nemesis, seed=1,
                                time_limit=8.0, evidence_wait_s=60.0, nemesis_interval=2.0, store=str(tmp_path / "store")))
        assert result.verdict.valid is True, (result.reason, [(a.kind, a.ops) for a in result.verdict.anomalies][:5],
                                              result.run_dir)
        from leasecheck.histories import read_history

        _, _, reader = read_history(result.run_dir / "history.jsonl")
        done = {(e.value["fault"], e.f) for e in reader.nemesis if isinstance(e.value, dict) and e.value.get("fault") in nemesis}
        assert {("isolate-primary", "partition"), ("isolate-primary", "heal"), ("failover", "failover")} <= done, done
        moved = [e.value for e in reader.nemesis if e.f == "failover" and isinstance(e.value, dict) and e.value.get("to")]
        assert moved and moved[0]["from"] == "m1" and moved[0]["to"] == "m2", moved  # STONITH, then promote, over ssh
        _no_rule_of_ours_left(cluster)
    finally:
        for sshd in sshds:
            sshd.stop()
        cluster.stop()
        cluster.cleanup()


@pytest.mark.parametrize("text, args, said", [
    (TWO_MEMBERS.replace("name = \"m2\"", "name = \"m1\""), ["--url", "redis://10.0.0.11"], "staging.toml:7: member name 'm1' is given twice"),
    (TWO_MEMBERS, [], "--hosts {file}: add --url, the address your clients reach the redis at"),
    (TWO_MEMBERS, ["--url", "redis://10.0.0.11", "--cluster", "redis-sentinel"], "--cluster and --env docker start stores"),
    (TWO_MEMBERS, ["--url", "redis://10.0.0.11", "--nemesis", "pause-store"], "pause-store acts on one store server: through --hosts, on a deployment of one member"),
    (TWO_MEMBERS, ["--url", "redis://10.0.0.11", "--nemesis", "clock-member"], "no member of {file} gives a faketime file"),
    (TWO_MEMBERS.replace('"redis"', '"postgres"', 1), ["--url", "redis://10.0.0.11"], "--hosts {file} deploys postgres; --target redis runs on redis"),
], ids=["named-twice", "no-url", "with-cluster", "store-fault-on-many", "no-faketime", "other-store"])
def test_a_run_with_a_deployment_it_cannot_take_is_refused_in_one_line_before_anything_starts(
        tmp_path: Path, text: str, args: list[str], said: str) -> None:
    hosts = tmp_path / "staging.toml"
    hosts.write_text(text)
    done = subprocess.run(["python3", "-m", "leasecheck", "run", "--target", "redis", "--hosts", str(hosts), "--store",
                           str(tmp_path / "store"), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said.format(file=hosts) in lines[0], lines
    assert not (tmp_path / "store").exists()  # refused before anything started
