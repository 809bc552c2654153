"""A replicated store leasecheck starts on one machine: members on hosts of their own, faults between them.

Every cluster kind (:data:`CLUSTERS`) is a :class:`Cluster`: ``size`` members,
each a :class:`~leasecheck.servers.base.LocalServer` running in its own network
namespace (:mod:`.hosts`) on its own address, started together, waited for until
the cluster as a whole answers (a primary elected, its replicas attached), and
stopped, with their namespaces deleted, on every exit. A cluster's ``url`` is
the address its clients follow as their docs say (Sentinel's addresses, a
multi-host DSN, every member's address), never one member's.

What the member faults (:mod:`leasecheck.nemesis.members`) need of a cluster is
the protocol :class:`leasecheck.nemesis.context.ClusterControl`; this class
implements it: who the primary is now (asked of the cluster, not remembered),
kill / pause / start one member, partition the members (cut links between
hosts), the cluster's own failover, one member's clock. Each kind says how it
finds its primary, how it fails over and what its members are
(:meth:`Cluster._members`); the rest is here, once.
"""

from __future__ import annotations

import logging
import shutil
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.errors import EnvironmentFailure
from leasecheck.servers.base import LocalServer
from leasecheck.servers.hosts import Host, HostNetwork
from leasecheck.servers.powerfs_layer import PowerLayer
from leasecheck.waiting import poll

log = logging.getLogger("leasecheck.servers")


