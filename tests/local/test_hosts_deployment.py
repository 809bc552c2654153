"""The deployment file (``--hosts FILE``): read whole, or refused in one line ``FILE:LINE: what`` with exit 3.

A typo must never make a quieter run: an unknown key, a member named twice, an
address that is not one, a process found no way, each stops ``leasecheck hosts
check`` before any host is touched, naming the line an editor should jump to.
A file that is fine but names a host nobody answers at is the environment's
failure: exit 4, naming the host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hostlab import free_port
from paths import REPO

from leasecheck.hosts.address import BadAddress, HostAddress, parse_address
from leasecheck.hosts.checks import NEEDS, needs_of
from leasecheck.hosts.deployment import DeploymentError, ProcessSpec, load_deployment
from leasecheck.nemesis.catalogue import CATALOGUE, FAULTS

GOOD = textwrap.dedent("""\
    # a Redis with Sentinel on two hosts, and a third in a container
    store = "redis"

    [ssh]
    user = "ops"
    port = 2222
    identity = ["~/.ssh/id_ed25519", "/etc/leasecheck/key"]
    agent = false
    known-hosts = "/etc/leasecheck/known_hosts"

    [redis]
    sentinel = "redis-cli -p 26379"

    [[member]]
    name = "m1"
    host = "ssh://root@10.0.0.11:22"
    address = "10.0.0.11"
    process = { pidfile = "/var/run/redis/redis.pid" }
    start = "redis-server /etc/redis/redis.conf --daemonize yes"
    logs = ["/var/log/redis/redis-server.log"]
    faketime = "/var/lib/leasecheck/m1.faketime"
    companions = [ { pattern = "redis-sentinel" } ]

    [[member]]
    name = "m2"
    host = "ssh://10.0.0.12"
    address = "10.0.0.12"
    process = { systemd = "redis-server" }
    primary = "cat /run/primary-name"

    [[member]]
    name = "m3"
    host = "docker://redis-3"
    process = { pattern = "redis-server .*:6379" }
    """)


def write(tmp_path: Path, text: str, name: str = "deployment.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_good_file_is_read_whole_with_its_defaults(tmp_path: Path) -> None:
    d = load_deployment(write(tmp_path, GOOD))
    assert d.store == "redis" and [m.name for m in d.members] == ["m1", "m2", "m3"]
    assert (d.ssh.user, d.ssh.port, d.ssh.agent, d.ssh.trust_host_key) == ("ops", 2222, False, False)
    assert d.ssh.identities == (Path("~/.ssh/id_ed25519"), Path("/etc/leasecheck/key"))
    assert d.ssh.known_hosts == Path("/etc/leasecheck/known_hosts")
    assert (d.option("sentinel"), d.option("client"), d.option("master-name")) == (
        "redis-cli -p 26379", "redis-cli -p 6379", "mymaster")
    m1, m2, m3 = d.members
    assert m1.host == HostAddress("ssh", "10.0.0.11", "root", 22) and m1.address == "10.0.0.11"
    assert m1.processes == (ProcessSpec("pidfile", "/var/run/redis/redis.pid"), ProcessSpec("pattern", "redis-sentinel"))
    assert m1.logs == ("/var/log/redis/redis-server.log",) and m1.faketime == "/var/lib/leasecheck/m1.faketime"
    assert m1.start_command == "redis-server /etc/redis/redis.conf --daemonize yes" and m1.primary == "builtin"
    assert m2.host == HostAddress("ssh", "10.0.0.12") and m2.start_command == "systemctl start redis-server"
    assert m2.primary == "cat /run/primary-name"
    assert m3.host == HostAddress("docker", "redis-3") and m3.address is None and m3.start_command is None


def test_a_file_is_read_once_until_it_changes(tmp_path: Path) -> None:
    """A run asks for its --hosts file three times (options, store, hosts): all three get the one deployment read; a
    file edited in between is read again, and one that went away is refused as unreadable."""
    path = write(tmp_path, GOOD)
    first = load_deployment(path)
    assert load_deployment(str(path)) is first
    path.write_text(GOOD.replace('name = "m3"', 'name = "m33"'))  # within a clock tick of the first: its size tells
    again = load_deployment(path)
    assert again is not first and [m.name for m in again.members] == ["m1", "m2", "m33"]
    path.unlink()
    with pytest.raises(DeploymentError, match=r"deployment.toml:1: cannot read it"):
        load_deployment(path)


BAD = [
    # (what is changed, into what, the line the error names, what it says)
    ('user = "ops"', 'usr = "ops"', 5, "unknown key 'usr' in [ssh] (known: user, port,"),
    ('name = "m2"', 'name = "m1"', 25, "member name 'm1' is given twice"),
    ('address = "10.0.0.12"', 'address = "10.0.0.11"', 27, "address 10.0.0.11 of member m2 is m1's too"),
    ('address = "10.0.0.11"', 'address = "10.0.0.256"', 17, "'10.0.0.256' is not an IPv4 address"),
    ('host = "docker://redis-3"', 'host = "http://redis-3"', 33, "'http://redis-3' is not a host address"),
    ('host = "ssh://10.0.0.12"', 'host = "ssh://10.0.0.12:70000"', 26, "the port is not a number from 1 to 65535"),
    ('store = "redis"', 'store = "mysql"', 2, "store = 'mysql' is not one of redis, postgres, etcd, zookeeper"),
    ('process = { systemd = "redis-server" }', 'process = { pid = "redis-server" }', 28,
     "process in member m2: unknown key 'pid' (known: pidfile, systemd, pattern)"),
    ('process = { systemd = "redis-server" }', 'proces = { systemd = "redis-server" }', 28,
     "unknown key 'proces' in member m2"),
    ('process = { pidfile = "/var/run/redis/redis.pid" }', 'process = { pidfile = "redis.pid" }', 18,
     "the pidfile 'redis.pid' is not an absolute path"),
    ('faketime = "/var/lib/leasecheck/m1.faketime"', 'faketime = "m1.faketime"', 21, "is not an absolute path"),
    ('logs = ["/var/log/redis/redis-server.log"]', 'logs = "/var/log/redis/redis-server.log"', 20,
     "logs in member m1 must be a list"),
    ('agent = false', 'agent = "no"', 8, "agent in [ssh] must be true or false, not 'no'"),
    ('sentinel = "redis-cli -p 26379"', 'sentinels = "redis-cli -p 26379"', 12, "unknown key 'sentinels' in [redis]"),
    ('[redis]', '[postgres]', 11, "a [postgres] table in a deployment of redis"),
    ('known-hosts = "/etc/leasecheck/known_hosts"', 'known-hosts = "/x"\ntrust-host-key = true', 10,
     "known-hosts and trust-host-key = true together"),
    ('companions = [ { pattern = "redis-sentinel" } ]', 'companions = [ "redis-sentinel" ]', 22,
     "companions in member m1 must be a table"),
    ('start = "redis-server', 'start = redis-server', 19, "not valid TOML"),
]


@pytest.mark.parametrize(("old", "new", "line", "said"), BAD, ids=[b[3][:40] for b in BAD])
def test_a_bad_file_is_refused_in_one_line_naming_its_line(tmp_path: Path, old: str, new: str, line: int, said: str) -> None:
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(DeploymentError) as refused:
        load_deployment(path)
    message = str(refused.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert said in message and "\n" not in message, message


def hosts_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leasecheck", "hosts", "check", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize(("old", "new", "line", "said"), [BAD[0], BAD[1], BAD[4], BAD[-1]], ids=lambda v: str(v)[:20])
def test_the_command_line_exits_3_with_the_line(tmp_path: Path, old: str, new: str, line: int, said: str) -> None:
    path = write(tmp_path, GOOD.replace(old, new, 1))
    done = hosts_check(str(path))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith(f"leasecheck hosts check: {path}:{line}: ") and said in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and done.stdout == ""


def test_missing_files_and_bad_options_exit_3(tmp_path: Path) -> None:
    missing = hosts_check(str(tmp_path / "nope.toml"))
    assert missing.returncode == 3 and f"{tmp_path / 'nope.toml'}:1: cannot read it" in missing.stderr
    empty = hosts_check(str(write(tmp_path, "")))
    assert empty.returncode == 3 and ":1: no store = ..." in empty.stderr
    unknown = hosts_check(str(write(tmp_path, GOOD)), "--nemesis", "isolate-primary,no-such-fault")
    assert unknown.returncode == 3 and "unknown nemesis no-such-fault" in unknown.stderr, unknown.stderr


def test_a_host_nobody_answers_at_exits_4_naming_it(tmp_path: Path) -> None:
    port = free_port()
    path = write(tmp_path, textwrap.dedent(f"""\
        store = "redis"
        [ssh]
        trust-host-key = true
        connect-timeout = 3
        [[member]]
        name = "m1"
        host = "ssh://root@127.0.0.1:{port}"
        process = {{ pattern = "redis-server" }}
        """))
    done = hosts_check(str(path), "--nemesis", "pause-primary")
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"m1  reach  FAIL  m1: cannot reach ssh://root@127.0.0.1:{port}" in done.stdout, done.stdout
    assert "0 of 1 checks passed" in done.stdout


def test_every_fault_done_on_the_hosts_is_in_the_catalogue_and_every_member_fault_is_done_there() -> None:
    assert set(NEEDS) <= set(FAULTS), "NEEDS names faults by the catalogue's names"
    member_faults = {kind.name for kind in CATALOGUE if kind.module == "leasecheck.nemesis.members"}  # on ClusterControl
    store_faults = {"pause-store", "kill-store"}  # through the one member of a deployment of one (DeployedCluster.server)
    assert member_faults | store_faults == set(NEEDS), f"faults the hosts' check does not know: {member_faults - set(NEEDS)}"
    assert needs_of(["pause", "kill"]) == frozenset(), "a worker's fault needs nothing of the members' hosts"


@pytest.mark.parametrize(("text", "parsed"), [
    ("ssh://root@10.0.0.1:2222", HostAddress("ssh", "10.0.0.1", "root", 2222)),
    ("ssh://db1.example.com", HostAddress("ssh", "db1.example.com")),
    ("ssh://ops@[fd00::1]:22", HostAddress("ssh", "fd00::1", "ops", 22)),
    ("docker://redis-1", HostAddress("docker", "redis-1")),
    ("netns://lc-12-1-m1", HostAddress("netns", "lc-12-1-m1")),
])
def test_addresses_parse_and_print_back(text: str, parsed: HostAddress) -> None:
    assert parse_address(text) == parsed
    assert str(parsed) == text


@pytest.mark.parametrize("text", ["10.0.0.1", "http://x", "ssh://", "ssh://h/path", "ssh://u:pw@h", "ssh://h:0",
                                  "docker://", "docker://a/b", "netns://../x", "kubectl://pod"])
def test_bad_addresses_are_refused(text: str) -> None:
    with pytest.raises(BadAddress):
        parse_address(text)
