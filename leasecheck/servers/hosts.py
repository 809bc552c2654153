"""Hosts on one machine: a network namespace per member of a replicated store, on a bridge of their own.

Why namespaces: the faults that matter in a cluster are *between its members*
(Jepsen's partitions: the primary isolated, a majority cut from a minority, a
bridge). On loopback every member would share one address and the kernel one
source address, so no rule could tell the replica's link to the primary from a
worker's; a proxy per link cannot either, since Sentinel and etcd tell every
member the same address of a peer. In its own namespace a member is a host
with an address of its own, and a partition is Jepsen's: ``iptables -I INPUT -s
PEER -j DROP`` on each side, inside the members' namespaces, never the machine's.
Each member is a host of the host interface (:class:`~leasecheck.hosts.netns.NetnsHost`,
:meth:`HostNetwork.shell`), and its rules are added and removed by the code that
cuts a team's own hosts (:mod:`leasecheck.hosts.firewall`, tagged with the network):
one code path for a cluster leasecheck starts and one a team runs.

The layout of one :class:`HostNetwork`::

    root namespace (workers, harness) ── veth ──┐
                                    switch namespace: bridge ── veth ── member namespace m1 (10.213.N.11)
                                                            ── veth ── member namespace m2 (10.213.N.12) ...

The bridge lives in a namespace of its own so that no rule of the machine's
(Docker sets the root namespace's FORWARD policy to DROP) touches the members'
traffic. The subnet is the first ``10.213.N.0/24`` no route of the machine uses,
chosen under a file lock so that two runs at once never take the same one.
Every namespace is named ``lc-PID-K-...`` after the process that made it:
:meth:`HostNetwork.close` deletes them (their interfaces go with them), a guard
process deletes them if the harness is killed, and :func:`remove_orphans` deletes
those of a process that is gone (``leasecheck heal`` and every new network call it).

Members are put in their namespace by :func:`leasecheck.servers.base.enter_netns`,
called in the server's forked child before it execs (``setns``), so the server's
pid is the one the harness started and pauses, kills and signals stay exact.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts import firewall
from leasecheck.hosts.netns import NetnsHost
from leasecheck.servers.base import NETNS_DIR, die_with_parent, popen, python_module

#: the private range the member subnets come from: 10.213.N.0/24, N in 1..254
SUBNET_PREFIX = "10.213"
#: taken while a subnet is chosen and claimed, so that concurrent runs choose different ones
LOCK_FILE = Path("/tmp/leasecheck-hosts.lock")
_NAME = re.compile(r"^lc-(\d+)-\d+-")
_made = itertools.count(1)


@dataclass(frozen=True)
class Host:
    """One member's host: its name in the cluster (``m1``), its namespace and its address."""

    name: str
    netns: str
    address: str


def _ip(*args: str, netns: str | None = None, stdin: str | None = None) -> str:
    """Run ``ip`` (in ``netns`` if given); raise EnvironmentFailure with what it said."""
    command = ["ip", *(["-n", netns] if netns else []), *args]
    return _run(command, stdin)