def _link(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


@dataclass
class Member:
    """One member of a cluster: its name (``m1``), its host, and the server(s) running there.

    ``server`` is the store's own server on that host; ``companions`` run on the
    same host and share its fate in a kill, a pause or a partition (a Redis
    Sentinel beside its Redis).
    """

    name: str
    host: Host
    server: LocalServer
    companions: tuple[LocalServer, ...] = ()

    @property
    def servers(self) -> tuple[LocalServer, ...]:
        return (self.server, *self.companions)


class Cluster(ABC):
    """A replicated store of ``size`` members. Use :meth:`start` (or ``with``), then :meth:`stop`.

    ``directory`` holds one folder per member (data and log); ``ttl_ms`` is the
    run's lease, which the kinds size their failure detectors by (a Sentinel that
    needs a minute to notice a dead primary would fail over after every lease has
    long expired); ``skewable`` starts members under libfaketime (``clock-member``).
    """

    #: the cluster kind, as ``--cluster`` names it
    kind: ClassVar[str] = ""
    #: the kind of store, as ``Target.store`` names it
    store: ClassVar[str] = ""
    #: one line for ``leasecheck clusters`` and the docs
    description: ClassVar[str] = ""
    size: ClassVar[int] = 3
    #: can one member's clock be skewed (its servers run under libfaketime)?
    skewable_members: ClassVar[bool] = False
    #: when a name on a member's power-loss layer is durable (:data:`leasecheck.servers.powerfs_cache.NAMES`)
    layer_names: ClassVar[str] = "strict"

    def __init__(self, directory: Path, ttl_ms: int = 1000, skewable: bool = False) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ttl_ms = ttl_ms
        self.skewable = skewable
        self.network: HostNetwork | None = None
        self.members: dict[str, Member] = {}
        #: members killed and not yet started again (a kill-primary's victim, a failed-over Postgres primary)
        self.down: set[str] = set()
        #: the links cut now, each counted once per fault that cut it: overlapping partitions heal one at a time
        self._cuts: Counter[tuple[str, str]] = Counter()
        #: each member's power-loss layers (one per folder its servers keep), when it runs on them (:meth:`on_powerfs`)
        self.layered = False
        self.layers: dict[str, list[PowerLayer]] = {}

    # ---------------------------------------------------------------- what each kind says

    @property
    @abstractmethod
    def url(self) -> str:
        """The address clients follow the cluster by (every member's, or its Sentinels')."""

    @abstractmethod
    def _members(self, hosts: list[Host]) -> list[Member]:
        """The members on these hosts, not started (called once, by :meth:`start`)."""

    @abstractmethod
    def _ready(self) -> bool:
        """Does the cluster as a whole answer: a primary, with every live member following it?"""

    def ready(self) -> bool:
        """Does the cluster answer now (its readiness probe, asked of its members): what a client waits for."""
        return self._ready()

    @abstractmethod
    def primary(self) -> str | None:
        """The member that is primary (leader) now, asked of the cluster; None while it has none."""

    @abstractmethod
    def failover(self) -> dict[str, Any]:
        """Move the primary role the cluster's own way; the nemesis event's value (``{"from": m1, "to": m2}``)."""

    def heal_failover(self) -> dict[str, Any] | None:
        """Whatever a failover left to undo (a Postgres primary to rebuild as a standby); None if nothing."""
        return None

    # ---------------------------------------------------------------- life

    def start(self, timeout: float = 30.0) -> Cluster:
        """Make the hosts, start every member at once, wait until the cluster answers; raise EnvironmentFailure."""
        started = time.monotonic()
        self.network = HostNetwork.open(self.size)
        try:
            self.members = {m.name: m for m in self._members(self.network.hosts)}
            if self.layered:
                self._put_on_layers()
            self._start_members()
            if not poll(self._ready, timeout, every=0.1):
                raise EnvironmentFailure(f"{self.kind}: the cluster did not come together within {timeout:g} s; "
                                         f"member logs in {self.directory}")
            for layer in (layer for layers in self.layers.values() for layer in layers):
                layer.sync()  # what the set-up wrote (every server's files, the replicas' first copies) is on the disk
        except BaseException:
            self.stop()
            raise
        log.info("%s up in %.2f s: %s", self.kind, time.monotonic() - started, self.describe())
        return self

    def _start_members(self) -> None:
        """Every member started side by side (:meth:`start_members`: each server waits until it answers on its own)."""
        self.start_members(self.members)

    def stop(self) -> None:
        """Stop every member (resumed first: a paused server cannot shut down), then delete the hosts and take the
        members' power-loss layers off."""
        for member in self.members.values():
            for server in member.servers:
                try:
                    server.resume()
                    server.stop()
                except Exception as e:  # go on: the hosts must go
                    log.warning("%s: stopping %s: %s", self.kind, member.name, e)
        if self.network is not None:
            self.network.close()
            self.network = None
        for layer in (layer for layers in self.layers.values() for layer in layers):
            layer.unmount()

    def cleanup(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def remove_state(self) -> None:
        """Once stopped: every member's data removed, its logs and configuration kept (a run folder stays small).

        A member's server keeps its files at the top of its directory (its log, a Sentinel's config) and its
        data in folders below, which go; a directory outside ours (a Postgres member's, when the run folder is
        private to root) leaves its log here, then goes whole.
        """
        for member in self.members.values():
            for server in member.servers:
                home = server.directory
                if server.pid is not None or not home.exists():
                    continue
                if not home.resolve().is_relative_to(self.directory.resolve()):
                    if server.log_path.is_file():
                        shutil.copy(server.log_path, self.directory / f"{member.name}-{server.log_path.name}")
                    shutil.rmtree(home, ignore_errors=True)
                    continue
                for entry in home.iterdir():
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
        for layer in (layer for layers in self.layers.values() for layer in layers):
            if not layer.is_mounted:  # its disk (the member's data as the layer kept it) and its control socket
                shutil.rmtree(layer.backing, ignore_errors=True)
                layer.control.unlink(missing_ok=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- the power-loss layers

    def on_powerfs(self) -> Cluster:
        """Run every member on power-loss layers of its own (:mod:`leasecheck.servers.powerfs_layer`: each folder its
        servers keep becomes a mount over ``FOLDER.disk``), so that its power can be cut; give it before :meth:`start`."""
        if self.members:
            raise ValueError(f"{self.kind} is started: put its members on layers before")
        self.layered = True
        return self

    @property
    def on_layers(self) -> bool:
        """Do the members run on power-loss layers (can their power be cut)?"""
        return self.layered

    def _put_on_layers(self) -> None:
        for name, member in self.members.items():
            by_folder: dict[Path, PowerLayer] = {}
            for server in member.servers:  # a companion in its member's folder shares its layer (one machine's disk)
                server.layer = by_folder.setdefault(server.directory, PowerLayer.under(server.directory, self.layer_names))
            self.layers[name] = list(by_folder.values())

    def power_cut_members(self, names: Iterable[str], torn: bool = False) -> dict[str, dict[str, int]]:
        """Cut these members' power at once: every server of theirs SIGKILLed first (an outage takes them together:
        none goes on writing while another's page cache is lost), then what each member's layers never had fsynced
        dropped; what was dropped (``bytes``, ``files``, ``entries``), by member. :meth:`start_members` brings them back."""
        names = list(names)
        if not self.layered:
            raise EnvironmentFailure(f"{self.kind}: the members run on no power-loss layer (on_powerfs)")
        for name in names:
            for server in self.members[name].servers:
                server.kill()
            self.down.add(name)
        dropped: dict[str, dict[str, int]] = {}
        for name in names:
            total: Counter[str] = Counter()
            for layer in self.layers[name]:
                owner = next(s for s in self.members[name].servers if s.layer is layer)
                total.update(owner.power_cut(torn))  # any child of it still working in its folder killed too
            dropped[name] = dict(total)
        return dropped

    def start_members(self, names: Iterable[str]) -> None:
        """Start these members again together (a data centre back on): each as :meth:`start_member`, side by side,
        since a member may only answer once a quorum of them is up."""
        names = list(names)
        if len(names) == 1:
            self.start_member(names[0])
            return
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for future in [pool.submit(self.start_member, name) for name in names]:
                future.result()

    # ---------------------------------------------------------------- what the faults do

    def member_names(self) -> list[str]:
        return list(self.members)

    def kill_member(self, name: str) -> None:
        """SIGKILL the member's servers (a crashed host); :meth:`start_member` brings it back on the same data."""
        for server in self.members[name].servers:
            server.kill()
        self.down.add(name)

    def start_member(self, name: str) -> None:
        for server in self.members[name].servers:
            server.start()
        self.down.discard(name)

    def pause_member(self, name: str) -> None:
        for server in self.members[name].servers:
            server.pause()

    def resume_member(self, name: str) -> None:
        for server in self.members[name].servers:
            server.resume()

    def partition(self, links: Iterable[tuple[str, str]]) -> None:
        """Cut these links between members (both ways), besides those other faults cut now."""
        assert self.network is not None
        self._cuts.update(_link(a, b) for a, b in links)
        self.network.partition(+self._cuts)

    def heal_partition(self, links: Iterable[tuple[str, str]] | None = None) -> None:
        """Mend the links one fault cut (a link another fault still cuts stays cut); None: every link."""
        if links is None:
            self._cuts.clear()
        else:
            self._cuts.subtract(_link(a, b) for a, b in links)
        if self.network is not None:
            self.network.partition(+self._cuts)

    def down_members(self) -> list[str]:
        """The members killed and not started again."""
        return sorted(self.down)

    def skew_member(self, name: str, offset_ms: float) -> None:
        """Set one member's clock ``offset_ms`` ahead of the host's (0: back); its servers must be under libfaketime."""
        for server in self.members[name].servers:
            skew = getattr(server, "skew", None)
            if skew is None:
                raise EnvironmentFailure(f"{self.kind}: member {name} does not run under libfaketime")
            skew(offset_ms)

    def heal_all(self) -> None:
        """Every link whole, every member that is up resumed and its clock back to the host's (heal-all's last word)."""
        self.heal_partition()
        for name, member in self.members.items():
            if name in self.down:
                continue
            for server in member.servers:
                server.resume()
                if self.skewable and hasattr(server, "skew"):
                    server.skew(0.0)

    def describe(self) -> dict[str, Any]:
        """The members and their addresses, the primary now: for the history's header and the report."""
        return {
            "kind": self.kind,
            "members": {name: m.host.address for name, m in self.members.items()},
            "primary": self.primary() if self.network is not None else None,
        }

    def log_paths(self) -> list[Path]:
        return [server.log_path for member in self.members.values() for server in member.servers]
