"""A Redis primary, two replicas and three Sentinels, one host each: the ``redis-sentinel`` cluster kinds.

Each member is a host (:mod:`.hosts`) running a redis-server on ``ADDRESS:6379``
and a Sentinel on ``ADDRESS:26379``, the Sentinel its companion: a kill, a
pause or a partition of the member reaches both, as a crashed or cut-off
machine would. ``m1`` starts as the primary, ``m2`` and ``m3`` as its replicas;
from then on the Sentinels decide, and :meth:`RedisSentinelCluster.primary` asks
them (the majority answer), never remembers.

Both servers read a config file in the member's folder, as a deployment's do:
Sentinel rewrites its own (the epoch, the current primary, the peers it knows),
and a redis-server reconfigured by Sentinel (``REPLICAOF``, then ``CONFIG
REWRITE``) restarts after a kill as what Sentinel made it, not as what it was
at first.

What is sized, and why:

* the failure detector, ``down-after-milliseconds``, is the run's lease (never
  under :data:`MIN_DOWN_AFTER_MS`): a Sentinel slower than a lease would fail
  over only after every lease on the dead primary has long expired, and no
  lease would be at risk;
* ``failover-timeout`` is short (a few leases): it bounds the election and the
  wait before a replica that follows the wrong primary is put right;
* replication notices a cut link within ``repl-timeout`` (2 s, pinged every
  second), not Redis' default minute, and a replica syncs at once
  (``repl-diskless-sync-delay 0``, not 5 s), so the cluster starts in about a second;
* every address anyone is told is the host's (``replica-announce-ip``,
  ``sentinel announce-ip``), and the Sentinels are given each other's ids and the
  replicas up front (``known-sentinel``, ``known-replica``), so a failover finds its
  quorum from the first second instead of after the first hello messages.

Clock skew (``clock-member``): only the member's redis-server runs under
libfaketime, never its Sentinel. The clock under test is the one the lease
scripts read (``TIME``); a Sentinel whose wall clock steps enters TILT mode and
does nothing for 30 s, which would add a second fault (a blind Sentinel) to the
one the nemesis names. :meth:`RedisSentinelCluster.skew_member` skews the store alone.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from leasecheck.errors import EnvironmentFailure
from leasecheck.servers.base import LocalServer, StrPath
from leasecheck.servers.cluster import Cluster, Member
from leasecheck.servers.faketime import FaketimeRedisServer
from leasecheck.servers.hosts import Host
from leasecheck.servers.redis import DURABLE_ARGS, RedisServer, find_redis_server
from leasecheck.waiting import poll

if TYPE_CHECKING:
    import redis

#: the service name the Sentinels monitor, and the path of the cluster's URL
SERVICE = "leasecheck"
REDIS_PORT = 6379
SENTINEL_PORT = 26379
#: Sentinels that must agree the primary is down before one of them fails over
QUORUM = 2
#: the shortest failure detector: below it, Sentinels on a loaded 2-core machine flap (measured)
MIN_DOWN_AFTER_MS = 500
#: how long the harness waits for one answer from a member (a paused one must not hang it)
ASK_TIMEOUT_S = 0.5

T = TypeVar("T")
log = logging.getLogger("leasecheck.servers")


def client(address: str, port: int, timeout_s: float = ASK_TIMEOUT_S) -> redis.Redis:
    """A short-lived client of one server, for the harness's own questions: short timeouts, no retries."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(address, port, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                       retry=Retry(NoBackoff(), 0), decode_responses=True, protocol=2)


def ask(address: str, port: int, question: Callable[[redis.Redis], T]) -> T | None:
    """``question`` put to one server; None if it does not answer (down, paused, cut off) or errs."""
    import redis

    c = client(address, port)
    try:
        return question(c)
    except redis.RedisError:
        return None
    finally:
        c.close()