def _run(command: list[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise EnvironmentFailure(f"hosts: {command[0]} is not installed (apt-get install -y iproute2 iptables)") from None
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvironmentFailure(f"hosts: {' '.join(command)}: {e}") from None
    if done.returncode != 0:
        raise EnvironmentFailure(f"hosts: {' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_namespaces() -> list[str]:
    """Every namespace a leasecheck network made (``lc-PID-K-...``), alive or not."""
    try:
        return sorted(name for name in os.listdir(NETNS_DIR) if _NAME.match(name))
    except OSError:
        return []


def delete_namespaces(names: Iterable[str]) -> list[str]:
    """Delete these namespaces (and, with them, their interfaces); the names deleted."""
    done = []
    for name in names:
        if subprocess.run(["ip", "netns", "del", name], capture_output=True).returncode == 0:
            done.append(name)
    return done


def remove_orphans() -> list[str]:
    """Delete the namespaces of leasecheck processes that are gone (a harness and its guard both killed)."""
    orphans = [name for name in run_namespaces() if not _alive(int(_NAME.match(name).group(1)))]  # type: ignore[union-attr]
    return delete_namespaces(orphans)


def _used_subnets() -> set[int]:
    """The N of every ``10.213.N.*`` address or route on the machine now."""
    text = _ip("-4", "route", "show", "table", "all") + _ip("-4", "-o", "addr", "show")
    return {int(m.group(1)) for m in re.finditer(rf"\b{re.escape(SUBNET_PREFIX)}\.(\d+)\.", text)}


@dataclass
class HostNetwork:
    """``count`` hosts (``m1`` ... ``mN``) on a bridge the root namespace reaches; partitions between them.

    Use :meth:`open`; :meth:`close` deletes everything it made.
    """

    tag: str
    subnet: int
    hosts: list[Host]
    switch: str
    #: for each host, the peers whose packets it drops now
    cut: dict[str, set[str]] = field(default_factory=dict)
    guard: subprocess.Popen[bytes] | None = None

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (where workers' packets come from)."""
        return f"{SUBNET_PREFIX}.{self.subnet}.1"

    @property
    def namespaces(self) -> list[str]:
        return [self.switch, *(host.netns for host in self.hosts)]

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    @classmethod
    def open(cls, count: int) -> HostNetwork:
        """Make the switch, ``count`` member hosts and the root's link to them; raise EnvironmentFailure."""
        if os.geteuid() != 0:
            raise EnvironmentFailure("hosts: a cluster's members need network namespaces, which only root can make")
        remove_orphans()
        tag = f"{os.getpid()}-{next(_made)}"
        short = f"{os.getpid() % 0xFFFFF:05x}{int(tag.rsplit('-', 1)[1]) % 256:02x}"  # interface names: 15 bytes at most
        switch = f"lc-{tag}-switch"
        network: HostNetwork | None = None
        LOCK_FILE.touch(exist_ok=True)
        with open(LOCK_FILE) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _used_subnets()
            free = [n for n in range(1, 255) if n not in used]
            if not free:
                raise EnvironmentFailure(f"hosts: every {SUBNET_PREFIX}.N.0/24 subnet is in use")
            subnet = free[0]
            hosts = [Host(f"m{i}", f"lc-{tag}-m{i}", f"{SUBNET_PREFIX}.{subnet}.{10 + i}") for i in range(1, count + 1)]
            network = cls(tag, subnet, hosts, switch)
            try:
                network._build(short)
            except BaseException:
                network.close()
                raise
        network.guard = _start_guard(network.namespaces)
        return network

    def _build(self, short: str) -> None:
        _run(["ip", "netns", "add", self.switch])
        _ip("link", "add", "br0", "type", "bridge", netns=self.switch)
        _ip("link", "set", "br0", "up", netns=self.switch)
        root_end = f"lc{short}r"
        _ip("link", "add", root_end, "type", "veth", "peer", "name", "up0", "netns", self.switch)
        _ip("link", "set", "up0", "master", "br0", "up", netns=self.switch)
        _ip("addr", "add", f"{self.gateway}/24", "dev", root_end)
        _ip("link", "set", root_end, "up")
        for i, host in enumerate(self.hosts, 1):
            _run(["ip", "netns", "add", host.netns])
            _ip("link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", host.netns, netns=self.switch)
            _ip("link", "set", f"p{i}", "master", "br0", "up", netns=self.switch)
            _ip("addr", "add", f"{host.address}/24", "dev", "eth0", netns=host.netns)
            _ip("link", "set", "eth0", "up", netns=host.netns)
            _ip("link", "set", "lo", "up", netns=host.netns)
            self.cut[host.name] = set()

    # ------------------------------------------------------------ partitions

    def partition(self, links: Iterable[tuple[str, str]]) -> None:
        """Cut exactly these links (pairs of host names), both ways; every other link between members is whole."""
        wanted: dict[str, set[str]] = {host.name: set() for host in self.hosts}
        for a, b in links:
            wanted[a].add(b)
            wanted[b].add(a)
        for host in self.hosts:
            if wanted[host.name] != self.cut[host.name]:
                self._drop_from(host, wanted[host.name])

    def heal(self) -> None:
        """Every link whole again."""
        self.partition(())

    @property
    def run_id(self) -> str:
        """What this network's partition rules are tagged with (``leasecheck:lc-PID-K``)."""
        return f"lc-{self.tag}"

    def shell(self, name: str) -> NetnsHost:
        """Host ``name`` as the host interface reaches it (``netns://``): what every member command goes through."""
        return NetnsHost(name, self.host(name).netns)

    def _drop_from(self, host: Host, peers: set[str]) -> None:
        """Make ``host`` drop exactly ``peers``' packets: the rules added and removed one by one, tagged with this
        network, by the code that cuts a team's hosts (:mod:`leasecheck.hosts.firewall`), so that a partition of a
        cluster leasecheck starts and one of a deployment are the same commands."""
        shell = self.shell(host.name)
        for peer in sorted(peers - self.cut[host.name]):
            firewall.drop_from(shell, self.host(peer).address, self.run_id)
        for peer in sorted(self.cut[host.name] - peers):
            firewall.undrop(shell, self.host(peer).address, self.run_id)
        self.cut[host.name] = set(peers)

    def links_cut(self) -> list[tuple[str, str]]:
        """The links cut now, each once (``(a, b)`` with a before b)."""
        return sorted({(a, b) if a < b else (b, a) for a, peers in self.cut.items() for b in peers})

    def close(self) -> None:
        """Delete every namespace (their interfaces go with them) and stop the guard."""
        delete_namespaces(name for name in self.namespaces if (NETNS_DIR / name).exists())
        if self.guard is not None and self.guard.poll() is None:
            self.guard.kill()
            self.guard.wait()


# ---------------------------------------------------------------- the guard


def _start_guard(namespaces: list[str]) -> subprocess.Popen[bytes]:
    """A process that deletes ``namespaces`` when the harness dies (its parent-death signal)."""
    return popen(
        [*python_module(__name__), "guard", *namespaces],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def _guard(namespaces: list[str]) -> NoReturn:
    def delete(signum: int, frame: object) -> NoReturn:
        time.sleep(0.2)  # the members die with the harness too: let them go before their namespaces do
        delete_namespaces(namespaces)
        os._exit(0)

    signal.signal(signal.SIGTERM, delete)
    die_with_parent(signal.SIGTERM)
    if os.getppid() == 1:
        delete(signal.SIGTERM, None)
    while True:  # until the harness dies (SIGTERM) or closes the network (SIGKILL: it deletes them itself)
        if not any((NETNS_DIR / name).exists() for name in namespaces):
            os._exit(0)
        time.sleep(1.0)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "guard":
        _guard(sys.argv[2:])
    sys.exit("usage: python -m leasecheck.servers.hosts guard NETNS...")
