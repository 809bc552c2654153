"""Three etcd members (raft) on hosts of their own: the ``etcd-cluster`` kind.

Each member is :class:`EtcdMember`, the single server of :mod:`.etcd` moved
onto its host: client URL ``http://HOST:2379`` and peer URL ``http://HOST:2380``
on the host's own address, ``--initial-cluster`` naming all three, and the same
fast raft timing (``HEARTBEAT_MS`` / ``ELECTION_MS``), which is also what makes
etcd's shortest lease 1 s (1.5 election timeouts, rounded up to a second) so
that a lock with leasecheck's default ttl gets the lease it asks for. Every
acknowledged write is fsynced by a majority (etcd's default), so a lost commit
is the client's fault, not the configuration's.

No clock skew: etcd is Go, whose runtime reads the clock through the vDSO /
raw syscalls and never through libc, so libfaketime cannot reach it
(``skewable_members`` stays False). etcd's leases are timed by the leader's
monotonic clock in any case.

Who leads is asked of the members, not remembered: the v3 JSON gateway's
``POST /v3/maintenance/status`` gives each member's idea of the leader and its
own id; ``/v3/cluster/member/list`` maps ids to names; the answer a majority
gives is the leader (a member cut off from the others may still believe in
itself for an election timeout). A failover is etcd's own leadership transfer
(``/v3/maintenance/transfer-leadership``, ``etcdctl move-leader``'s RPC), sent
to the leader, which hands over within an election timeout.

etcd 3.4's defaults are kept, pre-vote off among them: a member cut off from
the others campaigns in vain, raising its term, and when the partition heals
that term makes the leader step down for one more election (which the
returning member, behind on the log, cannot win). Jepsen's etcd 3.4 runs saw
the same; etcd 3.5 turned pre-vote on.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from leasecheck.servers.cluster import Cluster, Member
from leasecheck.servers.etcd import ELECTION_MS, HEARTBEAT_MS, EtcdServer, etcd_healthy
from leasecheck.servers.hosts import Host
from leasecheck.waiting import poll

CLIENT_PORT = 2379
PEER_PORT = 2380
#: how long one status question may take: a member that does not answer in this is no vote
ASK_TIMEOUT_S = 0.5
#: how long a member may take to stop on SIGTERM before it is killed (see :meth:`EtcdMember.stop`)
STOP_GRACE_S = 1.0


def gateway(client_url: str, path: str, body: dict[str, Any] | None = None, timeout_s: float = ASK_TIMEOUT_S) -> Any:
    """POST ``body`` to etcd's v3 JSON gateway at ``client_url + path``; its JSON answer, or None if none came."""
    request = urllib.request.Request(
        f"{client_url}{path}", data=json.dumps(body or {}).encode(), headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return json.load(reply)
    except (OSError, ValueError, urllib.error.URLError):
        return None


class EtcdMember(EtcdServer):
    """One member of the cluster: named after its host, listening on the host's address only."""

    def __init__(self, directory: Path, host: Host, initial_cluster: str) -> None:
        super().__init__(directory, port=CLIENT_PORT, peer_port=PEER_PORT)
        self.host = host
        self.netns = host.netns
        self.initial_cluster = initial_cluster

    @property
    def url(self) -> str:
        return f"etcd://{self.host.address}:{self.port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.host.address}:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host.address}:{self.peer_port}"

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM, and SIGKILL after ``grace`` (1 s, where a lone etcd gets 10).

        A leader that is asked to stop first hands its leadership to the peer
        it has heard from longest and waits for the handover up to etcd's
        request timeout (6 s here). The last member of a cluster being stopped
        often picks a peer stopped a moment earlier, and waits all of it. Its
        own shutdown takes some 50 ms otherwise, and every write it acknowledged
        is already fsynced: killing it then loses nothing.
        """
        super().stop(grace)

    def _command(self) -> list[str]:
        # the initial-cluster flags only matter on the first start: a restart reads the membership from its data
        return [
            self.binary,
            "--name", self.host.name,
            "--data-dir", str(self.directory / "data"),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", "leasecheck",
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_MS),
            "--logger", "zap",
            "--log-outputs", "stderr",
        ]


class EtcdCluster(Cluster):
    """Three etcd members; clients get every member's client URL (``etcd://H1:2379,H2:2379,H3:2379``)."""

    kind = "etcd-cluster"
    store = "etcd"
    description = "three etcd members (raft); clients given every member's address"
    size = 3
    skewable_members = False

    def __init__(self, directory: Path, ttl_ms: int = 1000, skewable: bool = False) -> None:
        # skewable changes nothing: no member runs under libfaketime (the module docstring says why),
        # and skew_member says so if a run asks
        super().__init__(directory, ttl_ms, skewable)
        #: member id (decimal string, as the gateway writes uint64) -> member name; filled on first need
        self._names: dict[str, str] = {}

    def _members(self, hosts: list[Host]) -> list[Member]:
        initial = ",".join(f"{h.name}=http://{h.address}:{PEER_PORT}" for h in hosts)
        return [Member(h.name, h, EtcdMember(self.directory / h.name, h, initial)) for h in hosts]

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(f"{m.host.address}:{CLIENT_PORT}" for m in self.members.values())

    def server(self, name: str) -> EtcdMember:
        found = self.members[name].server
        assert isinstance(found, EtcdMember)
        return found

    # ---------------------------------------------------------------- who leads

    def _ids(self) -> dict[str, str]:
        """Member id -> name, from whichever member answers ``member/list`` (the ids never change)."""
        if len(self._names) < len(self.members):
            for name in self.members:
                listed = gateway(self.server(name).client_url, "/v3/cluster/member/list")
                if listed and listed.get("members"):
                    self._names = {str(m["ID"]): m.get("name", "") for m in listed["members"]}
                    break
        return self._names

    def _statuses(self) -> dict[str, dict[str, Any]]:
        """Each answering member's status (asked at once, ``ASK_TIMEOUT_S`` each)."""
        names = [n for n in self.members if n not in self.down]
        with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
            answers = pool.map(lambda n: gateway(self.server(n).client_url, "/v3/maintenance/status"), names)
        return {name: answer for name, answer in zip(names, answers) if answer}

    def primary(self) -> str | None:
        """The leader a majority of the members name now; None while no majority names the same one."""
        votes = Counter(str(s.get("leader", "0")) for s in self._statuses().values())
        votes.pop("0", None)
        if not votes:
            return None
        leader, count = votes.most_common(1)[0]
        if count <= self.size // 2:
            return None
        return self._ids().get(leader)

    def _ready(self) -> bool:
        return all(etcd_healthy(self.server(n).client_url, ASK_TIMEOUT_S) for n in self.members) and (
            self.primary() is not None
        )

    # ---------------------------------------------------------------- failover

    def failover(self) -> dict[str, Any]:
        """Move the leadership to the next live member (etcd's MoveLeader, sent to the leader); wait until it moved."""
        before = self.primary()
        if before is None:  # a cluster that cannot fail over now is what it did, not a harness failure: said, not raised
            return {"from": None, "to": None, "skipped": "no leader to move"}
        names = list(self.members)
        order = names[names.index(before) + 1:] + names[:names.index(before)]
        target = next((n for n in order if n not in self.down), None)
        if target is None:
            return {"from": before, "to": None, "skipped": "no live member to move the leadership to"}
        ids = {name: member_id for member_id, name in self._ids().items()}
        answer = gateway(self.server(before).client_url, "/v3/maintenance/transfer-leadership",
                         {"targetID": ids[target]}, timeout_s=max(2.0, 4 * ELECTION_MS / 1000))
        moved = poll(lambda: (self.primary() or before) != before, 5 * ELECTION_MS / 1000 + 2.0, every=0.05)
        if not moved:
            return {"from": before, "to": None, "skipped": f"the leadership did not leave {before} (transfer answered {answer})"}
        return {"from": before, "to": self.primary()}
