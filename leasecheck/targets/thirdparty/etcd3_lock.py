"""python-etcd3's ``Lock``, audited as its README shows it, and fenced by the lock key's revision.

``client.lock(name, ttl=...)`` puts ``/locks/NAME`` with a random uuid, attached
to a fresh etcd lease of ``ttl`` whole seconds, in a transaction that succeeds
only if the key does not exist; ``lock.refresh()`` keeps the lease alive;
``lock.release()`` deletes the key if it still holds our uuid. The lease is
kept by the etcd server (no client clock), so clock skew is not a fault here.

* :class:`Etcd3Lock` (``documented``): the lease is named by the lock's uuid,
  and the job's record and resource are plain etcd writes that trust the lock.
* :class:`RevisionEtcd3Lock` (``fenced-revision``): the fence is the lock key's
  ``create_revision``, read right after acquiring (and only if the key still
  holds our uuid). Every grant creates the key anew, so it grows with every
  grant, and every record and resource write is an etcd transaction that
  refuses a fence below the one stored.

The records live in the same etcd (:class:`EtcdRecords`): a JSON record per
node at ``leasecheck/record/NODE`` and one key per effect under
``leasecheck/effect/NODE/``. A fenced write is a compare-and-swap on the
record's ``mod_revision``, retried until it applies or a larger fence is seen.

On a cluster (``etcd://H1:2379,H2:2379,H3:2379``, the ``etcd-cluster`` kind)
the one client is given every member (:func:`cluster_target`) and spreads its
requests over those that are up; every member serves linearizable reads and
forwards writes to the leader, so which one a request reaches changes nothing
but whether it can be answered (a member cut off from the majority cannot).

What the audits found there (AUDITS.md, "On a cluster"): the revision fence holds
under every member fault; a lock outlives its TTL after a leader change, because
etcd's new leader refreshes every lease to its full TTL (lessor ``Promote``) and
no lease is revoked while no majority has a leader: ``stuck-lease``, liveness
only, published as such for ``failover`` (documented); the fenced lock is published
valid with a minority of members cut off (``partition-halves``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.parse
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# python-etcd3 0.12's generated protobuf modules predate protobuf 4's C++/upb runtime,
# which refuses them ("Descriptors cannot be created directly"); the pure-Python
# runtime still loads them. Set before etcd3 (and so protobuf) is imported: here, so that
# it holds wherever etcd3 is imported after this module (the workers' zygote preloads it).
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
# The harness forks store servers (kill-store's restart) and Toxiproxy while its own client
# (the producer's) holds a gRPC channel; with gRPC's fork support on (grpcio's default) the
# forked child runs gRPC's at-fork handlers before it execs, and aborts (SIGABRT: etcd "exited
# with code -6"). Workers are spawned, never forked, and no channel crosses a fork: turn it off.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from leasecheck.histories.vocabulary import READY, AnomalyKind
from leasecheck.targets.base import Indeterminate, TargetConfig, Unavailable
from leasecheck.targets.thirdparty.audit import AuditPlan, FaultAudit
from leasecheck.targets.thirdparty.lockbase import Held, LockLease, Record
from leasecheck.targets.urls import hosts_of

if TYPE_CHECKING:
    import grpc

#: gRPC retries a lost connection with exponential backoff up to 2 minutes by default;
#: after a partition heals or the store restarts, the client must come back within a lease
GRPC_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

#: a client of a cluster spreads its requests over every member, as etcd's own Go client does (clientv3's
#: round-robin balancer): a member that is cut off from the others (and so cannot commit) then costs the
#: requests sent to it, not every request until the partition heals, as gRPC's default (pick_first) would
CLUSTER_GRPC_OPTIONS = [*GRPC_OPTIONS, ("grpc.lb_policy_name", "round_robin")]

PREFIX = "leasecheck/"

#: what a zombie holder's plain writes show as (each invalid run shows some of these)
ZOMBIE_WRITES: tuple[AnomalyKind, ...] = ("duplicate-commit", "lost-commit", "stale-commit", "stale-effect")

#: the audits' run settings. A 1 s lease: etcd's shortest with the election timeout of
#: :class:`leasecheck.servers.etcd.EtcdServer`. A clock uncertainty of 600 ms: etcd revokes
#: expired leases from a loop that runs every 500 ms (lessor.go's runLoop), so a lock outlives
#: its TTL by up to half a second plus the revoke's raft commit; at the default 10 ms a correct
#: lock shows ``stuck-lease`` in about half the runs. Faults every 1.5 s (± half), so a 6 s run
#: sees several.
AUDIT_OPTIONS: dict[str, Any] = {"ttl_ms": 1000, "clock_uncertainty_ms": 600.0, "nemesis_interval": 1.5}


def _etcd3() -> Any:
    """python-etcd3, imported on first use: listing the backends must load neither it nor gRPC."""
    with warnings.catch_warnings():  # its generated code uses protobuf's deprecated descriptor API: their matter, not ours
        warnings.simplefilter("ignore", DeprecationWarning)
        import etcd3
        import etcd3.exceptions
    return etcd3


def _grpc_error(e: BaseException) -> grpc.RpcError | None:
    """The gRPC error behind an etcd3 exception (etcd3 raises its own class from inside the handler)."""
    import grpc

    while e is not None and not isinstance(e, grpc.RpcError):
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return e


def _details(e: BaseException) -> str:
    rpc = _grpc_error(e)
    if rpc is None or not hasattr(rpc, "code"):
        return f"{type(e).__name__}: {e}"
    return f"{rpc.code().name}: {rpc.details()}"


def cluster_target(url: str) -> tuple[str, int]:
    """``etcd3.client``'s (host, port) for every member of ``etcd://H1:P1,H2:P2,...``: one gRPC channel to all.

    python-etcd3 0.12 (the release on PyPI) takes one host and port and makes the
    channel to ``f"{host}:{port}"``; its ``MultiEndpointEtcd3Client`` exists only
    on its unreleased master branch. gRPC itself takes a list of addresses
    (its naming doc: ``ipv4:ADDR:PORT,ADDR:PORT,...``) and follows it: a
    member that is down is skipped, and a request goes to one that is up. So
    the list is handed over as the host, the last member's port as the port.
    Names are resolved here (the ``ipv4:`` scheme takes addresses only).
    """
    members = [(socket.gethostbyname(host), port) for host, port in hosts_of(url)]
    *first, (last_host, last_port) = members
    return "ipv4:" + "".join(f"{host}:{port}," for host, port in first) + last_host, last_port


@contextmanager
def etcd_errors(what: str) -> Iterator[None]:
    """Map etcd3 / gRPC errors onto the protocol: Unavailable only if the request was never sent.

    gRPC fails a call at once with "failed to connect to all addresses" when its
    channel has no connection to send it on; any other UNAVAILABLE (a socket
    closed mid-call) or a DEADLINE_EXCEEDED may come after the server applied it.
    """
    etcd3 = _etcd3()
    import grpc

    try:
        yield
    except etcd3.exceptions.ConnectionFailedError as e:
        details = _details(e)
        if "failed to connect to all addresses" in details:
            raise Unavailable(f"{what}: {details}") from e
        raise Indeterminate(f"{what}: {details}") from e
    except (etcd3.exceptions.Etcd3Exception, grpc.RpcError) as e:
        raise Indeterminate(f"{what}: {_details(e)}") from e


@dataclass
class Connection:
    """One etcd3 client per process, made on first use: workers are spawned, and a gRPC channel never crosses a fork."""

    url: str
    timeout_s: float
    _client: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                parts = urllib.parse.urlsplit(self.url)
                if parts.scheme != "etcd" or not parts.netloc:
                    raise ValueError(f"an etcd3 target needs an etcd://HOST:PORT url, not {self.url!r}")
                if "," in parts.netloc:  # a cluster: every member's address
                    self._client = _etcd3().client(
                        *cluster_target(self.url), timeout=self.timeout_s, grpc_options=CLUSTER_GRPC_OPTIONS,
                    )
                else:
                    if not parts.hostname:
                        raise ValueError(f"an etcd3 target needs an etcd://HOST:PORT url, not {self.url!r}")
                    self._client = _etcd3().client(
                        parts.hostname, parts.port or 2379, timeout=self.timeout_s, grpc_options=GRPC_OPTIONS,
                    )
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


@dataclass
class EtcdRecords:
    """The jobs' records and resource in etcd; fenced writes are transactions on the record's mod_revision."""

    conn: Connection

    @staticmethod
    def key(node: str) -> str:
        return f"{PREFIX}record/{node}"

    def setup(self) -> None:
        with etcd_errors("status"):
            self.conn.client.status()

    def add_nodes(self, nodes: list[str]) -> None:
        client = self.conn.client
        ready = json.dumps({"status": READY})
        with etcd_errors("add_nodes"):
            for node in nodes:  # each only if absent: one transaction per node (a compare covers the whole txn)
                key = self.key(node)
                client.transaction(
                    compare=[client.transactions.create(key) == 0],
                    success=[client.transactions.put(key, ready)], failure=[],
                )

    def _load(self, node: str) -> tuple[dict[str, Any] | None, int]:
        """The record's fields and its mod_revision (0: no record)."""
        value, meta = self.conn.client.get(self.key(node))
        if value is None:
            return None, 0
        return json.loads(value), int(meta.mod_revision)

    def get(self, node: str) -> Record | None:
        with etcd_errors("get"):
            fields, _ = self._load(node)
        return None if fields is None else Record(**fields)

    def put(self, node: str, changes: dict[str, Any], fence: int | None = None) -> bool:
        client = self.conn.client
        key = self.key(node)
        with etcd_errors("put"):
            while True:
                fields, revision = self._load(node)
                fields = dict(fields or {"status": READY})
                if fence is not None and (fields.get("fence") or 0) > fence:
                    return False
                fields.update(changes)
                if fence is not None:
                    fields["fence"] = fence
                value = json.dumps(fields)
                if fence is None:  # unfenced: a plain write that trusts the lock
                    client.put(key, value)
                    return True
                applied, _ = client.transaction(
                    compare=[client.transactions.mod(key) == revision],
                    success=[client.transactions.put(key, value)], failure=[],
                )
                if applied:
                    return True

    def append_effect(self, node: str, token: str, payload: str, fence: int | None = None) -> bool:
        client = self.conn.client
        key = self.key(node)
        entry = f"{PREFIX}effect/{node}/{uuid.uuid4().hex}"
        value = json.dumps({"token": token, "payload": payload, "fence": fence})
        with etcd_errors("append_effect"):
            if fence is None:
                client.put(entry, value)
                return True
            while True:  # written iff no larger fence wrote the record, and the record's fence raised to ours
                fields, revision = self._load(node)
                fields = dict(fields or {"status": READY})
                if (fields.get("fence") or 0) > fence:
                    return False
                writes = [client.transactions.put(entry, value)]
                if fields.get("fence") != fence:
                    writes.append(client.transactions.put(key, json.dumps({**fields, "fence": fence})))
                applied, _ = client.transaction(
                    compare=[client.transactions.mod(key) == revision], success=writes, failure=[],
                )
                if applied:
                    return True

    def effects(self, node: str) -> list[dict[str, Any]]:
        """The node's resource, oldest first (what an auditor reads back; the runs never do)."""
        with etcd_errors("effects"):
            found = list(self.conn.client.get_prefix(f"{PREFIX}effect/{node}/"))
        found.sort(key=lambda item: item[1].create_revision)
        return [json.loads(value) for value, _ in found]

    def close(self) -> None:
        self.conn.close()


