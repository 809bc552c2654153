"""A deployed cluster: the store's members on hosts leasecheck did not start, as the member faults see a cluster.

:class:`DeployedCluster` has the methods of
:class:`leasecheck.nemesis.context.ClusterControl` (structurally: this package
sits below the nemesis and never imports it), each a few commands on a member's
:class:`~leasecheck.hosts.protocol.Host`:

* kill / pause / resume: ``kill -KILL`` / ``-STOP`` / ``-CONT`` of the member's process tree and its
  companions', found afresh each time (:mod:`.processes`);
* start: the member's ``start`` command, then waiting until its process is found;
* partition / heal: iptables rules tagged with the run's id on each side (:mod:`.firewall`);
* primary / failover: asked of the store on the members' hosts (:mod:`.stores`);
* skew: the member's libfaketime control file rewritten (``+1.5``: seconds ahead). leasecheck never steps a
  host's clock: a member without ``faketime`` is refused.

:meth:`DeployedCluster.server` is one member as the store faults see the store's
server (``leasecheck.nemesis.context.StoreServer``), through the same commands.

Every change it makes is one its heal can find again without memory: the rules
by their tag, the stopped processes by their spec, the clock files by the
deployment. So :meth:`heal_run` (``leasecheck heal --hosts FILE``) undoes a run
whose harness was SIGKILLed, from the deployment file alone.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts import firewall, processes, stores
from leasecheck.hosts.address import HostAddress, SshOptions
from leasecheck.hosts.deployment import Deployment, MemberSpec
from leasecheck.hosts.protocol import Host, HostUnreachable
from leasecheck.hosts.transports import open_host
from leasecheck.waiting import poll

T = TypeVar("T")
#: how long a member's start command and then its process may take to show
START_TIMEOUT_S = 60.0
#: how long a killed member's processes may take to be gone
KILL_WAIT_S = 10.0


def faketime_offset(offset_ms: float) -> str:
    """libfaketime's relative-offset syntax, in seconds: ``+1.5``, ``-0.25``, ``+0`` (what its control file holds)."""
    text = f"{offset_ms / 1000.0:+.6f}".rstrip("0").rstrip(".")
    return "+0" if text in ("+", "-", "+0", "-0") else text


def each(names: Iterable[str], act: Callable[[str], T]) -> list[T]:
    """``act`` on every member at once (a command over ssh costs ~0.1 s), in ``names``' order; the first error raised."""
    names = list(names)
    if len(names) < 2:
        return [act(name) for name in names]
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return list(pool.map(act, names))