class MemberRedis(RedisServer):
    """redis-server as a member: on its host's address, reached from other hosts, configured by a file.

    ``address`` and ``settings`` are set by the cluster before the first start;
    the file is written once, so the role Sentinel gave the server survives a restart.
    """

    address = "127.0.0.1"
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        return f"redis://{self.address}:{self.port}/0"

    @property
    def config_path(self) -> Path:
        return self.directory / "redis.conf"

    def _prepare(self) -> None:
        if self.config_path.exists():
            return
        durable = list(zip(DURABLE_ARGS[::2], DURABLE_ARGS[1::2], strict=True))
        lines = [f"{key.removeprefix('--')} {_quoted(value)}" for key, value in [
            ("bind", self.address), ("port", str(self.port)), ("dir", str(self.directory)),
            ("daemonize", "no"), ("logfile", ""), ("protected-mode", "no"), *durable,
            ("replica-announce-ip", self.address), *self.settings,
        ]]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _command(self) -> list[str]:
        return [self.binary, str(self.config_path)]


class FaketimeMemberRedis(FaketimeRedisServer, MemberRedis):
    """A member's redis-server under libfaketime (``clock-member``)."""


class SentinelServer(LocalServer):
    """A Sentinel (``redis-server CONFIG --sentinel``) on its host's address; it rewrites its config file itself."""

    kind = "sentinel"

    def __init__(self, directory: StrPath, address: str, config: str, binary: StrPath | None = None) -> None:
        self.binary = find_redis_server(binary)
        self.address = address
        self.config = config
        super().__init__(directory, SENTINEL_PORT)

    @property
    def url(self) -> str:
        return f"redis://{self.address}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "sentinel.conf"

    def _prepare(self) -> None:
        if not self.config_path.exists():  # after a restart Sentinel reads what it last wrote
            self.config_path.write_text(self.config)

    def _command(self) -> list[str]:
        return [self.binary, str(self.config_path), "--sentinel"]

    @property
    def log_path(self) -> Path:  # on its member's power-loss layer: beside its redis-server's log, apart from it
        return self.directory.with_name(f"{self.directory.name}.sentinel.log") if self.layer is not None else super().log_path

    def _ready(self) -> bool:
        return ask(self.address, self.port, lambda c: c.ping()) is True


def _quoted(value: str) -> str:
    return f'"{value}"' if value == "" or " " in value else value


