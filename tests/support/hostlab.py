"""Real hosts for the tests of ``leasecheck.hosts``: sshd started by hand, on loopback or inside a member's namespace.

Like tests/support/stores.py for the store servers: what cannot be had fails the test
with the reason (Debian's openssh-server is installed here if /usr/sbin/sshd is
missing), never a skip. Keys are made for the test (asyncssh), so no user's
~/.ssh is read or written. sshd runs as the docs say it can on a host
leasecheck did not start: ``sshd -D -e -p PORT -h HOSTKEY -o ListenAddress=... -o
AuthorizedKeysFile=... -o StrictModes=no -o PidFile=... -o UsePAM=no``, in a
namespace through ``ip netns exec``, so a member is reached only over ssh://.

:func:`member_lab` is the deployment the cluster tests act on: a
:class:`~leasecheck.servers.hosts.HostNetwork` of two members, sshd in each, a
redis-server per member (m2 a replica of m1) started *through ssh* by the
member's start command, m1 with a companion process and a faketime file, and
the deployment file naming it all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import textwrap
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from leasecheck.machine.processes import descendants, read_process
from leasecheck.servers.base import die_with_parent, popen
from leasecheck.servers.hosts import HostNetwork
from leasecheck.waiting import poll

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import asyncssh

SSHD = Path("/usr/sbin/sshd")


def ensure_sshd() -> Path:
    """/usr/sbin/sshd, installed with apt-get if missing (fails the test with apt's words if it cannot be)."""
    if not SSHD.exists():
        done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server"],
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0 or not SSHD.exists():
            pytest.fail(f"no sshd: apt-get install openssh-server exited {done.returncode}: {done.stderr[-2000:]}",
                        pytrace=False)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    return SSHD


@dataclass(frozen=True)
class Keys:
    """A client key the sshds accept, and the host key they all present."""

    client: Path
    authorized_keys: Path
    host: Path
    host_public: str

    @classmethod
    def make(cls, directory: Path) -> Keys:
        directory.mkdir(parents=True, exist_ok=True)
        client, host = asyncssh.generate_private_key("ssh-ed25519"), asyncssh.generate_private_key("ssh-ed25519")
        client.write_private_key(str(directory / "client"))
        host.write_private_key(str(directory / "hostkey"))
        for name in ("client", "hostkey"):
            (directory / name).chmod(0o600)
        (directory / "authorized_keys").write_bytes(client.export_public_key())
        return cls(directory / "client", directory / "authorized_keys", directory / "hostkey",
                   host.export_public_key().decode().strip())

    def ssh_table(self, known: Path) -> str:
        """A deployment file's ``[ssh]`` table for these keys: the client key, no agent, ``known`` as known_hosts."""
        return textwrap.dedent(f"""\
            [ssh]
            user = "root"
            identity = "{self.client}"
            agent = false
            known-hosts = "{known}"
            """)

    def known_hosts(self, path: Path, *hosts: tuple[str, int]) -> Path:
        """A known_hosts file with the host key for each (address, port)."""
        lines = [f"{address if port == 22 else f'[{address}]:{port}'} {self.host_public}\n" for address, port in hosts]
        path.write_text("".join(lines))
        return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sshd:
    """An sshd of the test's own: its process (we started it: stopped by its pid), its address and port."""

    process: subprocess.Popen[bytes]
    address: str
    port: int
    log: Path
    #: the network namespace it listens in (None: the machine's own)
    netns: str | None = None

    def idle(self) -> bool:
        """Has this sshd done all a client sent it: no command running below it, each of its processes asleep, no byte
        waiting on its connections either way? A command a frozen client sent before it froze still runs on its host;
        once this is true, what the host shows stays as it is until the client sends more."""
        for pid in descendants(self.process.pid):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:  # exiting: busy a moment more
                return False
            process = read_process(pid)
            if not comm.startswith("sshd") or process is None or process.state != "S":
                return False
        ss = ["ss", "-tnH", "state", "established", f"( sport = :{self.port} )"]
        listed = subprocess.run(ss if self.netns is None else ["ip", "netns", "exec", self.netns, *ss],
                                capture_output=True, text=True, check=True, timeout=30).stdout
        return all(line.split()[:2] == ["0", "0"] for line in listed.splitlines() if line.strip())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_sshd(directory: Path, keys: Keys, address: str = "127.0.0.1", port: int | None = None,
               netns: str | None = None) -> Sshd:
    """sshd on ``address:port`` (in ``netns`` if given), answering before this returns; the test fails if it does not."""
    ensure_sshd()
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [str(SSHD), "-D", "-e", "-p", str(port), "-h", str(keys.host), "-o", f"ListenAddress={address}",
               "-o", f"AuthorizedKeysFile={keys.authorized_keys}", "-o", "StrictModes=no",
               "-o", f"PidFile={directory / f'sshd-{port}.pid'}", "-o", "UsePAM=no"]
    if netns is not None:
        command = ["ip", "netns", "exec", netns, *command]
    log = directory / f"sshd-{address}-{port}.log"
    with open(log, "wb") as out:
        process = popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        preexec_fn=lambda: die_with_parent(signal.SIGTERM))
    sshd = Sshd(process, address, port, log, netns)

    def answers() -> bool:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            return False

    if not poll(answers, 10.0, every=0.05):
        sshd.stop()
        pytest.fail(f"sshd on {address}:{port} did not answer within 10 s: {log.read_text(errors='replace')[-2000:]}",
                    pytrace=False)
    return sshd