def _link(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


@dataclass(frozen=True)
class Row:
    """One thing done or tried on a member's host: what, whether it worked, and what was found or went wrong."""

    member: str
    what: str
    ok: bool
    detail: str = ""
    #: failed for want of a key in the deployment file (the file's fault, exit 3), not of something on the host
    config: bool = False


@dataclass
class DeployedCluster:
    """The members of ``deployment``, each on its host; the faults of run ``run_id``. Use :meth:`open`."""

    deployment: Deployment
    run_id: str
    hosts: dict[str, Host]
    #: members killed and not started again
    down: set[str] = field(default_factory=set)
    #: the links cut now, each counted once per fault that cut it: overlapping partitions heal one at a time
    cuts: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Postgres primaries a failover killed (STONITH): rebuilding them as standbys is the team's
    deposed: set[str] = field(default_factory=set)
    #: has this run cut a link? Only then can a rule of its own be on a firewall: a run of kills and pauses never calls
    #: iptables, so it runs on hosts whose firewall the user may not touch (a container's, reached by docker exec)
    partitioned: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def open(cls, deployment: Deployment, run_id: str,
             opener: Callable[[HostAddress, SshOptions, str], Host] = open_host) -> DeployedCluster:
        """A cluster of ``deployment``'s members, one host each (connected on first use)."""
        firewall.tag(run_id)  # refuse a run id iptables or a shell would mangle, before anything is touched
        hosts = {m.name: opener(m.host, deployment.ssh, m.name) for m in deployment.members}
        return cls(deployment, run_id, hosts)

    @property
    def kind(self) -> str:
        return f"deployed-{self.deployment.store}"

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def member(self, name: str) -> MemberSpec:
        return self.deployment.member(name)

    def member_names(self) -> list[str]:
        return [m.name for m in self.deployment.members]

    def down_members(self) -> list[str]:
        return sorted(self.down)

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()

    # ---------------------------------------------------------------- processes

    def _tree(self, name: str) -> list[int]:
        return processes.find_tree(self.host(name), self.member(name).processes)

    def _victims(self, name: str, what: str) -> list[int]:
        """The member's process tree for a pause or a kill; refused if none runs, or if one is its host's pid 1."""
        host, member = self.host(name), self.member(name)
        found = {spec: processes.find_pids(host, spec) for spec in member.processes}
        if not any(found.values()):
            raise EnvironmentFailure(f"{name}: cannot {what} it: no process of it is running ({member.process})")
        for spec, pids in found.items():
            if 1 in pids:
                raise EnvironmentFailure(f"{name}: cannot {what} its {spec}: {processes.INIT_REFUSES}")
        return processes.with_descendants(host, [pid for pids in found.values() for pid in pids])

    def kill_member(self, name: str) -> None:
        """SIGKILL the member's processes and companions (a crashed host); :meth:`start_member` brings it back."""
        host, member = self.host(name), self.member(name)
        pids = self._victims(name, "kill")
        processes.signal(host, pids, "KILL")
        if not poll(lambda: not any(processes.find_pids(host, spec) for spec in member.processes), KILL_WAIT_S, 0.05):
            raise EnvironmentFailure(f"{name}: still running {KILL_WAIT_S:g} s after kill -KILL {pids[0]}")
        self.down.add(name)

    def start_member(self, name: str) -> None:
        """Run the member's start command, and wait until its process is found."""
        host, member = self.host(name), self.member(name)
        command = member.start_command
        if command is None:
            raise EnvironmentFailure(f"{name}: cannot start it again: the deployment gives it no start = ...")
        ran = host.run(["sh", "-c", command], timeout=START_TIMEOUT_S)
        if not ran.ok:
            raise EnvironmentFailure(f"{name}: its start command failed: {ran.why()}")
        if not poll(lambda: processes.find_pids(host, member.process), START_TIMEOUT_S, 0.1):
            raise EnvironmentFailure(f"{name}: started, but no process of {member.process} within {START_TIMEOUT_S:g} s")
        self.down.discard(name)

    def pause_member(self, name: str) -> None:
        """SIGSTOP the member's processes and companions, parents first (a frozen VM, a long GC)."""
        processes.signal(self.host(name), self._victims(name, "pause"), "STOP")

    def resume_member(self, name: str) -> None:
        processes.signal(self.host(name), self._tree(name), "CONT")

    # ---------------------------------------------------------------- partitions

    def _address(self, name: str) -> str:
        address = self.member(name).address
        if address is None:
            raise EnvironmentFailure(f"{name}: cannot cut its links: the deployment gives it no address = ...")
        return address

    def partition(self, links: Iterable[tuple[str, str]]) -> None:
        """Cut these links between members (both ways), besides those other faults cut now."""
        with self._lock:
            self.partitioned = True
            for a, b in (_link(*link) for link in links):
                self.cuts[a, b] += 1
                if self.cuts[a, b] == 1:
                    firewall.drop_from(self.host(a), self._address(b), self.run_id)
                    firewall.drop_from(self.host(b), self._address(a), self.run_id)

    def heal_partition(self, links: Iterable[tuple[str, str]] | None = None) -> None:
        """Mend the links one fault cut (a link another fault still cuts stays cut); None: every rule of this run, if it
        cut any (:attr:`partitioned`)."""
        with self._lock:
            if links is None:
                self.cuts.clear()
                if self.partitioned:
                    each(self.member_names(), lambda name: firewall.remove_tagged(self.host(name), self.run_id))
                return
            for a, b in (_link(*link) for link in links):
                if self.cuts[a, b] <= 0:
                    continue
                self.cuts[a, b] -= 1
                if self.cuts[a, b] == 0:
                    del self.cuts[a, b]
                    firewall.undrop(self.host(a), self._address(b), self.run_id)
                    firewall.undrop(self.host(b), self._address(a), self.run_id)

    # ---------------------------------------------------------------- the store's own roles, and clocks

    def primary(self) -> str | None:
        return stores.primary(self)

    def failover(self) -> dict[str, Any]:
        moved = stores.failover(self)
        if self.deployment.store == "postgres" and moved.get("from"):
            self.deposed.add(moved["from"])
        return moved

    def heal_failover(self) -> dict[str, Any] | None:
        """Nothing is rebuilt on a team's hosts: a deposed Postgres primary is named, to be rebuilt as a standby."""
        return {"deposed": sorted(self.deposed)} if self.deposed else None

    def skew_member(self, name: str, offset_ms: float) -> None:
        """Set the member's libfaketime control file ``offset_ms`` ahead of the host's clock (0: back)."""
        control = self.member(name).faketime
        if control is None:
            raise EnvironmentFailure(f"{name}: its clock cannot be skewed: the deployment gives it no faketime = ... "
                                     f"(leasecheck never steps a host's clock; run the server under libfaketime)")
        self.host(name).write_file(control, (faketime_offset(offset_ms) + "\n").encode())

    # ---------------------------------------------------------------- heals

    def heal_all(self) -> None:
        """This run's rules gone, every member that is up resumed and its clock back (heal-all's last word)."""
        self.heal_partition()

        def heal(name: str) -> None:
            self.resume_member(name)
            if self.member(name).faketime is not None:
                self.skew_member(name, 0.0)

        each([name for name in self.member_names() if name not in self.down], heal)

    def heal_run(self, run_id: str | None = None, every_run: bool = False) -> list[Row]:
        """Undo, from the deployment alone, what run ``run_id`` (default: this one; ``every_run``: any leasecheck run)
        left on each host: its firewall rules, stopped processes, skewed clocks. A host that fails is a row, not the end.
        """
        tag = None if every_run else run_id or self.run_id

        def heal(member: MemberSpec) -> list[Row]:
            rows = []
            steps = [("firewall", self._unfirewall), ("processes", self._unpause)]
            if member.faketime is not None:
                steps.append(("clock", self._unskew))
            for what, step in steps:
                try:
                    rows.append(Row(member.name, what, True, step(member.name, tag)))
                except EnvironmentFailure as e:
                    rows.append(Row(member.name, what, False, str(e)))
            return rows

        done = each(self.member_names(), lambda name: heal(self.member(name)))
        self.cuts.clear()
        return [row for rows in done for row in rows]

    def _unfirewall(self, name: str, run_id: str | None) -> str:
        listed = self.host(name).run([*firewall.IPTABLES, "-S", "INPUT"])
        if not listed.ok:  # no run could have added a rule where the firewall cannot be read: nothing to undo
            return f"no leasecheck rule: its firewall is not ours to read ({listed.why()})"
        removed = firewall.remove_tagged(self.host(name), run_id)
        return f"removed {'; '.join(removed)}" if removed else "no leasecheck rule"

    def _unpause(self, name: str, run_id: str | None) -> str:
        resumed = processes.signal(self.host(name), self._tree(name), "CONT")
        return f"SIGCONT to {', '.join(map(str, resumed))}" if resumed else "none running"

    def _unskew(self, name: str, run_id: str | None) -> str:
        self.skew_member(name, 0.0)
        return f"{self.member(name).faketime}: +0"

    def heal_all_tagged(self) -> list[Row]:
        """:meth:`heal_run` for every leasecheck run at once (``leasecheck heal --hosts`` after a killed harness)."""
        return self.heal_run(every_run=True)

    # ---------------------------------------------------------------- for the run folder

    def describe(self) -> dict[str, Any]:
        """The members, their hosts and addresses, the primary now: for the history's header and the report."""
        return {
            "kind": self.kind,
            "members": {m.name: m.address or str(m.host) for m in self.deployment.members},
            "hosts": {m.name: str(m.host) for m in self.deployment.members},
            "primary": self.primary(),
        }

    def fetch_logs(self, directory: Path) -> list[Path]:
        """Copy every member's logs into ``directory`` (``m1-redis-server.log``); the files copied. A host lost by
        then is skipped, saying so in ``MEMBER-unreachable.txt``: the run's verdict is written already."""
        copied = []
        for member in self.deployment.members:
            try:
                for log in member.logs:
                    local = directory / f"{member.name}-{Path(log).name}"
                    self.host(member.name).fetch(log, local)
                    copied.append(local)
            except HostUnreachable as e:
                (directory / f"{member.name}-unreachable.txt").write_text(f"{e}\n")
        return copied

    def server(self, name: str) -> MemberServer:
        """Member ``name`` as the store faults (``pause-store``, ``kill-store``) see the store's server."""
        return MemberServer(self, name)


@dataclass(frozen=True)
class MemberServer:
    """One member as :class:`leasecheck.nemesis.context.StoreServer` (structurally): a store of one member on a host
    leasecheck did not start, paused, killed and started through the same commands as a member.

    ``pid`` is None: a pid on another host is not this machine's, so no undo record may name it (``leasecheck heal``
    would signal a process of its own machine); ``leasecheck heal --hosts FILE`` continues the member instead.
    """

    cluster: DeployedCluster
    name: str

    @property
    def pid(self) -> int | None:
        return None

    def pause(self) -> None:
        self.cluster.pause_member(self.name)

    def resume(self) -> None:
        self.cluster.resume_member(self.name)

    def kill(self) -> None:
        self.cluster.kill_member(self.name)

    def start(self) -> MemberServer:
        self.cluster.start_member(self.name)
        return self
