"""Who is primary, and how the store fails over, asked of the store on its members' own hosts.

Asked, never remembered: a Sentinel, a raft election or an HA manager moves the
primary on its own. Each question is the store's own command line, run on a
member's host against the member's local port (the ``client`` of the kind's
table in the deployment), so leasecheck needs no route to the store's ports and
no client library of its own:

========= ================================================ ============================================
store     primary                                          failover
========= ================================================ ============================================
redis     ``SENTINEL get-master-addr-by-name`` (with       ``SENTINEL FAILOVER`` (with ``sentinel``);
          ``sentinel``), else the one ``INFO replication``  none without Sentinel
          that says ``role:master``
postgres  the one member whose ``pg_is_in_recovery()`` is   the primary killed (STONITH, as Patroni),
          false                                            then ``pg_promote()`` on a standby
etcd      the member whose id is the leader's in           ``etcdctl move-leader`` to another member
          ``etcdctl endpoint status``
zookeeper the member whose ``srvr`` says ``Mode: leader``   none: ZooKeeper has no command for it
========= ================================================ ============================================

A member whose ``primary`` is a command of the team's own is asked that instead
(its first line: a member's name or address).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts.deployment import Deployment, MemberSpec
from leasecheck.hosts.protocol import Host, HostUnreachable
from leasecheck.waiting import poll

#: how long a failover may take to show (a Sentinel's election, a leadership transfer)
FAILOVER_WAIT_S = 30.0


class Members(Protocol):
    """What the store questions need of the cluster: its deployment, a host per member, who is down, a kill."""

    deployment: Deployment
    down: set[str]

    def host(self, name: str) -> Host: ...
    def kill_member(self, name: str) -> None: ...


def _live(cluster: Members) -> list[MemberSpec]:
    return [m for m in cluster.deployment.members if m.name not in cluster.down]


def _ask(cluster: Members, member: MemberSpec, argv: list[str], timeout: float = 5.0) -> str | None:
    """``argv``'s output on the member's host; None if it failed or the host did not answer (a paused or cut member)."""
    try:
        ran = cluster.host(member.name).run(argv, timeout=timeout)
    except HostUnreachable:
        return None
    return ran.out if ran.ok else None


def _ask_each(cluster: Members, argv: Callable[[MemberSpec], list[str]]) -> dict[str, str | None]:
    """Each live member's answer to its ``argv``, asked of all at once (a command over ssh costs ~0.1 s)."""
    live = _live(cluster)
    if not live:
        return {}
    with ThreadPoolExecutor(max_workers=len(live)) as pool:
        return dict(zip([m.name for m in live], pool.map(lambda m: _ask(cluster, m, argv(m)), live)))


def _client(cluster: Members, member: MemberSpec, key: str = "client") -> list[str]:
    """The store's command line from the deployment (``client``, ``sentinel``), ``{address}`` the member's address."""
    return shlex.split(str(cluster.deployment.option(key)).replace("{address}", member.address or "127.0.0.1"))


def member_named(cluster: Members, answer: str) -> str | None:
    """The member an answer names: by name, or by address (``10.0.0.11``, ``10.0.0.11:6379``)."""
    words = answer.split()
    if not words:
        return None
    first = words[0]
    for m in cluster.deployment.members:
        if first == m.name or (m.address is not None and first.rsplit(":", 1)[0] in (m.address, f"[{m.address}]")):
            return m.name
    return None


def primary(cluster: Members) -> str | None:
    """The primary now: a team's own command where a member has one, else the store kind's built-in question."""
    own = [m for m in _live(cluster) if m.primary != "builtin"]
    for member in own:
        said = _ask(cluster, member, ["sh", "-c", member.primary])
        if said:
            return member_named(cluster, said.splitlines()[0])
    if own:
        return None
    return BUILTIN[cluster.deployment.store][0](cluster)


def failover(cluster: Members) -> dict[str, Any]:
    """The store's own failover: ``{"from": old, "to": new}``; EnvironmentFailure for a kind that has none."""
    return BUILTIN[cluster.deployment.store][1](cluster)


# ---------------------------------------------------------------- redis


def _redis_primary(cluster: Members) -> str | None:
    if cluster.deployment.option("sentinel"):
        master = str(cluster.deployment.option("master-name"))
        for member in _live(cluster):
            said = _ask(cluster, member, [*_client(cluster, member, "sentinel"), "SENTINEL", "get-master-addr-by-name", master])
            if said:
                return member_named(cluster, said.splitlines()[0])
        return None
    infos = _ask_each(cluster, lambda m: [*_client(cluster, m), "INFO", "replication"])
    masters = [name for name, info in infos.items() if "role:master" in (info or "").split()]
    return masters[0] if len(masters) == 1 else None


def _redis_failover(cluster: Members) -> dict[str, Any]:
    if not cluster.deployment.option("sentinel"):
        raise EnvironmentFailure("redis: no built-in failover without Sentinel: give sentinel = \"redis-cli -p 26379\" "
                                 "in [redis] (or leave failover out of --nemesis)")
    old = _redis_primary(cluster)
    master = str(cluster.deployment.option("master-name"))
    for member in _live(cluster):
        if _ask(cluster, member, [*_client(cluster, member, "sentinel"), "SENTINEL", "FAILOVER", master]) == "OK":
            return {"from": old, "to": _moved(cluster, old, _redis_primary)}
    raise EnvironmentFailure(f"redis: no Sentinel took SENTINEL FAILOVER {master}")


