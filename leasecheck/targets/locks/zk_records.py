"""ZooKeeper as kazoo's lock audits use it: one kazoo client per process, and the jobs' records in znodes.

Why apart from the lock (:mod:`leasecheck.targets.locks.kazoo_lock`): how
a request reaches ZooKeeper, and what kazoo's errors mean for the protocol
(:func:`zk_errors`), is the same whichever way the lock is fenced; and the
records are the job's, not the library's, as the Redis records are
(:mod:`leasecheck.targets.locks.redis_records`).

The records (:class:`ZkRecords`): a JSON znode per node under
``/leasecheck/records/`` and one sequential znode per effect under
``/leasecheck/effects/NODE/``; the locks under ``/leasecheck/locks/``. A fenced
write is a compare-and-swap on the record znode's ``version`` (a ``check`` in a
transaction for an effect), retried until it applies or a larger fence is seen.

Every read of the records (:meth:`ZkRecords.get`, the resource) is a ``sync``
then a read: ZooKeeper serves a read from whichever member the client is on,
and a member may lag the leader (its guarantee is sequential consistency, "up
to date within tens of seconds"): a follower cut off from its leader answers
stale reads until it notices, and the checker would prove a write another
client had acknowledged lost, a finding of the lock's that is the harness's.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# kazoo is imported where it is used (listing the backends must not load it)
from leasecheck.histories.vocabulary import READY
from leasecheck.targets.base import Indeterminate, TargetConfig, Unavailable
from leasecheck.targets.locks.lockbase import Record
from leasecheck.targets.urls import hosts_of, store_endpoint

ROOT = "/leasecheck"
#: how many times a resource read is tried before it gives up on a resource that keeps changing under it
RESOURCE_TRIES = 20
#: kazoo's connection retry backs off up to an hour by default; after a partition or a
#: store restart the client must be back within a lease, as a tuned production client is
RECONNECT = {"max_tries": None, "delay": 0.05, "backoff": 2, "max_delay": 0.5}
#: kazoo's command retry (used by ``Lock.release``) retries a lost connection forever by default
COMMAND_BACKOFF = {"delay": 0.05, "backoff": 2, "max_delay": 0.5}


def znode_name(node: str) -> str:
    """A node name as one znode name: ``run-1/node-3`` → ``run-1%2Fnode-3`` (no ``/``, never ``.`` or ``..``)."""
    return urllib.parse.quote(node, safe="").replace(".", "%2E")


@contextmanager
def zk_errors(what: str, single: bool = True) -> Iterator[None]:
    """Map kazoo's errors onto the protocol: Unavailable only for a request that was never sent.

    kazoo (2.11) queues a request while it reconnects and sends it once a
    session is open, on the *new* session if the old one expired. A request
    fails with SessionExpiredError only if it never left that queue: the
    handshake of the reconnection found the session expired (requests sent
    on the old connection fail with ConnectionLoss when it drops), or the
    client was already LOST when asked. So for one request (``single``) an
    expired session is Unavailable; a ConnectionLoss, our own wait timing out
    or anything after several requests (a lock's acquire) is Indeterminate.
    """
    from kazoo.exceptions import KazooException, SessionExpiredError
    from kazoo.handlers.threading import KazooTimeoutError

    try:
        yield
    except SessionExpiredError as e:
        if single:
            raise Unavailable(f"{what}: the session expired before the request was sent") from e
        raise Indeterminate(f"{what}: {type(e).__name__}: {e}") from e
    except (KazooException, KazooTimeoutError) as e:
        raise Indeterminate(f"{what}: {type(e).__name__}: {e}") from e


def zk_hosts(url: str) -> str:
    """kazoo's ``hosts`` for ``zookeeper://HOST:PORT`` or an ensemble's ``zookeeper://H1:P1,H2:P2,...``.

    kazoo takes every server as ``"h1:p1,h2:p2,h3:p3"`` (its docs' way to follow an
    ensemble): it connects to one at random and moves to another when that one
    fails or stops serving (a server cut off from its quorum closes its clients),
    keeping the session while the ensemble does.
    """
    if "," not in urllib.parse.urlsplit(url).netloc:
        host, port = store_endpoint(url)
        return f"{host}:{port}"
    return ",".join(f"{host}:{port}" for host, port in hosts_of(url))


@dataclass
class ZkConnection:
    """One kazoo client per process, started on first use (workers are spawned; kazoo's threads never cross a fork)."""

    url: str
    session_timeout_s: float
    timeout_s: float
    _client: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, config: TargetConfig) -> ZkConnection:
        return cls(config.url, config.ttl_ms / 1000.0, config.timeout_s)

    @property
    def client(self) -> Any:
        """The started client; Unavailable if no session could be opened (nothing was sent)."""
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        from kazoo.retry import KazooRetry

        with self._lock:
            if self._client is None:
                hosts = zk_hosts(self.url)
                client = KazooClient(
                    hosts=hosts, timeout=self.session_timeout_s,
                    connection_retry=KazooRetry(**RECONNECT),
                    command_retry=KazooRetry(max_tries=None, deadline=self.timeout_s, **COMMAND_BACKOFF),
                )
                try:
                    client.start(timeout=self.timeout_s)
                except KazooTimeoutError as e:
                    raise Unavailable(f"no ZooKeeper session with {hosts} within {self.timeout_s:g} s") from e
                self._client = client
            return self._client

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    def request(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``client.METHOD_async(...)``, waited for at most the op's timeout (the sync API waits forever).

        kazoo's own exceptions propagate: the caller maps them (:func:`zk_errors`). A client whose
        session kazoo already knows is lost refuses every request unsent (SessionExpiredError at once,
        while it opens a new session): say so first, as Unavailable.
        """
        from kazoo.protocol.states import KeeperState

        client = self.client
        # the client states in which kazoo fails a request at once, without queueing or sending it
        if client.client_state in (KeeperState.EXPIRED_SESSION, KeeperState.CLOSED, KeeperState.AUTH_FAILED):
            raise Unavailable(f"the kazoo client sends nothing in state {client.client_state}")
        return getattr(client, f"{method}_async")(*args, **kwargs).get(timeout=self.timeout_s)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            try:
                client.stop()  # ends the session: its ephemeral lock znodes go with it
                client.close()
            except Exception:
                pass


@dataclass
class ZkRecords:
    """The jobs' records and resource in ZooKeeper; fenced writes compare-and-swap the record znode's version."""

    conn: ZkConnection

    @staticmethod
    def record_path(node: str) -> str:
        return f"{ROOT}/records/{znode_name(node)}"

    @staticmethod
    def effects_path(node: str) -> str:
        return f"{ROOT}/effects/{znode_name(node)}"

    @staticmethod
    def lock_path(node: str) -> str:
        return f"{ROOT}/locks/{znode_name(node)}"

    def setup(self) -> None:
        client = self.conn.client
        with zk_errors("setup", single=False):
            for folder in ("records", "effects", "locks"):
                client.ensure_path(f"{ROOT}/{folder}")

    def add_nodes(self, nodes: list[str]) -> None:
        from kazoo.exceptions import NodeExistsError

        client = self.conn.client
        ready = json.dumps({"status": READY}).encode()
        with zk_errors("add_nodes", single=False):  # every create in flight at once; an existing znode is kept as it is
            pending = [client.create_async(self.record_path(n), ready) for n in nodes]
            pending += [client.create_async(self.effects_path(n), b"") for n in nodes]
            for result in pending:
                try:
                    result.get(timeout=self.conn.timeout_s)
                except NodeExistsError:
                    pass

    def _load(self, node: str) -> tuple[dict[str, Any] | None, int]:
        """The record's fields and the znode's version (-1: no znode)."""
        from kazoo.exceptions import NoNodeError

        with zk_errors("get"):
            try:
                data, stat = self.conn.request("get", self.record_path(node))
            except NoNodeError:
                return None, -1
        return json.loads(data), stat.version

    def _sync(self, node: str) -> None:
        """Bring our member up to the leader's last commit before a read (ZooKeeper's own recipe for a fresh read)."""
        with zk_errors("sync"):
            self.conn.request("sync", self.record_path(node))

    def get(self, node: str) -> Record | None:
        self._sync(node)
        fields, _ = self._load(node)
        return None if fields is None else Record(**fields)

    def _store(self, node: str, fields: dict[str, Any], version: int | None) -> bool:
        """Write the record (create it if ``version`` is -1); False if it changed under us (retry)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError

        data = json.dumps(fields).encode()
        with zk_errors("put"):
            try:
                if version == -1:
                    self.conn.request("create", self.record_path(node), data)
                else:
                    self.conn.request("set", self.record_path(node), data, -1 if version is None else version)
            except (BadVersionError, NodeExistsError):
                return False
        return True

    def put(self, node: str, changes: dict[str, Any], fence: int | None = None) -> bool:
        while True:
            fields, version = self._load(node)
            fields = fields or {"status": READY}
            if fence is not None:
                if (fields.get("fence") or 0) > fence:
                    return False
                changes = {**changes, "fence": fence}
            fields.update(changes)
            # an unfenced write trusts the lock: no version (a create of a missing record must still not clobber one)
            if self._store(node, fields, version if fence is not None or version == -1 else None):
                return True

    def append_effect(self, node: str, token: str, payload: str, fence: int | None = None) -> bool:
        from kazoo.exceptions import BadVersionError

        entry = json.dumps({"token": token, "payload": payload, "fence": fence}).encode()
        entry_path = f"{self.effects_path(node)}/e-"
        if fence is None:
            with zk_errors("effect"):
                self.conn.request("create", entry_path, entry, sequence=True, makepath=True)
            return True
        while True:
            fields, version = self._load(node)
            if fields is None:  # no record yet: make one to hold the fence, then try again
                self._store(node, {"status": READY, "fence": fence}, -1)
                continue
            if (fields.get("fence") or 0) > fence:
                return False
            # one transaction: the entry, and the record's fence raised (or only checked) at the version we read
            txn = self.conn.client.transaction()
            if (fields.get("fence") or 0) < fence:
                txn.set_data(self.record_path(node), json.dumps({**fields, "fence": fence}).encode(), version)
            else:
                txn.check(self.record_path(node), version)
            txn.create(entry_path, entry, sequence=True)
            with zk_errors("effect"):
                results = txn.commit_async().get(timeout=self.conn.timeout_s)
            if any(isinstance(r, BadVersionError) for r in results):
                continue  # the record changed since we read it: read the fence again
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise Indeterminate(f"effect: the transaction failed: {failed!r}")
            return True

    def effects(self, node: str) -> list[dict[str, Any]]:
        """The node's resource: every accepted effect, in the order ZooKeeper accepted them."""
        folder = self.effects_path(node)
        self._sync(node)
        with zk_errors("effects", single=False):
            names = sorted(self.conn.request("get_children", folder))
            return [json.loads(self.conn.request("get", f"{folder}/{name}")[0]) for name in names]

    def resource(self, node: str) -> tuple[int | None, list[dict[str, Any]]]:
        """The record's fence and the effects, as one snapshot: read twice around the entries until nothing moved.

        ZooKeeper has no multi-key read, so this is a double collect: the
        record's version and the effects folder's child version, read before
        and after the entries. Equal both times, the record was this one and the
        folder held these entries (which never change once made) at one moment.
        """
        folder = self.effects_path(node)
        self._sync(node)
        for _ in range(RESOURCE_TRIES):
            before = self._resource_versions(node, folder)
            with zk_errors("resource", single=False):
                names = sorted(self._children(folder))
                entries = [json.loads(self.conn.request("get", f"{folder}/{name}")[0]) for name in names]
            after = self._resource_versions(node, folder)
            if before == after:
                fields = after[0]
                return (fields or {}).get("fence"), entries
        raise Indeterminate(f"resource of {node!r}: still changing after {RESOURCE_TRIES} reads")

    def _resource_versions(self, node: str, folder: str) -> tuple[dict[str, Any] | None, int, int]:
        """The record's fields and version, and the effects folder's child version (-1: no folder yet)."""
        from kazoo.exceptions import NoNodeError

        fields, version = self._load(node)
        with zk_errors("resource"):
            try:
                _, stat = self.conn.request("get_children", folder, include_data=True)
            except NoNodeError:
                return fields, version, -1
        return fields, version, stat.cversion

    def _children(self, folder: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return list(self.conn.request("get_children", folder))
        except NoNodeError:
            return []

    def close(self) -> None:
        self.conn.close()
