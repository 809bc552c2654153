"""kazoo's ``Lock`` recipe, audited as its docs show it, and fenced by the lock znode's creation zxid.

``client.Lock(path, identifier)`` creates an ephemeral sequential znode under
``path`` and holds the lock while its znode is the lowest; ``acquire(blocking=False)``
gives up at once (deleting its znode) when another is lower. There is no ttl:
the lock lasts as long as the client's ZooKeeper *session*, which the server
ends ``timeout`` after it last heard from the client (kazoo pings every third
of it from a background thread); the ephemeral znode goes with the session. So
the session timeout is the lease's ttl (``config.ttl_ms``), and expiry is
judged by the ZooKeeper server's clock alone: kazoo reads no wall clock for
the lock, and clock skew of a worker is no fault here.

* :class:`KazooLock` (``documented``): the lease is named by the lock znode's
  name, ``renew`` asks whether the lock is still ours (our znode exists and
  belongs to the client's current session), and the job's record and resource
  are plain ZooKeeper writes that trust the lock.
* :class:`ZxidKazooLock` (``fenced-zxid``): the fence is the ``czxid`` of the
  lock's own znode. The holder is always the lowest sequence number still
  present, so every later grant's znode was created later: czxid grows with
  every grant. Every record and resource write is conditional on it.

Why the paused holder matters: SIGSTOP freezes kazoo's ping thread with the
worker, the server expires the session, and another worker takes the lock.
When the holder wakes, kazoo finds its session expired (state LOST), opens a
*new* session on its own and sends what it was asked on that one, so a plain
write made "under" the old lock succeeds; the ``Lock`` object still says
``is_acquired``. kazoo's docs leave noticing to the user (a state listener).

How the audit runs (``AUDIT_OPTIONS``), and why it differs from the defaults:

* no workload *stalls*: a stall is a ``sleep`` of the worker's own thread,
  which stops its heartbeats but not kazoo's ping thread, so the session and
  the lock live on however long the job hangs (a real GC pause freezes both:
  that is the ``pause`` fault). A hung job keeping a ZooKeeper lock is
  ZooKeeper's design, not a finding about kazoo.
* every holder that finds its lease gone goes on as a zombie (``zombie_rate``
  1): a ``with lock:`` block has no ttl of its own to check.
* ``clock_uncertainty_ms`` is half the ttl: ZooKeeper times a session from the
  client's last contact, and kazoo's pings (every third of the timeout) keep
  that fresh between the renews the history sees; with ZooKeeper's expiry tick,
  the server ends a lease up to ttl/3 + 100 ms after the history's reckoning.
* a fault every 2 s, so that an 8 s run pauses a holder several times.

The records live in the same ZooKeeper (:class:`ZkRecords`): a JSON znode per
node under ``/leasecheck/records/`` and one sequential znode per effect under
``/leasecheck/effects/NODE/``. A fenced write is a compare-and-swap on the
record znode's ``version`` (a ``check`` in a transaction for an effect),
retried until it applies or a larger fence is seen.
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
from leasecheck.targets.base import Indeterminate, Lease, Refused, TargetConfig, Unavailable
from leasecheck.targets.thirdparty.audit import AuditPlan, FaultAudit
from leasecheck.targets.thirdparty.lockbase import Held, LockLease, Record
from leasecheck.targets.urls import store_endpoint

ROOT = "/leasecheck"
#: kazoo's connection retry backs off up to an hour by default; after a partition or a
#: store restart the client must be back within a lease, as a tuned production client is
RECONNECT = {"max_tries": None, "delay": 0.05, "backoff": 2, "max_delay": 0.5}
#: kazoo's command retry (used by ``Lock.release``) retries a lost connection forever by default
COMMAND_BACKOFF = {"delay": 0.05, "backoff": 2, "max_delay": 0.5}


#: the audits' settings (see the module docstring, "How the audit runs")
AUDIT_OPTIONS: dict[str, Any] = {
    "ttl_ms": 1000,
    "clock_uncertainty_ms": 500.0,
    "nemesis_interval": 2.0,
    "workload": {"stall_rate": 0.0, "zombie_rate": 1.0},
}


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
                host, port = store_endpoint(self.url)
                client = KazooClient(
                    hosts=f"{host}:{port}", timeout=self.session_timeout_s,
                    connection_retry=KazooRetry(**RECONNECT),
                    command_retry=KazooRetry(max_tries=None, deadline=self.timeout_s, **COMMAND_BACKOFF),
                )
                try:
                    client.start(timeout=self.timeout_s)
                except KazooTimeoutError as e:
                    raise Unavailable(f"no ZooKeeper session with {host}:{port} within {self.timeout_s:g} s") from e
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

    def get(self, node: str) -> Record | None:
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
        with zk_errors("effects", single=False):
            names = sorted(self.conn.request("get_children", folder))
            return [json.loads(self.conn.request("get", f"{folder}/{name}")[0]) for name in names]

    def close(self) -> None:
        self.conn.close()


class KazooLock(LockLease):
    """kazoo's Lock recipe as documented (unfenced: the session's end frees the lock; writes trust it)."""

    name = "kazoo-lock"
    fenced = False
    store = "zookeeper"
    requires = ("kazoo",)
    extra = "audit"
    records: ZkRecords
    #: did the claim in progress get the lock (so a later Unavailable cannot say "nothing happened")
    _granted: bool = False

    audit = AuditPlan(
        library="kazoo",
        mode="documented",
        faults=(
            FaultAudit("pause", "invalid", ("stale-effect", "stale-commit", "duplicate-commit", "lost-commit")),
            FaultAudit("kill", "valid"),
        ),
        seeds=(1, 2, 3, 4, 5),
        fix=(
            "A paused holder's `with lock:` block goes on after its session expired (kazoo opens a new session"
            " by itself and `lock.is_acquired` stays True): stop work on KazooState.LOST/SUSPENDED"
            " (client.add_listener), and make every protected write conditional on the lock znode's czxid"
            " (the fenced-zxid mode)."
        ),
        options=AUDIT_OPTIONS,
    )

    def make_records(self) -> ZkRecords:
        return ZkRecords(ZkConnection.of(self.config))

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        # (a lock this client still holds from a job it gave up on is let go first: LockLease.try_claim)
        self._granted = False
        try:
            return super().try_claim(node, owner)
        except Unavailable as e:
            if self._granted:  # the lock was taken (and let go again): others may have been refused meanwhile
                raise Indeterminate(f"the lock was granted, then: {e}") from e
            raise

    def acquire(self, node: str, owner: str) -> Held | None:
        conn = self.records.conn
        client = conn.client
        if not client.connected:  # kazoo would queue the znode's create until it reconnects: not sent yet
            raise Unavailable(f"the kazoo client is not connected ({client.state})")
        lock = client.Lock(self.records.lock_path(node), owner)
        with zk_errors("acquire", single=False):
            if not lock.acquire(blocking=False):
                return None
        self._granted = True
        return Held(lock, lock.node, self.fence_of(lock))

    def fence_of(self, lock: Any) -> int | None:
        """No fence: the unfenced mode names the lease by the znode's name alone."""
        return None

    def _own_znode(self, lock: Any) -> Any:
        """The stat of our lock znode if it exists and belongs to the client's current session, else None.

        A session kazoo knows is gone is None (its ephemeral znodes went with it); an unknown answer
        (ConnectionLoss, no reply in time) is Indeterminate.
        """
        from kazoo.exceptions import KazooException, SessionExpiredError
        from kazoo.handlers.threading import KazooTimeoutError

        conn = self.records.conn
        try:
            stat = conn.request("exists", f"{lock.path}/{lock.node}")
        except (SessionExpiredError, Unavailable):  # the session is gone, and its ephemeral znodes with it
            return None
        except (KazooException, KazooTimeoutError) as e:
            raise Indeterminate(f"renew: {type(e).__name__}: {e}") from e
        if stat is None or stat.ephemeralOwner != conn.client.client_id[0]:
            return None
        return stat

    def extend(self, held: Held) -> bool:
        # nothing to extend: kazoo's pings keep the session alive; ask whether the lock is still ours
        return bool(held.lock.is_acquired and held.lock.node and self._own_znode(held.lock) is not None)

    def unlock(self, held: Held) -> None:
        with zk_errors("release", single=False):
            held.lock.release()

    def close(self) -> None:
        if not self.records.conn.connected:  # stopping the client ends the session, and the locks with it
            self._held.clear()
        super().close()


class ZxidKazooLock(KazooLock):
    """kazoo's Lock fenced by its znode's creation zxid (conditional writes of records and resource)."""

    name = "kazoo-lock-zxid"
    fenced = True

    audit = AuditPlan(
        library="kazoo",
        mode="fenced-zxid",
        faults=(FaultAudit("pause", "valid"), FaultAudit("kill", "valid"), FaultAudit("partition", "valid")),
        seeds=(1, 2, 3, 4, 5),
        fix=(
            "Valid: read the lock znode's czxid right after acquire (client.exists(lock.path + '/' + lock.node))"
            " and compare-and-set every protected write against the largest czxid seen"
            " (set/transaction with version=stat.version): a zombie's writes are refused."
        ),
        options=AUDIT_OPTIONS,
    )

    def fence_of(self, lock: Any) -> int | None:
        stat = self._own_znode(lock)
        if stat is None:  # lost between the grant and this read: the claim may not stand
            self._let_go(Held(lock, lock.node))
            raise Indeterminate(f"the lock znode {lock.path}/{lock.node} vanished right after it was granted")
        return int(stat.czxid)

