"""A lease made of a third-party lock: how users of a lock library really protect their work.

A lock library grants mutual exclusion over a name and, at best, a deadline; it
knows nothing of leasecheck's nodes, commits or effects. What users build on it
is the pattern its README shows: take the lock, check the job is not done yet,
do the work (writes to some resource), mark the job done, let go. This class is
that pattern, written once, so each library's adapter is only the few lines that
call the library (:meth:`LockLease.acquire`, :meth:`LockLease.extend`,
:meth:`LockLease.unlock`, :meth:`LockLease.holds`) and the store the job's
record lives in (a :class:`Records`).

Two ways of using a lock (fenced and unfenced, as docs/contracts/history-format.md tells them apart):

* **unfenced** (``fenced = False``, the way most READMEs show it): the lease is
  named by the lock's own token, and the record and the protected resource are
  *plain writes that trust the lock*: whoever believes it holds the lock
  writes. A holder that was paused past its lock's expiry and wakes up still
  writes: that is what the audit is there to show.
* **fenced** (``fenced = True``): the lock yields a number that grows with every
  grant (ZooKeeper's creation zxid, etcd's revision, a counter), and every
  write to the record and the resource is *conditional* on it: applied only if
  no larger fence has written before (:meth:`Records.put` with ``fence``). This
  is the advice an unfenced finding ends with, audited the same way.

Operations map onto the library like this: ``try_claim`` takes the lock without
waiting (busy: ``held``), reads the record under it (done: ``terminal``, and the
lock is let go) and marks the node RUNNING; ``renew`` is the library's own
extension or liveness check (in a fenced mode also a conditional write of the
record: the store says whether a newer fence exists); ``effect`` appends to the resource; ``commit``
marks the node SUCCEEDED and lets go; ``release`` marks it READY and lets go;
``read`` reads the record; ``read_resource`` reads the resource's entries back
(with the record's fence). A failure after the lock was taken lets the lock go
before it is reported, so a library without expiry is never left locked.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from leasecheck.histories.vocabulary import READY, RUNNING, SUCCEEDED, Status
from leasecheck.targets.audits import AuditPlan
from leasecheck.targets.base import (
    Accepted,
    Indeterminate,
    Lease,
    NodeState,
    Outcome,
    Refused,
    ResourceState,
    Target,
    TargetConfig,
)


@dataclass(frozen=True)
class Record:
    """A node's record as the store keeps it; ``fence`` is the largest fence that wrote it (None: unfenced)."""

    status: Status
    owner: str | None = None
    token: str | None = None
    result: str | None = None
    fence: int | None = None


class Records(Protocol):
    """Where the jobs' records and the protected resource live: usually the lock's own store.

    ``put`` applies ``changes`` (field → value, None removes it) to the node's
    record. With ``fence=None`` it is a plain write. With a fence it is
    conditional and atomic: applied (and the record's fence raised to
    ``fence``) only if the record's fence is not larger, else nothing is
    written and it returns False. ``append_effect`` is the same for one entry
    of the node's resource, guarded by the same fence (a claim lifts it, as
    docs/contracts/anomaly-kinds.md's ``effect_fence: "lease"`` says); ``effects`` reads the entries
    back, oldest first, as ``{"token", "payload", "fence"}``.

    A store that can also read the resource's fence *with* its entries in one
    snapshot has ``resource(node) -> (fence, entries)`` (:class:`ResourceRecords`):
    :meth:`LockLease.read_resource` uses it when there, and ``effects`` alone
    (no fence) when not, so a store written before it still works.
    """

    def setup(self) -> None: ...
    def add_nodes(self, nodes: list[str]) -> None: ...
    def get(self, node: str) -> Record | None: ...
    def put(self, node: str, changes: dict[str, Any], fence: int | None = None) -> bool: ...
    def append_effect(self, node: str, token: str, payload: str, fence: int | None = None) -> bool: ...
    def effects(self, node: str) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


class ResourceRecords(Records, Protocol):
    """:class:`Records` that read the protected resource's fence and entries in ONE snapshot.

    ``resource`` returns the node's record fence (what the resource refuses
    below; None where no fenced write ever happened) and its effects as
    :meth:`Records.effects` gives them, oldest first, both from one
    transaction (or a read retried until nothing changed under it).
    """

    def resource(self, node: str) -> tuple[int | None, list[dict[str, Any]]]: ...


@dataclass
class Held:
    """A lock the library granted: the library's object, the token naming the lease, its fence if any."""

    lock: Any
    token: str
    fence: int | None = None