# ---------------------------------------------------------------- the lab of two members


@dataclass
class Lab:
    """Two members on hosts of their own, reached over ssh only; the deployment file that says so."""

    network: HostNetwork
    directory: Path
    keys: Keys
    sshds: list[Sshd]
    deployment: Path
    #: the text every process the lab's members run carries on its command line (their teardown finds them by it)
    tag: str

    def address(self, name: str) -> str:
        return self.network.host(name).address

    def netns(self, name: str) -> str:
        return self.network.host(name).netns

    def pidfile(self, name: str) -> Path:
        return self.directory / name / "redis.pid"

    def pid(self, name: str) -> int:
        return int(self.pidfile(name).read_text().strip())

    def companion_pids(self, name: str) -> list[int]:
        found = subprocess.run(["pgrep", "-f", f"companion-{self.tag}-{name}"], capture_output=True, text=True)
        return [int(p) for p in found.stdout.split()]

    def in_netns(self, name: str, command: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.netns(name), *command], capture_output=True, text=True,
                              timeout=timeout)

    def connects(self, source: str, target: str, port: int = 6379) -> bool:
        """Does a TCP connection from ``source``'s namespace to ``target``'s address and ``port`` open within 1 s?"""
        probe = f"import socket; socket.create_connection(({self.address(target)!r}, {port}), timeout=1).close()"
        return self.in_netns(source, ["python3", "-c", probe]).returncode == 0


def _member_toml(lab_dir: Path, name: str, address: str, tag: str, primary_address: str | None) -> str:
    home = lab_dir / name
    home.mkdir(parents=True, exist_ok=True)
    redis = (f"redis-server --bind {address} 127.0.0.1 --port 6379 --daemonize yes --pidfile {home}/redis.pid "
             f"--dir {home} --logfile {home}/redis.log --save '' --appendonly no --protected-mode no"
             + (f" --replicaof {primary_address} 6379" if primary_address else ""))
    extra = ""
    if primary_address is None:  # m1: a companion that shares its fate, and a clock that may be skewed
        companion = f"companion-{tag}-{name}"
        redis += (f" && (setsid python3 -c 'import time; time.sleep(1e6)' {companion} "
                  f"</dev/null >/dev/null 2>&1 &)")
        extra = (f'faketime = "{home}/faketime.rc"\n'
                 f'companions = [ {{ pattern = "{companion}" }} ]\n')
    return textwrap.dedent(f"""
        [[member]]
        name = "{name}"
        host = "ssh://root@{address}:22"
        address = "{address}"
        process = {{ pidfile = "{home}/redis.pid" }}
        start = "{redis}"
        logs = ["{home}/redis.log"]
        """) + extra


@contextlib.contextmanager
def member_lab(directory: Path) -> Iterator[Lab]:
    """Two members (m1, m2) in namespaces, sshd in each, the deployment written; redis is not started yet."""
    if os.geteuid() != 0:
        pytest.fail("the hosts lab needs root (network namespaces, iptables)", pytrace=False)
    keys = Keys.make(directory / "keys")
    network = HostNetwork.open(2)
    sshds: list[Sshd] = []
    tag = uuid.uuid4().hex[:8]
    lab = None
    try:
        for host in network.hosts:
            sshds.append(start_sshd(directory / "sshd", keys, host.address, 22, netns=host.netns))
        known = keys.known_hosts(directory / "known_hosts", *((h.address, 22) for h in network.hosts))
        m1, m2 = network.hosts
        text = 'store = "redis"\n' + keys.ssh_table(known) + _member_toml(directory, "m1", m1.address, tag, None) + _member_toml(
                directory, "m2", m2.address, tag, m1.address)
        deployment = directory / "deployment.toml"
        deployment.write_text(text)
        lab = Lab(network, directory, keys, sshds, deployment, tag)
        yield lab
    finally:
        if lab is not None:
            for name in ("m1", "m2"):
                _stop_members(lab, name)
        for sshd in sshds:
            sshd.stop()
        network.close()
        shutil.rmtree(directory, ignore_errors=True)


def _stop_members(lab: Lab, name: str) -> None:
    """SIGKILL (after SIGCONT) the member's redis and companion: processes the lab started, found by pidfile and tag."""
    pids = lab.companion_pids(name)
    with contextlib.suppress(OSError, ValueError):
        pids.append(lab.pid(name))
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)


#: a deployment file of two members on hosts reached over ssh (refusals are made of it, one line changed)
TWO_MEMBERS = """\
store = "redis"
[[member]]
name = "m1"
host = "ssh://root@10.0.0.11:22"
process = { pidfile = "/var/run/redis.pid" }
[[member]]
name = "m2"
host = "ssh://root@10.0.0.12:22"
process = { pidfile = "/var/run/redis.pid" }
"""
