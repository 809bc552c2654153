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

* no workload *stalls* and no *late writes*: each is a ``sleep`` of the worker's own thread,
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

The records live in the same ZooKeeper (:mod:`leasecheck.targets.locks.zk_records`),
reached through the one kazoo client of the process. On an ensemble
(``zookeeper://H1:2181,H2:2181,H3:2181``, the ``zookeeper-ensemble`` kind) that
client is given every server, as kazoo's docs show (``hosts="h1:p,h2:p,h3:p"``),
and keeps its session, and the lock's ephemeral znode, across a change of leader.

What the audits found there (AUDITS.md, "On a cluster"): the czxid fence holds
under every member fault; a lock outlives the job that gave it up when the
leader is cut off, since the holder's session (and its lock znode) survives
the loss of its server: ``stuck-lease``, liveness only, published as such.
"""

from __future__ import annotations

from typing import Any

from leasecheck.targets.audits import AuditPlan, FaultAudit

# kazoo is imported where it is used (listing the backends must not load it)
from leasecheck.targets.base import Indeterminate, Lease, Refused, Unavailable
from leasecheck.targets.locks.lockbase import Held, LockLease
from leasecheck.targets.locks.zk_records import ZkConnection, ZkRecords, zk_errors

#: the audits' settings (see the module docstring, "How the audit runs")
AUDIT_OPTIONS: dict[str, Any] = {
    "ttl_ms": 1000,
    "clock_uncertainty_ms": 500.0,
    "nemesis_interval": 2.0,
    "workload": {"stall_rate": 0.0, "late_rate": 0.0, "zombie_rate": 1.0},
}


class KazooLock(LockLease):
    """kazoo's Lock recipe as documented (unfenced: the session's end frees the lock; writes trust it)."""

    renews_itself = True  # its own thread keeps the lock: the workload neither stalls nor writes late for it

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
            # stuck-lease only (liveness, ZooKeeper's design): a lock lasts as long as its session, and a session
            # survives the loss of its server (kazoo moves it to another within the session timeout; a new leader
            # restarts every session's timer). A holder whose call failed (ConnectionLoss) when the leader was cut
            # off gives the job up; its lock znode lives on with its session until the client lets it go
            FaultAudit("isolate-primary", "invalid", ("stuck-lease",), cluster="zookeeper-ensemble"),
            # and, in 2 of the loaded suite's runs, an acknowledged write lost: ZooKeeper 3.8.0's, not the lock's (the
            # members elected a leader whose log ended before transactions the old one had committed, the pattern of
            # ZOOKEEPER-4712; AUDITS.md gives the ops and the servers' own log lines)
            FaultAudit("partition-halves", "invalid", ("stuck-lease", "lost-effect", "lost-commit"),
                       cluster="zookeeper-ensemble"),
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
        faults=(
            FaultAudit("pause", "valid"), FaultAudit("kill", "valid"), FaultAudit("partition", "valid"),
            # the ensemble: the czxid fence holds whichever server a client is on: no stale write under any member
            # fault. Not published as valid: under partition-bridge (valid on seeds 1-3 at these settings) 3 of 10
            # 30 s runs showed stuck-lease (bench_detection --clusters), and kill-primary was stuck in a loaded suite
            # run: a new leader restarts every session's timer. Liveness, not safety, but no line that flips is
            # published
            # the leader cut off: stuck-lease only (liveness), as in the documented mode (see KazooLock's plan)
            FaultAudit("isolate-primary", "invalid", ("stuck-lease",), cluster="zookeeper-ensemble"),
        ),
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