class Etcd3Lock(LockLease):
    """python-etcd3's Lock as its README shows it (lease TTL, refresh), unfenced: a paused holder still writes."""

    name = "etcd3-lock"
    fenced = False
    store = "etcd"
    requires = ("etcd3",)
    extra = "audit"
    audit = AuditPlan(
        library="etcd3",
        mode="documented",
        faults=(
            FaultAudit("pause", "invalid", ZOMBIE_WRITES),
            # a killed holder writes nothing: its stale writes under kill were all by workers that stalled
            # on their own (reported apart, as invalid without the fault), never by a kill's victim
            FaultAudit("kill", "valid"),
            # a frozen etcd cannot revoke: a lease past its TTL keeps its key until the lessor runs again
            FaultAudit("pause-store", "invalid", (*ZOMBIE_WRITES, "stuck-lease")),
            # on the cluster: every leadership transfer makes the new leader refresh every lease to its full TTL
            # (etcd's lessor Promote), so a lock whose holder stopped refreshing just before it outlives ttl plus
            # the uncertainty: stuck-lease (liveness) in every seed. The zombie writes some runs show beside it are
            # the workload's own stalls: a member fault hits every process, so the audit cannot report them apart
            FaultAudit("failover", "invalid", (*ZOMBIE_WRITES, "stuck-lease"), cluster="etcd-cluster"),
        ),
        seeds=(1, 2, 3, 4, 5),
        fix="The lock's lease runs out while a paused holder still believes it holds the lock, and etcd takes its "
        "plain writes: read the lock key's create_revision after acquiring and make every write a transaction "
        "that refuses a smaller one (the fenced-revision mode).",
        time_limit=8.0,
        # every holder a pause outlives goes on as a zombie: the pause's own finding, whatever the workload's stalls do
        options={**AUDIT_OPTIONS, "workload": {"zombie_rate": 1.0}},
    )

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        if ttl_ms < 1000 or ttl_ms % 1000:
            return f"etcd leases last whole seconds: --ttl must be a multiple of 1000 ms, not {ttl_ms}"
        return None

    def __init__(self, config: TargetConfig) -> None:
        if (problem := self.ttl_problem(config.ttl_ms)) is not None:
            raise ValueError(problem)
        #: the lease's TTL in seconds, exactly ttl_ms
        self.ttl_s = config.ttl_ms // 1000
        self.conn = Connection(config.url, config.timeout_s)
        super().__init__(config)

    def make_records(self) -> EtcdRecords:
        return EtcdRecords(self.conn)

    def acquire(self, node: str, owner: str) -> Held | None:
        lock = self.conn.client.lock(f"{PREFIX}{node}", ttl=self.ttl_s)
        with etcd_errors("lock.acquire"):
            try:
                # timeout=0: the documented "don't wait" (acquire's timeout is "the number of seconds").
                acquired = lock.acquire(timeout=0)
            except TypeError:
                # etcd3 0.12 retries a taken lock through tenacity with a wait callback of
                # tenacity's old two-argument form; today's tenacity calls it with one, so a
                # contended acquire raises TypeError (after its transaction found the key taken)
                # where the docs promise False.
                acquired = False
        if not acquired:
            return None
        if lock.lease.ttl != self.ttl_s:  # etcd raises a TTL below its minimum (1.5 election timeouts) silently
            self._let_go(Held(lock, ""))
            raise ValueError(f"etcd granted a {lock.lease.ttl} s lease for a {self.ttl_s} s lock: use a larger ttl_ms")
        return Held(lock, str(uuid.UUID(bytes=lock.uuid)))

    def extend(self, held: Held) -> bool:
        with etcd_errors("lock.refresh"):
            replies = held.lock.refresh()
        return bool(replies) and replies[0].TTL > 0  # an expired (or revoked) lease refreshes to TTL 0

    def unlock(self, held: Held) -> None:
        with etcd_errors("lock.release"):
            held.lock.release()


