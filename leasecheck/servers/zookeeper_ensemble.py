"""Three ZooKeeper servers (an ensemble) on hosts of their own: the ``zookeeper-ensemble`` kind.

Each member is :class:`EnsembleServer`, the standalone server of
:mod:`.zookeeper` (Debian's jars, slf4j-simple, a small JVM exec'd directly)
run as a quorum peer (``QuorumPeerMain``): ``server.N=HOST_N:2888:3888`` for
each of the three, a ``myid`` file, the same short tick and session bounds, and
every port on the host's own address. ``srvr`` tells each server's role
(``Mode: leader`` / ``follower``) and says "not currently serving requests"
while the server has no quorum, which is both the readiness probe and how a
server cut off from the others shows it.

Why these timings: failure detection inside the ensemble is counted in ticks
(``syncLimit`` ticks without a word from a follower and the leader gives up its
quorum; the same from the leader and a follower looks for another), so with the
100 ms tick a cut-off leader steps down, and the others elect a new one, within
about a second, a small multiple of the default 1 s lease. ``zookeeper.cnxTimeout``
bounds a connection attempt to a peer during an election: its 5 s default,
spent on a peer whose packets are dropped, would stall every election that
follows a partition. The JVM flags are the standalone server's: three JVMs must
start on two cores within the cluster's 10 s.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from leasecheck.errors import EnvironmentFailure
from leasecheck.servers.cluster import Cluster, Member
from leasecheck.servers.hosts import Host
from leasecheck.servers.zookeeper import ZooKeeperServer, four_letter_word
from leasecheck.waiting import poll

CLIENT_PORT = 2181
QUORUM_PORT = 2888
ELECTION_PORT = 3888
#: ticks a follower may take to connect and sync to a new leader (a small database: a few hundred znodes)
INIT_LIMIT = 20
#: ticks without a word between leader and follower before either gives the other up
SYNC_LIMIT = 5
#: ms a connection attempt to a peer may take during an election (ZooKeeper's default: 5000)
CNX_TIMEOUT_MS = 500
QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: how long one ``srvr`` may take: a server that does not answer in this is not serving
ASK_TIMEOUT_S = 0.5


def srvr(address: str, port: int = CLIENT_PORT, timeout_s: float = ASK_TIMEOUT_S) -> str:
    """The ``srvr`` four-letter word's whole answer from ``address:port`` ('' if unreachable)."""
    return four_letter_word(port, "srvr", timeout_s, address)


def mode_of(answer: str) -> str | None:
    """``leader``, ``follower`` (or ``observer``) from a ``srvr`` answer; None if the server is not serving."""
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class EnsembleServer(ZooKeeperServer):
    """One server of the ensemble: ``myid`` ``number``, every port on its host's address."""

    def __init__(self, directory: Path, host: Host, number: int, peers: list[Host]) -> None:
        super().__init__(directory, port=CLIENT_PORT)
        self.host = host
        self.netns = host.netns
        self.number = number
        self.peers = peers

    @property
    def address(self) -> str:
        return self.host.address

    def config(self) -> list[str]:
        return [
            *super().config(),
            f"initLimit={INIT_LIMIT}",
            f"syncLimit={SYNC_LIMIT}",
            "standaloneEnabled=false",
            "reconfigEnabled=false",
            *(f"server.{i}={peer.address}:{QUORUM_PORT}:{ELECTION_PORT}" for i, peer in enumerate(self.peers, 1)),
        ]

    def _prepare(self) -> None:
        super()._prepare()
        (self.data_directory / "myid").write_text(f"{self.number}\n")

    def _command(self) -> list[str]:
        command = super()._command()
        # the quorum peer, not the standalone main class; a short connect timeout for elections
        return [*command[:-2], f"-Dzookeeper.cnxTimeout={CNX_TIMEOUT_MS}", QUORUM_MAIN_CLASS, command[-1]]

    def mode(self) -> str | None:
        return mode_of(srvr(self.host.address, self.port))

    def _ready(self) -> bool:
        # a quorum peer answers srvr with "not currently serving" until it has joined a quorum
        return self.mode() is not None


class ZooKeeperEnsemble(Cluster):
    """Three ZooKeeper servers; clients get every server's address (``zookeeper://H1:2181,H2:2181,H3:2181``)."""

    kind = "zookeeper-ensemble"
    store = "zookeeper"
    description = "three ZooKeeper servers (an ensemble); clients given every server's address"
    size = 3
    skewable_members = False
    #: ZooKeeper never fsyncs the folder of a transaction log it creates (ZOOKEEPER-2003): under the strict rules a power
    #: loss of every member drops each new log's name, and every transaction in it (AUDITS.md measured it); a journaling
    #: file system (ext4's default) commits the name with the log's first fsync, as for Postgres
    layer_names = "journaled"

    def _members(self, hosts: list[Host]) -> list[Member]:
        return [Member(h.name, h, EnsembleServer(self.directory / h.name, h, i, hosts)) for i, h in enumerate(hosts, 1)]

    @property
    def url(self) -> str:
        return "zookeeper://" + ",".join(f"{m.host.address}:{CLIENT_PORT}" for m in self.members.values())

    def server(self, name: str) -> EnsembleServer:
        found = self.members[name].server
        assert isinstance(found, EnsembleServer)
        return found

    def modes(self) -> dict[str, str | None]:
        """Each live member's role now (None: not serving), asked at once."""
        names = [n for n in self.members if n not in self.down]
        with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
            return dict(zip(names, pool.map(lambda n: self.server(n).mode(), names)))

    def primary(self) -> str | None:
        leaders = [name for name, mode in self.modes().items() if mode in ("leader", "standalone")]
        return leaders[0] if len(leaders) == 1 else None

    def _ready(self) -> bool:
        modes = sorted(str(mode) for mode in self.modes().values())
        return modes == ["follower"] * (self.size - 1) + ["leader"]

    def failover(self) -> dict[str, Any]:
        """Kill the leader (SIGKILL) and start it again on its data; wait until another member leads and all serve.

        Why a restart: ZooKeeper moves its leadership only by an election, and
        only dynamic reconfiguration (which this ensemble leaves off, as most
        deployments do) could ask for one; the old leader's death is what makes
        the others elect a new leader among themselves (the one with the
        newest data), and it comes back as a follower.
        """
        before = self.primary()
        if before is None:  # a cluster that cannot fail over now is what it did, not a harness failure: said, not raised
            return {"from": None, "to": None, "skipped": "no leader to fail over from"}
        self.kill_member(before)
        deadline = max(10.0, 10 * self.ttl_ms / 1000)
        after = poll(lambda: self.primary(), deadline, every=0.05)
        self.start_member(before)
        if after is None or after == before:
            return {"from": before, "to": None, "skipped": f"no other member took over from {before} in {deadline:g} s"}
        if not poll(self._ready, deadline, every=0.05):
            raise EnvironmentFailure(f"zookeeper-ensemble: {before} did not rejoin as a follower in {deadline:g} s")
        return {"from": before, "to": after}

