"""The worked example docs/journeys/staging-cluster.md, run end to end from the page's own text (issue 35).

The page is written for a team: its Redis primary, two replicas and three Sentinels on hosts 10.0.0.11-13,
reached over SSH alone. Playing that cluster here is leasecheck's own :class:`RedisSentinelCluster` (one network
namespace per member, as ``--cluster redis-sentinel`` starts it) with an sshd in each namespace (tests/support/hostlab.py),
as in tests/runs/test_hosts_runs.py. The test does what the page says with the page's text, in a fresh folder, as the
team would: it appends the hosts' keys to ``~/.ssh/known_hosts`` with the page's ``ssh-keyscan``, writes the page's
``staging.toml``, runs ``leasecheck hosts check``, the run, the look at the members' logs, then the run the page
kills: SIGKILLed once a member is isolated (its rules on every host) and a member's processes are stopped (evidence read on
the hosts, the harness frozen while it is read so that no heal slips in between), the leftovers looked at over ssh
as the page does, and ``leasecheck heal --hosts staging.toml``. Every command's output is held to the page's
sample (tests/runs/test_journeys.py's :func:`same_shape`) and its exit code to the page's word.

What the page's text is changed by, and only by (:class:`StandIn`): its addresses 10.0.0.11-13 are the
namespaces' (10.213.N.11-13, the same last numbers), ``mymaster`` is the name the stand-in's Sentinels monitor,
``/usr/bin/redis-server`` is the machine's redis-server; in each ``[[member]]`` table ``/etc/redis/`` and
``/var/log/redis/`` are that member's folder (the three stand-in hosts share one file system). ``~`` is a fresh
folder holding the key the sshds accept (``HOME``); ``ssh``, which reads root's home whatever ``HOME`` says, is
told that key and known_hosts file. ``leasecheck`` on the PATH is ``python3 -m leasecheck`` (``exec``: the harness
the killed step SIGKILLs is the process it started). The runs are shortened, as the page says.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostlab import Keys, Sshd, start_sshd
from journey import Page, environment, run_script, same_shape
from lost_writes import LOST, MEMBER_FAULTS

from leasecheck.servers.cluster import Member
from leasecheck.servers.redis import find_redis_server
from leasecheck.servers.redis_sentinel import SERVICE, RedisSentinelCluster
from leasecheck.waiting import poll

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stand-in's hosts are network namespaces: root only")

PAGE = "staging-cluster.md"
#: each member's address on the page
PAGE_ADDRESSES = {"m1": "10.0.0.11", "m2": "10.0.0.12", "m3": "10.0.0.13"}
PAGE_MASTER = "mymaster"
PAGE_REDIS = "/usr/bin/redis-server"
#: the folders of a member's own host, on the page: its config files and its logs
PAGE_FOLDERS = ("/etc/redis/", "/var/log/redis/")
#: the page's run, shortened: 8 s of workload, a fault every ~2 s (as tests/runs/test_hosts_runs.py's run); its ``--seed 1``,
#: then 2, then 3 until it is caught (an invalid verdict is the proof; a valid one only says this seed's faults missed)
SHORT_RUN = " --time-limit 8 --nemesis-interval 2"
PROOF_SEEDS = (1, 2, 3)
#: the run the page kills: a fault every ~1 s, so that a partition and a pause are on together within seconds
KILLED_RUN = " --nemesis-interval 1"
#: how long the killed run may take to have a member isolated and a member stopped at once
FAULTS_ON_S = 120.0
#: how long the hosts may take to finish what a harness sent them before it froze
QUIET_S = 10.0
REDIS_PORT, SENTINEL_PORT = 6379, 26379


@dataclass
class StandIn:
    """The cluster playing the team's, an sshd on each member's host, and the page's text made to name them."""

    cluster: RedisSentinelCluster
    sshds: list[Sshd]
    home: Path

    @property
    def members(self) -> dict[str, Member]:
        return self.cluster.members

    def address(self, name: str) -> str:
        return self.members[name].host.address

    def netns(self, name: str) -> str:
        return self.members[name].host.netns

    def folder(self, name: str) -> Path:
        return self.members[name].server.directory

    def text(self, text: str) -> str:
        """The page's text with the stand-in's addresses, master name and redis-server."""
        for name, address in PAGE_ADDRESSES.items():
            text = text.replace(address, self.address(name))
        return text.replace(PAGE_MASTER, SERVICE).replace(PAGE_REDIS, find_redis_server())

    def deployment(self, toml: str) -> str:
        """The page's staging.toml, each member's folders its own (split at each ``[[member]]``)."""
        head, *tables = re.split(r"(?m)^(?=\[\[member\]\]$)", toml)
        done = [head]
        for table in tables:
            name = re.search(r'(?m)^name = "(\w+)"$', table)
            assert name and name.group(1) in PAGE_ADDRESSES, table
            for folder in PAGE_FOLDERS:
                table = table.replace(folder, f"{self.folder(name.group(1))}/")
            done.append(table)
        return self.text("".join(done))

    # ------------------------------------------------------------ what is on the hosts, read here

    def tagged_rules(self, name: str) -> list[str]:
        """The INPUT rules of member ``name``'s host tagged by a leasecheck run."""
        listed = subprocess.run(["ip", "netns", "exec", self.netns(name), "iptables", "-S", "INPUT"],
                                capture_output=True, text=True, check=True, timeout=30).stdout
        return [line for line in listed.splitlines() if "leasecheck:" in line]

    def pids(self) -> list[int]:
        """Every member's redis-server and Sentinel now, found as the page's deployment finds them."""
        found: list[int] = []
        for name in self.members:
            for port in (REDIS_PORT, SENTINEL_PORT):
                pattern = f"redis-server {self.address(name)}:{port}"
                found += map(int, subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split())
        return found

    def idle(self) -> bool:
        """Has every host done all the harness sent it (:meth:`hostlab.Sshd.idle`)?"""
        return all(sshd.idle() for sshd in self.sshds)

    def stopped(self) -> list[int]:
        return [pid for pid in self.pids() if state(pid) == "T"]


