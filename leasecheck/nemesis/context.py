"""What a fault factory may look at: the run's workers, clocks, network and store, given by the runner.

Why a context object: the catalogue's factories (:mod:`leasecheck.nemesis.catalogue`)
must pick victims without knowing the runner. The runner builds one
:class:`FaultContext` when the run starts; ``workers`` is a live view (who is
ready *now*), everything else is fixed for the run. The per-tick random
generator is not in it: the schedule hands each factory its own, so a tick's
draws never depend on timing.

The store server is seen only through the small protocols below, so this
package never imports the runner's server classes (arrows point one way).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from leasecheck.nemesis.inside import Aiming
from leasecheck.nemesis.protocol import Fault
from leasecheck.nemesis.proxies import Network
from leasecheck.nemesis.worker_clocks import ClockControl


class Worker(Protocol):
    """A worker a fault may hit: its clock key (``slot``), its history process number and its pid."""

    @property
    def slot(self) -> int: ...
    @property
    def process(self) -> int: ...
    @property
    def pid(self) -> int | None: ...


class StoreServer(Protocol):
    """A store server the harness started: what the store faults pause, kill and bring back."""

    @property
    def pid(self) -> int | None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def kill(self) -> None: ...
    def start(self) -> object: ...


class ClusterControl(Protocol):
    """A replicated store the harness started (:class:`leasecheck.servers.cluster.Cluster`): what the member faults do.

    Members are named (``m1``, ``m2`` ...); the primary is asked of the cluster
    each time, never remembered, since a failover the cluster made on its own
    (Sentinel, a raft election) moves it.
    """

    @property
    def kind(self) -> str: ...
    def member_names(self) -> list[str]: ...
    def primary(self) -> str | None: ...
    def kill_member(self, name: str) -> None: ...
    def start_member(self, name: str) -> None: ...
    def pause_member(self, name: str) -> None: ...
    def resume_member(self, name: str) -> None: ...
    def partition(self, links: Iterable[tuple[str, str]]) -> None: ...
    def heal_partition(self, links: Iterable[tuple[str, str]] | None = None) -> None: ...
    def down_members(self) -> list[str]: ...
    def failover(self) -> dict[str, Any]: ...
    def heal_failover(self) -> dict[str, Any] | None: ...
    def skew_member(self, name: str, offset_ms: float) -> None: ...


@runtime_checkable
class PowerLossServer(Protocol):
    """A store server whose directory may be a power-loss layer (:mod:`leasecheck.servers.powerfs_layer`): its power
    can then be cut (SIGKILL, and every write it never fsynced dropped) and the server started again."""

    @property
    def on_layer(self) -> bool: ...
    def power_cut(self, torn: bool = False) -> dict[str, int]: ...
    def start(self) -> object: ...


@runtime_checkable
class PowerLossCluster(Protocol):
    """A cluster whose members may run on power-loss layers (:meth:`leasecheck.servers.cluster.Cluster.on_powerfs`):
    their power can then be cut together (every server of theirs SIGKILLed, then what each never fsynced dropped) and
    they started again."""

    @property
    def on_layers(self) -> bool: ...
    def member_names(self) -> list[str]: ...
    def primary(self) -> str | None: ...
    def down_members(self) -> list[str]: ...
    def power_cut_members(self, names: Iterable[str], torn: bool = False) -> dict[str, dict[str, int]]: ...
    def start_members(self, names: Iterable[str]) -> None: ...


@runtime_checkable
class SkewableServer(Protocol):
    """A store server running under libfaketime, which can make the fault that skews its clock."""

    def clock_fault(self, delta_ms: float) -> Fault: ...


def no_workers() -> Sequence[Worker]:
    return ()


def no_holders() -> set[int]:
    return set()


@dataclass(frozen=True)
class FaultContext:
    """The run as the faults see it. ``ttl_ms`` is the one unit of time every fault's size is drawn in."""

    ttl_ms: int
    #: the workers past their start-up, now (the only fair game for a fault)
    workers: Callable[[], Sequence[Worker]] = no_workers
    #: the process numbers of the workers holding a lease now (a pause aims at a lease's lifetime)
    holders: Callable[[], set[int]] = no_holders
    #: the processes with an effect or commit in flight now
    writing: Callable[[], set[int]] = no_holders
    clocks: ClockControl | None = None
    network: Network | None = None
    server: StoreServer | None = None
    #: the replicated store, when the run has one (``--cluster``): what the member faults act on
    cluster: ClusterControl | None = None
    #: the most the ``clock-store`` fault skews the store's clock
    store_skew_ms: float = 0.0
    #: told that worker ``process`` is stopped (``pause``): the history stops waiting for its events
    halted: Callable[[int], None] = lambda process: None
    #: told that worker ``process`` is about to be continued
    resuming: Callable[[int], None] = lambda process: None
    #: what lands a pause or kill inside an op (:mod:`leasecheck.nemesis.inside`); None: the run records no ops
    aiming: Aiming | None = None
    #: does the run want this fault's evidence sooner (an ``--until-covered`` run past its time limit, short of a
    #: situation the fault seeks)? Then an aimed fault that found no op in time waits for the next tick, rather than
    #: stopping a worker between ops (:mod:`leasecheck.nemesis.faults`)
    hurried: Callable[[str], bool] = lambda fault: False

    def ttl_s(self, ttls: float = 1.0) -> float:
        """``ttls`` lease durations in seconds (what sleeps and deadlines take)."""
        return ttls * self.ttl_ms / 1000

    def pick_worker(self, rng: random.Random, eligible: Callable[[Worker], bool] = lambda w: True) -> Worker | None:
        """One ready, ``eligible`` worker chosen by ``rng`` (in slot order, so the choice follows the seed); None if none."""
        candidates = sorted((w for w in self.workers() if eligible(w)), key=lambda w: w.slot)
        return rng.choice(candidates) if candidates else None

    def pick_holder(self, rng: random.Random, eligible: Callable[[Worker], bool] = lambda w: True) -> Worker | None:
        """As :meth:`pick_worker`, but one that holds a lease now if any does.

        A fault on an idle worker tests little: the seed's GC pause, or a clock
        that jumps, bites a worker in the middle of its lease.
        """
        holders = self.holders()
        return self.pick_worker(rng, lambda w: eligible(w) and w.process in holders) or self.pick_worker(rng, eligible)