class RedisSentinelCluster(Cluster):
    """A primary (m1), two asynchronous replicas and a Sentinel on every member (quorum 2)."""

    kind = "redis-sentinel"
    store = "redis"
    description = "a Redis primary, two replicas (asynchronous replication) and three Sentinels, one host each"
    skewable_members = True
    #: the URL's query: what the clients add (``?wait=1`` in the WAIT kind)
    url_query: ClassVar[str] = ""

    @property
    def down_after_ms(self) -> int:
        return max(MIN_DOWN_AFTER_MS, self.ttl_ms)

    @property
    def failover_timeout_ms(self) -> int:
        return max(2000, 3 * self.ttl_ms)

    @property
    def url(self) -> str:
        assert self.network is not None, "the cluster is not started"
        sentinels = ",".join(f"{host.address}:{SENTINEL_PORT}" for host in self.network.hosts)
        return f"redis+sentinel://{sentinels}/{SERVICE}{self.url_query}"

    def redis_settings(self) -> list[tuple[str, str]]:
        """Every member's redis-server settings beyond the durable ones (the replicas' ``replicaof`` apart)."""
        return [
            ("repl-diskless-sync-delay", "0"),
            ("repl-ping-replica-period", "1"),
            ("repl-timeout", str(max(2, math.ceil(2 * self.ttl_ms / 1000)))),
        ]

    def _members(self, hosts: list[Host]) -> list[Member]:
        primary = hosts[0]
        ids = {host.name: secrets.token_hex(20) for host in hosts}
        members = []
        for host in hosts:
            folder = self.directory / host.name
            server: MemberRedis = FaketimeMemberRedis(folder, REDIS_PORT) if self.skewable else MemberRedis(folder, REDIS_PORT)
            server.address = host.address
            role = [] if host is primary else [("replicaof", f"{primary.address} {REDIS_PORT}")]
            server.settings = (*self.redis_settings(), *role)
            server.netns = host.netns
            sentinel = SentinelServer(folder, host.address, self._sentinel_config(host, hosts, ids))
            sentinel.netns = host.netns
            members.append(Member(host.name, host, server, (sentinel,)))
        return members

    def _sentinel_config(self, host: Host, hosts: list[Host], ids: dict[str, str]) -> str:
        primary = hosts[0]
        lines = [
            f"port {SENTINEL_PORT}", f"bind {host.address}", "protected-mode no", "daemonize no", 'logfile ""',
            f"dir {self.directory / host.name}",
            "sentinel resolve-hostnames no", f"sentinel announce-ip {host.address}", f"sentinel myid {ids[host.name]}",
            f"sentinel monitor {SERVICE} {primary.address} {REDIS_PORT} {QUORUM}",
            f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}",
            f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {SERVICE} 1",
            *(f"sentinel known-replica {SERVICE} {h.address} {REDIS_PORT}" for h in hosts if h is not primary),
            *(f"sentinel known-sentinel {SERVICE} {h.address} {SENTINEL_PORT} {ids[h.name]}" for h in hosts if h is not host),
        ]
        return "\n".join(lines) + "\n"

    def start_members(self, names: Iterable[str]) -> None:
        """The members' redis-servers first, then their Sentinels (each set in parallel), at the start as after an outage.

        A Sentinel started beside a primary not yet listening has its first
        connection refused and retries a second later; two such Sentinels
        (a quorum) saw the primary subjectively down at start-up, one step from
        a failover nobody asked for.
        """
        members = [self.members[name] for name in names]
        for servers in ([m.server for m in members], [s for m in members for s in m.companions]):
            with ThreadPoolExecutor(max_workers=len(servers)) as pool:
                for future in [pool.submit(server.start) for server in servers]:
                    future.result()
        self.down.difference_update(m.name for m in members)

    def stop(self) -> None:
        """Every server at once, then the hosts: a primary told to stop waits (up to a second, measured) for
        its replicas to acknowledge its last writes, a wait that stopping them alongside cuts short."""
        def stop_one(server: LocalServer) -> None:
            try:
                server.resume()
                server.stop()
            except Exception as e:  # go on: the hosts must go
                log.warning("%s: stopping %s: %s", self.kind, server.directory.name, e)

        servers = [server for member in self.members.values() for server in member.servers]
        if servers:
            with ThreadPoolExecutor(max_workers=len(servers)) as pool:
                list(pool.map(stop_one, servers))
        super().stop()  # the servers are down: it closes the network

    # ------------------------------------------------------------ questions

    def _live(self) -> list[Member]:
        return [m for name, m in self.members.items() if name not in self.down]

    def _ask_all(self, port: int, question: Callable[[redis.Redis], T]) -> dict[str, T | None]:
        """``question`` put to every live member's server on ``port`` at once: the answers by member."""
        live = self._live()
        if not live:
            return {}
        with ThreadPoolExecutor(max_workers=len(live)) as pool:
            futures = {m.name: pool.submit(ask, m.host.address, port, question) for m in live}
            return {name: future.result() for name, future in futures.items()}

    def _member_at(self, address: str) -> str | None:
        return next((name for name, m in self.members.items() if m.host.address == address), None)

    def primary(self) -> str | None:
        """The member a majority of the Sentinels name as primary now; None without a majority."""
        answers = self._ask_all(SENTINEL_PORT, lambda c: c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE))
        named = Counter(self._member_at(str(a[0])) for a in answers.values() if a)
        if not named:
            return None
        name, votes = named.most_common(1)[0]
        return name if votes > self.size // 2 else None

    def role(self, name: str) -> dict[str, str] | None:
        """One member's ``INFO replication`` (role, master_host, master_link_status ...); None if it does not answer."""
        m = self.members[name]
        return ask(m.host.address, REDIS_PORT, lambda c: {k: str(v) for k, v in c.info("replication").items()})

    def _ready(self) -> bool:
        """Every Sentinel names the same primary, knows both replicas and both other Sentinels; the replicas are in sync."""
        primary = self.primary()
        if primary is None:
            return False
        views = self._ask_all(SENTINEL_PORT, _sentinel_view)
        if not all(view == (primary, 2, 2) for view in (_named(v, self._member_at) for v in views.values())):
            return False
        for name in self.members:
            if name in self.down or name == primary:
                continue
            info = self.role(name)
            if info is None or info.get("master_link_status") != "up" or self._member_at(info.get("master_host", "")) != primary:
                return False
        return True

    # ------------------------------------------------------------ faults

    def failover(self) -> dict[str, Any]:
        """``SENTINEL FAILOVER`` on a live Sentinel; wait until the failover has ended with another primary.

        Ended, not only announced: the Sentinel that leads a failover holds it
        open until the other replica follows the promoted one, and a failover
        held open that way never ends if the promoted primary dies meanwhile
        (Sentinel waits for it to be reachable, measured: a kill one second
        after ``+switch-master`` left the cluster without a primary until the
        member came back). The next fault starts from a settled cluster.

        A failover the Sentinels refuse (no good replica yet, one in progress: a primary
        restarted a moment ago is still being turned into a replica) or that does not end
        in time is what the cluster did, not a harness failure: the event says so
        (``"to": None``, ``"skipped"``) and the run goes on.
        """
        import redis

        old = self.primary()
        refusals = []
        for m in self._live():
            c = client(m.host.address, SENTINEL_PORT)
            try:
                c.execute_command("SENTINEL", "FAILOVER", SERVICE)
                break
            except redis.RedisError as e:  # INPROG, NOGOODSLAVE, or no answer: the next Sentinel
                refusals.append(f"{m.name}: {e}")
            finally:
                c.close()
        else:
            log.info("%s: no Sentinel accepted SENTINEL FAILOVER: %s", self.kind, "; ".join(refusals))
            return {"from": old, "to": None, "skipped": f"no Sentinel accepted SENTINEL FAILOVER: {'; '.join(refusals)}"[:300]}
        started = time.monotonic()

        def ended() -> str | None:
            new = self.primary()
            if new in (None, old):
                return None
            views = [v for v in self._ask_all(SENTINEL_PORT, _sentinel_view).values() if v is not None]
            return new if all(self._member_at(v[0]) == new and "failover_in_progress" not in v[3] for v in views) else None

        new = poll(ended, max(10.0, 10 * self.ttl_ms / 1000), every=0.05)
        if new is None:
            why = f"SENTINEL FAILOVER did not end with a primary other than {old} within {time.monotonic() - started:.1f} s"
            log.info("%s: %s", self.kind, why)
            return {"from": old, "to": None, "skipped": why}
        return {"from": old, "to": new}

    def skew_member(self, name: str, offset_ms: float) -> None:
        """Skew the member's redis-server only (its Sentinel would go blind in TILT mode: see the module docstring)."""
        server = self.members[name].server
        if not isinstance(server, FaketimeMemberRedis):
            raise EnvironmentFailure(f"{self.kind}: member {name} does not run under libfaketime (start it skewable)")
        server.skew(offset_ms)