class LockLease(Target):
    """A lease built the way a lock library's users build one; subclass per library (see the module docstring)."""

    #: the published audit of this adapter (``leasecheck audit``), None for an adapter not audited
    audit: ClassVar[AuditPlan | None] = None

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self.records = self.make_records()
        #: the locks this client holds, by the token of their lease
        self._held: dict[str, Held] = {}

    # -- what each library's adapter writes ------------------------------------------------

    @abstractmethod
    def make_records(self) -> Records:
        """The store of the jobs' records and resource (connected lazily or now)."""

    @abstractmethod
    def acquire(self, node: str, owner: str) -> Held | None:
        """Take the node's lock without waiting, for ``ttl_ms`` where the library has a ttl; None if it is taken."""

    @abstractmethod
    def extend(self, held: Held) -> bool:
        """The library's heartbeat (extend, refresh, or a liveness check); False if the lock is no longer ours."""

    @abstractmethod
    def unlock(self, held: Held) -> None:
        """Let the lock go; a lock already lost is no error here."""

    def holds(self, held: Held) -> bool:
        """Does the library say the lock is still ours (checked before a release)? By default what ``extend`` says."""
        return self.extend(held)

    # -- the lease protocol, once for every library ------------------------------------------

    def setup(self) -> None:
        self.records.setup()

    def add_node(self, node: str) -> None:
        self.records.add_nodes([node])

    def add_nodes(self, nodes: list[str]) -> None:
        self.records.add_nodes(nodes)

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        self._abandon()
        held = self.acquire(node, owner)
        if held is None:
            return Refused("held")
        try:
            record = self.records.get(node)
            if record is not None and record.status == SUCCEEDED:
                self.unlock(held)
                return Refused("terminal")
            changes = {"status": RUNNING, "owner": owner, "token": held.token, "result": None}
            if not self.records.put(node, changes, held.fence):
                self.unlock(held)
                return Refused("stale", f"a fence above {held.fence} wrote the record already")
        except BaseException:
            self._let_go(held)
            raise
        self._held[held.token] = held
        return Lease(node, owner, held.fence, held.token)

    def renew(self, lease: Lease) -> Outcome:
        held = self._held.get(self._token(lease))
        if held is None:
            return Refused("not-owner", "this client let the lock go")
        if not self.extend(held):
            return Refused("expired", "the library says the lock is no longer held")
        # a fenced heartbeat asks the store too: a library's own "still held" may be a local belief
        # (portalocker's lock.lost) that lags behind the grant that fenced this lease off
        if lease.epoch is not None and not self.records.put(lease.node, {"owner": lease.owner}, lease.epoch):
            return Refused("stale", f"the record has seen a fence above {lease.epoch}")
        return None

    def effect(self, lease: Lease, payload: str) -> Outcome:
        if self.records.append_effect(lease.node, self._token(lease), payload, lease.epoch):
            return None
        return Refused("stale", f"the resource has seen a fence above {lease.epoch}")

    def commit(self, lease: Lease, result: str) -> Outcome:
        if not self.records.put(lease.node, {"status": SUCCEEDED, "result": result}, lease.epoch):
            return Refused("stale", f"the record has seen a fence above {lease.epoch}")
        held = self._held.pop(self._token(lease), None)
        if held is not None:
            self._let_go(held)
        return None

    def release(self, lease: Lease) -> Outcome:
        held = self._held.get(self._token(lease))
        if held is None:
            return Refused("not-owner", "this client let the lock go")
        if not self.holds(held):
            return Refused("expired", "the library says the lock is no longer held")
        if not self.records.put(lease.node, {"status": READY, "owner": None}, lease.epoch):
            return Refused("stale", f"the record has seen a fence above {lease.epoch}")
        del self._held[held.token]
        self._let_go(held)
        return None

    def read(self, node: str) -> NodeState:
        record = self.records.get(node)
        if record is None:
            return NodeState(READY, None)
        owner = record.owner if record.status != READY else None
        if self.fenced:
            return NodeState(record.status, record.fence, owner, record.result)
        return NodeState(record.status, None, owner, record.result, record.token)

    def read_resource(self, node: str) -> ResourceState:
        """The records' resource: each entry with the lease it came with (its fence, or its token when unfenced).

        The fence is the record's (a claim lifts it, an effect checks it): read
        with the entries in one snapshot where the store can
        (:class:`ResourceRecords`), 0 when no fenced write happened yet, and None
        for an unfenced adapter, whose resource keeps no fence, or a store that
        cannot read both at once.
        """
        snapshot = getattr(self.records, "resource", None)
        fence, entries = snapshot(node) if snapshot is not None else (None, self.records.effects(node))
        if not self.fenced:
            return ResourceState(tuple(Accepted(None, e["payload"], e["token"]) for e in entries), None)
        kept = None if snapshot is None else int(fence or 0)
        return ResourceState(tuple(Accepted(e.get("fence"), e["payload"]) for e in entries), kept)

    def close(self) -> None:
        for held in list(self._held.values()):
            self._let_go(held)
        self._held.clear()
        self.records.close()

    # -- helpers -----------------------------------------------------------------------------

    def _abandon(self) -> None:
        """Let go of every lock this client still holds: a worker claims only when its last job is over.

        The workload leaves a lease without releasing it (a zombie done, a careful
        worker woken past its lease); the ``with lock:`` block of a library's
        README lets go when the job ends, however it ended, and a lock with no
        deadline would otherwise stay held by this live process for the run.
        """
        for held in list(self._held.values()):
            self._let_go(held)
        self._held.clear()

    def _let_go(self, held: Held) -> None:
        """Unlock, whatever happens: the caller is already reporting something else."""
        try:
            self.unlock(held)
        except Exception:
            pass

    @staticmethod
    def _token(lease: Lease) -> str:
        if lease.token is None:
            raise Indeterminate(f"a lease of a lock adapter carries the lock's token: {lease}")
        return lease.token
