"""The lease backend protocol: what leasecheck needs from any implementation.

One small class per backend, one instance per worker process (so a pause or a
clock skew hits one worker's client alone). Each operation either returns its
outcome, ``ok`` or a definite refusal with one of the fail reasons of docs/contracts/history-format.md, or
raises one of two exceptions:

* :class:`Unavailable`: the operation was *definitely not applied* (the store
  could not be reached before anything was sent) → recorded as ``fail``
  ``unavailable``;
* :class:`Indeterminate`: the outcome is *unknown* (a timeout after sending, a
  connection lost mid-commit) → recorded as ``info``.

Anything else an adapter raises is a bug in the adapter, and the runner records
it as ``info`` with the message: it may have happened.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from leasecheck.histories.format import EffectFence, LeaseExpiry
from leasecheck.histories.vocabulary import AnomalyKind, Refusal, Status


class Unavailable(Exception):
    """The operation was definitely not applied: the store was not reached."""


class Indeterminate(Exception):
    """The operation may or may not have been applied, now or later."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A definite "no" from the store, with a fail reason of docs/contracts/history-format.md.

    ``unavailable`` is not a refusal: the store was not reached, and the adapter
    raises :class:`Unavailable` instead.
    """

    reason: Refusal
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "message": self.message} if self.message else {"reason": self.reason}


@dataclass(frozen=True, slots=True)
class Lease:
    """What a successful claim hands the worker: the proof it carries on every later op.

    ``epoch`` is the fencing token of a fenced backend; an unfenced backend
    leaves it None and identifies the lease by an opaque ``token``.
    """

    node: str
    owner: str
    epoch: int | None
    token: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The lease as every later op's invoke value carries it."""
        if self.epoch is None:
            return {"epoch": None, "token": self.token}
        return {"epoch": self.epoch}


@dataclass(frozen=True, slots=True)
class NodeState:
    """A read of the store's durable record of one node."""

    status: Status
    epoch: int | None
    owner: str | None = None
    result: str | None = None
    token: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "epoch": self.epoch, "owner": self.owner, "result": self.result}
        if self.token is not None:
            out["token"] = self.token
        return out


@dataclass(frozen=True, slots=True)
class Accepted:
    """One effect the protected resource accepted: the lease it came with and its payload.

    ``epoch`` is the epoch the resource checked it against; an unfenced backend
    leaves it None and names the lease by ``token`` instead, so the checker can
    match the entry to the effect op that wrote it (by payload) and tell whose it was.
    """

    epoch: int | None
    payload: str
    token: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"epoch": self.epoch, "payload": self.payload}
        if self.token is not None:
            out["token"] = self.token
        return out


@dataclass(frozen=True, slots=True)
class ResourceState:
    """A read of a node's protected resource: its fence and the effects it accepted, in order.

    Why both in one object: the lasting damage of a zombie's write is in the
    resource (an old epoch accepted after a newer one, a fence set back), and
    only a fence and a log read in ONE snapshot can be compared: a correct
    backend never shows an entry above the fence read with it. ``accepted`` is
    oldest first, in the order the resource accepted the effects; ``fence`` is
    the epoch below which it refuses effects (None: it keeps no fence, or the
    adapter cannot read it; a field a read does not give is never compared).
    """

    accepted: tuple[Accepted, ...]
    fence: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"fence": self.fence, "accepted": [entry.to_json() for entry in self.accepted]}


def reads_resource(target: Target | type[Target]) -> bool:
    """Can ``target`` (a backend class or instance) read its protected resource back?

    True when its class overrides :meth:`Target.read_resource`. An adapter written
    before resource reads existed does not, and is run as before, with no
    ``read-resource`` ops (the run says so). A backend that learns only at run time
    whether it can (an ``exec:`` child declares it in its hello) says so through
    a ``resource_readable`` property on its instances (its class alone, with no
    child yet, then reads as False: nothing has declared it).
    """
    cls = target if isinstance(target, type) else type(target)
    if getattr(cls, "read_resource", Target.read_resource) is Target.read_resource:
        return False
    return getattr(target, "resource_readable", True) is True


#: ``None`` is ok for renew, effect, commit and release
Outcome = Refused | None

#: a wall clock in milliseconds; the runner hands each worker its own so a
#: nemesis can skew one worker (adapters that must read the client's time use it)
WallClock = Callable[[], float]


def system_clock_ms() -> float:
    return time.time() * 1000.0


@dataclass(frozen=True, slots=True)
class OffsetClock:
    """A worker's wall clock running ``offset_ms`` ahead (or behind) of the host's; picklable."""

    offset_ms: float

    def __call__(self) -> float:
        return time.time() * 1000.0 + self.offset_ms


@dataclass(slots=True)
class TargetConfig:
    """Where the store is and how leases behave; built by the runner or a test.

    ``url`` is the store's address (a DSN, a ``redis://`` URL or a file path);
    ``ttl_ms`` the lease duration workers ask for; ``clock`` the worker's own
    wall clock; ``options`` free settings of one backend.
    """

    url: str
    ttl_ms: int = 1000
    clock: WallClock = system_clock_ms
    timeout_s: float = 5.0
    options: dict[str, Any] = field(default_factory=dict)


#: the workload conditions an ``exposed_by_workload`` may name: the option that brings each about
WORKLOAD_CONDITIONS: dict[str, str] = {
    "duplicate-delivery": "--dup-rate: the at-least-once queue hands one node to two workers",
}