def _moved(cluster: Members, old: str | None, ask: Callable[[Members], str | None]) -> str:
    """The new primary, once the store names one other than ``old``; EnvironmentFailure if none within the wait."""

    def moved() -> str | None:
        now = ask(cluster)
        return now if now is not None and now != old else None

    new = poll(moved, FAILOVER_WAIT_S, every=0.2)
    if new is None:
        raise EnvironmentFailure(f"{cluster.deployment.store}: the primary stayed {old} {FAILOVER_WAIT_S:g} s after "
                                 f"the failover")
    return new


# ---------------------------------------------------------------- postgres


def _in_recovery(cluster: Members) -> dict[str, str | None]:
    """Each live member's ``pg_is_in_recovery()``: ``t`` (a standby), ``f`` (writable), None (no answer)."""
    return _ask_each(cluster, lambda m: [*_client(cluster, m), "-At", "-c", "select pg_is_in_recovery()"])


def _postgres_primary(cluster: Members) -> str | None:
    primaries = [name for name, said in _in_recovery(cluster).items() if said == "f"]
    return primaries[0] if len(primaries) == 1 else None


def _postgres_failover(cluster: Members) -> dict[str, Any]:
    """As Patroni on a lost primary: kill it first (two writable primaries are never made), promote a standby."""
    said = _in_recovery(cluster)
    writable = [name for name, answer in said.items() if answer == "f"]
    old = writable[0] if len(writable) == 1 else None
    standbys = [cluster.deployment.member(name) for name, answer in said.items() if answer == "t"]
    if old is None or not standbys:
        return {"to": None, "primary": old, "skipped": "no primary, or no standby answering, to fail over to"}
    cluster.kill_member(old)
    new = standbys[0]
    promoted = _ask(cluster, new, [*_client(cluster, new), "-At", "-c", "select pg_promote(true, 10)"], timeout=15.0)
    if promoted != "t":
        raise EnvironmentFailure(f"postgres: promoting {new.name} failed (it said {promoted!r}); {old} was killed")
    return {"from": old, "to": new.name}


# ---------------------------------------------------------------- etcd


def _etcd_status(cluster: Members, member: MemberSpec) -> tuple[int, int] | None:
    """(this member's id, the leader's id) as the member sees them."""
    said = _ask(cluster, member, [*_client(cluster, member), "endpoint", "status", "-w", "json"])
    try:
        status = json.loads(said or "")[0]["Status"]
        return int(status["header"]["member_id"]), int(status["leader"])
    except (ValueError, LookupError, TypeError):
        return None


def _etcd_primary(cluster: Members) -> str | None:
    for member in _live(cluster):
        status = _etcd_status(cluster, member)
        if status is not None and status[0] == status[1]:
            return member.name
    return None


def _etcd_failover(cluster: Members) -> dict[str, Any]:
    old = _etcd_primary(cluster)
    if old is None:
        return {"to": None, "primary": None, "skipped": "no leader to move"}
    for member in _live(cluster):
        status = _etcd_status(cluster, member) if member.name != old else None
        if status is not None:
            leader = cluster.deployment.member(old)
            said = _ask(cluster, leader, [*_client(cluster, leader), "move-leader", f"{status[0]:x}"], timeout=15.0)
            if said is None:
                raise EnvironmentFailure(f"etcd: move-leader from {old} to {member.name} failed")
            return {"from": old, "to": _moved(cluster, old, _etcd_primary)}
    return {"to": None, "primary": old, "skipped": "no other member answering"}


# ---------------------------------------------------------------- zookeeper


def _zookeeper_primary(cluster: Members) -> str | None:
    port = str(cluster.deployment.option("port"))
    srvr = ("if command -v bash >/dev/null; then exec bash -c 'exec 3<>/dev/tcp/$0/$1; printf srvr >&3; cat <&3' "
            '"$1" "$2"; else printf srvr | nc "$1" "$2"; fi')

    def ask(m: MemberSpec) -> list[str]:
        return ["sh", "-c", srvr, "sh", str(cluster.deployment.option("host")).replace("{address}", m.address or ""), port]

    leaders = [name for name, said in _ask_each(cluster, ask).items() if "Mode: leader" in (said or "")]
    return leaders[0] if len(leaders) == 1 else None


def _zookeeper_failover(cluster: Members) -> dict[str, Any]:
    raise EnvironmentFailure("zookeeper: no built-in failover (ZooKeeper has no command to move its leader): "
                             "leave failover out of --nemesis; kill-primary makes the ensemble elect another")


#: how each kind fails over, in a few words (``leasecheck hosts check``)
FAILOVER_HOW = {"redis": "SENTINEL FAILOVER", "postgres": "kill the primary, then pg_promote() on a standby",
                "etcd": "etcdctl move-leader", "zookeeper": "none"}
#: each store kind's (primary, failover)
BUILTIN: dict[str, tuple[Callable[[Members], str | None], Callable[[Members], dict[str, Any]]]] = {
    "redis": (_redis_primary, _redis_failover),
    "postgres": (_postgres_primary, _postgres_failover),
    "etcd": (_etcd_primary, _etcd_failover),
    "zookeeper": (_zookeeper_primary, _zookeeper_failover),
}
