"""python-etcd3's client as leasecheck's etcd adapters use it: one connection per worker, and the records in etcd.

Apart from the lock adapters (:mod:`.etcd3_lock`) because every etcd adapter needs the same
plumbing: the environment python-etcd3 0.12 needs before it is imported, the gRPC options that
bring a client back within a lease, an address list for a cluster (``etcd://H1:2379,H2:2379,...``:
gRPC's own list, round-robin, so a member cut off from the leader costs a third of the requests,
not all), the error mapping (Unavailable only when nothing was sent), and :class:`EtcdRecords`,
the job records and the protected resource kept in the same etcd.
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

from leasecheck.histories.vocabulary import READY
from leasecheck.targets.base import Indeterminate, Unavailable
from leasecheck.targets.locks.lockbase import Record
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

    def resource(self, node: str) -> tuple[int | None, list[dict[str, Any]]]:
        """The record's fence and the node's effects from ONE transaction of two ranges (one revision of the store)."""
        etcd3 = _etcd3()
        client = self.conn.client
        prefix = f"{PREFIX}effect/{node}/"
        with etcd_errors("resource"):
            _, (record, found) = client.transaction(compare=[], success=[
                client.transactions.get(self.key(node)),
                client.transactions.get(prefix, etcd3.utils.increment_last_byte(etcd3.utils.to_bytes(prefix))),
            ], failure=[])
        fence = json.loads(record[0][0]).get("fence") if record else None
        found.sort(key=lambda item: item[1].create_revision)
        return fence, [json.loads(value) for value, _ in found]

    def close(self) -> None:
        self.conn.close()