class Target(ABC):
    """A lease backend under test. Subclass it and register it (see :mod:`leasecheck.targets.registry`).

    ``fenced`` declares whether claims hand out epochs (fencing tokens); an
    unfenced backend is judged by grant order instead. ``store`` names the
    kind of server the backend needs (``sqlite``, ``postgres``, ``redis``), so
    the runner knows what to start; ``None`` for a third party that brings its own.
    ``bug`` is empty for a correct implementation and names the flaw of a
    deliberately broken variant; ``expected`` lists the anomaly kinds it must
    produce. What brings them about is split in two, so that each half can be
    checked and used as it is: ``exposed_by`` names faults of the nemesis
    catalogue (``leasecheck nemeses``), each one ``leasecheck run --nemesis``
    accepts for this backend's store; ``exposed_by_workload`` names conditions
    of the workload, not faults, from :data:`WORKLOAD_CONDITIONS` (duplicate
    delivery: ``--dup-rate``).
    """

    name: ClassVar[str]
    fenced: ClassVar[bool] = True
    store: ClassVar[str | None] = None
    bug: ClassVar[str] = ""
    expected: ClassVar[tuple[AnomalyKind, ...]] = ()
    exposed_by: ClassVar[tuple[str, ...]] = ()
    exposed_by_workload: ClassVar[tuple[str, ...]] = ()
    #: What the protected resource behind ``effect`` knows, written into the history
    #: header so the checker judges ``stale-effect`` by the rule the backend promises.
    #: ``"lease"``: the resource is coupled to the lease store and a granted claim lifts
    #: its fence in the same step (every reference backend), so an old epoch's effect is
    #: refused as soon as a newer lease exists. ``"token"``: a separate service that only
    #: knows the epochs it was shown, refusing an effect only below the largest it accepted.
    effect_fence: ClassVar[EffectFence] = "lease"
    #: What ends a lease whose holder goes silent, written into the history header. ``"deadline"``:
    #: the store ends it ttl after its last grant or renew (a lease). ``"holder"``: a lock with no
    #: deadline, held while its holder's process, connection or session lives (an OS file lock, a
    #: session advisory lock); the ttl-defined kinds (overlapping-lease, stuck-lease) do not apply.
    lease_expiry: ClassVar[LeaseExpiry] = "deadline"
    #: The lock is kept alive by a thread of the library's own (kazoo's session pings, python-redis-lock's
    #: auto-renewal, portalocker's subscription), not by the worker's heartbeats: a stall or a late write of the
    #: worker's own code (a ``sleep`` of its thread) never lets the lease lapse, so the workload makes neither for it
    #: (a real process pause, which stops every thread, is the ``pause`` fault's).
    renews_itself: ClassVar[bool] = False
    #: The modules (import names) the backend's client needs, imported only where they are used,
    #: and the extra of leasecheck that installs them: ``leasecheck targets`` lists a backend without
    #: importing them, and a run of one that is missing says ``pip install 'leasecheck[EXTRA]'``.
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str | None] = None

    def __init__(self, config: TargetConfig) -> None:
        self.config = config

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        """Why this backend cannot take leases of ``ttl_ms`` (one line), or None: asked before a run starts (exit 3)."""
        return None

    @property
    def ttl_ms(self) -> int:
        return self.config.ttl_ms

    @abstractmethod
    def setup(self) -> None:
        """Create what the store needs (tables, scripts); idempotent, run once per test."""

    @abstractmethod
    def add_node(self, node: str) -> None:
        """Make ``node`` exist, READY, if it does not yet (the queue's producer does this)."""

    def add_nodes(self, nodes: list[str]) -> None:
        """Make many nodes READY; override when the store can do it in one round trip."""
        for node in nodes:
            self.add_node(node)

    @abstractmethod
    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        """Atomically take the node's lease for ``owner``, with a new, larger epoch."""

    @abstractmethod
    def renew(self, lease: Lease) -> Outcome:
        """Extend the lease (heartbeat). Never completes the node."""

    @abstractmethod
    def effect(self, lease: Lease, payload: str) -> Outcome:
        """Write to the protected resource; accepted only with epoch ≥ the largest accepted."""

    @abstractmethod
    def commit(self, lease: Lease, result: str) -> Outcome:
        """Complete the node (SUCCEEDED) with ``result``: the only way to SUCCEEDED."""

    @abstractmethod
    def release(self, lease: Lease) -> Outcome:
        """Give the lease back: the node is READY again."""

    @abstractmethod
    def read(self, node: str) -> NodeState:
        """The store's durable record of the node."""

    def read_resource(self, node: str) -> ResourceState:
        """The node's protected resource, fence and accepted effects read in one snapshot.

        What the resource holds, as it holds it (a broken store's too): every
        effect it accepted for ``node``, oldest first, with the epoch (or token)
        it came with, and the fence it refuses effects below now. Read both in
        ONE atomic step (a transaction, a script): a fence read apart from its
        log could show an entry above it on a correct store. Raises
        :class:`Unavailable` / :class:`Indeterminate` like any op (a read that
        fails proves nothing).

        Not abstract, so that adapters written before it keep working: they are
        run without resource reads (:func:`reads_resource` says False).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot read its protected resource")

    def close(self) -> None:
        """Release connections; the instance is not used afterwards."""

    @classmethod
    def summary(cls) -> str:
        """One line for ``leasecheck targets``: the first line of the docstring."""
        doc = (cls.__doc__ or "").strip().splitlines()
        return doc[0] if doc else ""