def _sentinel_view(c: redis.Redis) -> tuple[str, int, int, str]:
    """(primary's address, replicas known, other Sentinels up, the primary's flags) as one Sentinel sees them."""
    master = c.execute_command("SENTINEL", "MASTER", SERVICE)
    fields = dict(zip(master[::2], master[1::2], strict=True)) if isinstance(master, list) else dict(master)
    peers = c.execute_command("SENTINEL", "SENTINELS", SERVICE)
    up = sum(1 for p in peers if dict(zip(p[::2], p[1::2], strict=True)).get("flags") == "sentinel")
    return str(fields["ip"]), int(fields["num-slaves"]), up, str(fields["flags"])


def _named(view: tuple[str, int, int, str] | None, member_at: Callable[[str], str | None]) -> tuple[str | None, int, int] | None:
    if view is None or view[3] != "master":
        return None
    return member_at(view[0]), view[1], view[2]


class RedisSentinelWaitCluster(RedisSentinelCluster):
    """``redis-sentinel`` whose primary refuses writes without a replica in sync, and whose clients WAIT for one."""

    kind = "redis-sentinel-wait"
    description = "redis-sentinel with min-replicas-to-write 1, and clients that WAIT for a replica after every write"
    url_query = "?wait=1"
    #: seconds since a replica's last acknowledgement after which it no longer counts (replicas ack every second)
    MAX_LAG_S = 1

    def redis_settings(self) -> list[tuple[str, str]]:
        return [*super().redis_settings(), ("min-replicas-to-write", "1"), ("min-replicas-max-lag", str(self.MAX_LAG_S))]