class RevisionEtcd3Lock(Etcd3Lock):
    """python-etcd3's Lock fenced by the lock key's create_revision: every write refuses a smaller one."""

    name = "etcd3-lock-revision"
    fenced = True
    effect_fence = "lease"
    audit = AuditPlan(
        library="etcd3",
        mode="fenced-revision",
        faults=(
            FaultAudit("pause", "valid"),
            FaultAudit("kill", "valid"),
            FaultAudit("partition", "valid"),
            # a random minority cut off: valid on seeds 1-3, twice (never a stale write; each claim the cut stalled is
            # counted as attempted). Measured, not published, as their verdicts change between seeds: partition-bridge
            # (valid, stuck-lease, or unknown with no contended claim: the cut-off member campaigns in vain, etcd 3.4
            # having no pre-vote, and may depose the leader, whose successor refreshes every lease: lessor Promote);
            # kill-primary (stuck-lease in 2 of 3 seeds, valid in 1, for the same refresh)
            FaultAudit("partition-halves", "valid", cluster="etcd-cluster"),
        ),
        seeds=(1, 2, 3, 4, 5),
        fix="Valid: a zombie's writes carry its lock key's create_revision, and every etcd transaction refuses it "
        "once a newer grant has written. (Store faults are not published: after a frozen or restarted etcd, a "
        "lock may outlive its TTL, a stuck-lease that harms liveness only, in some runs and not others.) On the "
        "etcd-cluster: no stale write under any member fault, valid with a minority cut off; after a change of leader a "
        "lock may outlive its TTL (stuck-lease only: a new leader refreshes every lease), never a stale write.",
        time_limit=6.0,
        options=AUDIT_OPTIONS,
    )

    def acquire(self, node: str, owner: str) -> Held | None:
        held = super().acquire(node, owner)
        if held is None:
            return None
        try:
            with etcd_errors("get the lock's revision"):
                value, meta = self.conn.client.get(held.lock.key)
        except BaseException:
            self._let_go(held)
            raise
        if value != held.lock.uuid:  # lost already (expired, taken again): the revision there is not ours
            return None
        held.fence = int(meta.create_revision)
        return held