def isolated(lab: StandIn) -> bool:
    """Is one member cut from the two others (``isolate-primary``): two tagged rules on its host, one on each other's?"""
    return sorted(len(lab.tagged_rules(n)) for n in lab.members) == [1, 1, 2]


def state(pid: int) -> str | None:
    """The process's state letter in /proc/PID/status (T: stopped), None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^State:\s+(\S)", status, re.M)
    return found.group(1) if found else None


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[StandIn]:
    """The stand-in cluster and its sshds; ``HOME`` with the key they accept (and no known_hosts yet)."""
    cluster = RedisSentinelCluster(Path(tempfile.mkdtemp(prefix="leasecheck-test-staging-")), ttl_ms=1000)
    cluster.start()
    lab = StandIn(cluster, [], tmp_path / "home")
    addresses = [lab.address(name) for name in cluster.members]
    try:
        keys = Keys.make(tmp_path / "keys")
        (lab.home / ".ssh").mkdir(parents=True)
        (lab.home / ".ssh" / "id_ed25519").write_bytes(keys.client.read_bytes())
        (lab.home / ".ssh" / "id_ed25519").chmod(0o600)
        for name in cluster.members:
            lab.sshds.append(start_sshd(tmp_path / "sshd", keys, lab.address(name), 22, netns=lab.netns(name)))
        yield lab
    finally:
        for sshd in lab.sshds:
            sshd.stop()
        cluster.stop()
        # what the page's start commands started again over ssh (daemons of no one): by pid, found by their address
        for address in addresses:
            for port in (REDIS_PORT, SENTINEL_PORT):
                found = subprocess.run(["pgrep", "-f", f"redis-server {address}:{port}"], capture_output=True, text=True)
                for pid in map(int, found.stdout.split()):
                    for sig in (signal.SIGCONT, signal.SIGKILL):
                        try:
                            os.kill(pid, sig)
                        except ProcessLookupError:
                            pass
        cluster.cleanup()


def journey_environment(tmp_path: Path, lab: StandIn) -> dict[str, str]:
    """A team member's shell: ``HOME`` the folder with the key, ``leasecheck`` this checkout's, no ssh-agent."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "leasecheck"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m leasecheck "$@"\n')
    wrapper.chmod(0o755)
    env = environment(tmp_path, HOME=str(lab.home))
    env.pop("SSH_AUTH_SOCK", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def script_of(page: Page, lab: StandIn, name: str) -> str:
    """The page's bash block ``name`` as the test runs it: the stand-in's names, ``ssh`` told the key in ``HOME``."""
    ssh = (f"ssh -i {lab.home}/.ssh/id_ed25519 -o UserKnownHostsFile={lab.home}/.ssh/known_hosts "
           f"-o BatchMode=yes -o ConnectTimeout=10 ")
    return re.sub(r"(?m)^ssh ", ssh, lab.text(page.block(name, "bash"))).rstrip("\n")


def run(page: Page, lab: StandIn, name: str, cwd: Path, env: dict[str, str], expect: int | None = 0,
        extra: str = "", seed: int | None = None) -> tuple[str, int]:
    """Run the page's bash block ``name`` (``extra`` appended to its last line, its ``--seed 1`` made ``seed``): its
    stdout and stderr, its exit code."""
    script = script_of(page, lab, name) + extra
    if seed is not None:
        assert " --seed 1 " in f"{script} ", script
        script = f"{script} ".replace(" --seed 1 ", f" --seed {seed} ").rstrip(" ")
    return run_script(page, name, script, cwd, env, expect)


def test_a_teams_staging_cluster_is_faulted_over_ssh_caught_losing_writes_and_healed_after_a_killed_harness(
        tmp_path: Path, stand_in: StandIn) -> None:
    from leasecheck.histories import read_history

    lab, page = stand_in, Page.read(PAGE)
    page.outputs = {name: lab.text(sample) for name, sample in page.outputs.items()}  # what the stand-in prints is its names
    env = journey_environment(tmp_path, lab)
    folder = tmp_path / "staging"
    folder.mkdir()

    # 1. the hosts' keys, as the page adds them
    run(page, lab, "known-hosts", folder, env)
    known = (lab.home / ".ssh" / "known_hosts").read_text().split("\n")
    assert sorted(line.split()[0] for line in known if line) == sorted(lab.address(n) for n in lab.members), known

    # 2. the deployment file, 3. its check
    (folder / "staging.toml").write_text(lab.deployment(page.block("staging.toml", "toml")))
    out, _ = run(page, lab, "check", folder, env)
    same_shape(page, "check", out)
    passed = re.search(r"^staging\.toml: (\d+) of (\d+) checks passed$", out, re.M)
    assert passed and passed.group(1) == passed.group(2), out
    assert re.search(r"^\*\s+primary\s+ok\s+m\d \(redis's own answer\)$", out, re.M), out

    # 4. the run: caught losing acknowledged writes (the page's seed 1, else 2, else 3: a valid seed only missed the window)
    tries = []
    for seed in PROOF_SEEDS:
        out, code = run(page, lab, "run", folder, env, expect=None, extra=SHORT_RUN, seed=seed)
        tries.append(f"seed {seed}: exit {code}\n{out[-3000:]}")
        assert code in (0, 1), "\n".join(tries)  # a verdict, never unknown or a failed environment
        if code == 1:
            break
    else:
        raise AssertionError(f"{page}: the run was valid on seeds {PROOF_SEEDS}:\n" + "\n".join(tries))
    same_shape(page, "run", out, loose=True)
    run_dir = (folder / "store" / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is False, results.get("reason")
    kinds = {a["kind"] for a in results["anomalies"]}
    assert kinds and kinds <= LOST, kinds
    assert re.search(r"^verdict\s+INVALID\s*$", out, re.M), out
    header, ops, reader = read_history(run_dir / "history.jsonl")
    indices = {op.index for op in ops}
    assert all(a["ops"] and set(a["ops"]) <= indices for a in results["anomalies"]), "every proof is ops of the history"
    assert header.meta["cluster"]["hosts"] == {n: f"ssh://root@{lab.address(n)}:22" for n in lab.members}
    events = [e.value for e in reader.nemesis if isinstance(e.value, dict) and e.value.get("fault") in MEMBER_FAULTS]
    assert {e["fault"] for e in events} == {"failover", "kill-primary"}, events
    assert all(set(e["victims"]) <= set(lab.members) for e in events), events

    # 5. the members' logs, and Sentinel's account of each failover the run asked for
    out, _ = run(page, lab, "logs", folder, env)
    same_shape(page, "logs", out)
    assert sorted(p.name for p in (run_dir / "members").iterdir()) == sorted(
        f"{n}-{log}" for n in lab.members for log in ("redis.log", "sentinel.log"))
    for moved in (e for e in events if e["fault"] == "failover" and e.get("to")):
        switch = f"+switch-master {SERVICE} {lab.address(moved['from'])} {REDIS_PORT} {lab.address(moved['to'])} {REDIS_PORT}"
        assert switch in out.splitlines(), (moved, out)

    # 6. the run the page kills: SIGKILLed while a member is isolated and a member is stopped
    line = script_of(page, lab, "killed-run") + KILLED_RUN
    assert "\n" not in line, line
    with open(tmp_path / "killed-run.out", "wb") as log:
        harness = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        def faults_on() -> bool:
            """The page's picture: one member isolated (two rules on its host, one on each other's) and a member
            stopped, seen while the harness is frozen (no heal slips in between the look and the kill)."""
            assert harness.poll() is None, (tmp_path / "killed-run.out").read_text()
            if not isolated(lab):
                return False
            os.kill(harness.pid, signal.SIGSTOP)
            # what it sent before it froze (a heal's rule removal, a kill -STOP) still runs on the hosts: look once done
            assert poll(lab.idle, QUIET_S, every=0.01), f"the hosts' sshds still busy {QUIET_S:g} s after the freeze"
            if isolated(lab) and lab.stopped() and lab.idle():
                return True
            os.kill(harness.pid, signal.SIGCONT)
            return False

        assert poll(faults_on, FAULTS_ON_S, every=0.05), (
            f"no member isolated and one stopped at once within {FAULTS_ON_S:g} s:\n"
            + (tmp_path / "killed-run.out").read_text())
    finally:
        harness.kill()  # SIGKILL: the harness heals nothing
        harness.wait()
    assert harness.returncode == -signal.SIGKILL
    rules = {n: lab.tagged_rules(n) for n in lab.members}
    stopped = lab.stopped()
    assert isolated(lab) and stopped, (rules, stopped)

    out, _ = run(page, lab, "leftovers", folder, env)  # on m2's host, as the page looks
    same_shape(page, "leftovers", out)
    assert rules["m2"] and all(rule in out.splitlines() for rule in rules["m2"]), (rules["m2"], out)
    assert all(re.search(rf"^\s*{pid} T ", out, re.M) for pid in stopped), (stopped, out)

    out, _ = run(page, lab, "heal", folder, env)
    same_shape(page, "heal", out)
    assert all(not lab.tagged_rules(n) for n in lab.members), {n: lab.tagged_rules(n) for n in lab.members}
    assert all(state(pid) not in ("T", None) for pid in stopped), {pid: state(pid) for pid in stopped}
    assert not lab.stopped()
    for name in lab.members:
        assert re.search(rf"^{name}: processes: SIGCONT to [\d, ]+$", out, re.M), out
        if rules[name]:
            assert re.search(rf"^{name}: firewall: removed ", out, re.M), out
    page.all_used()
