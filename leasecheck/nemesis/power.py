"""Power cuts: the store's server, or members of a cluster, SIGKILLed and every write never fsynced dropped, then started again.

``kill-store`` kills a server's processes, but the kernel keeps every byte they wrote:
only a lost page cache loses what a store acknowledged before it fsynced. This fault
cuts the power of a server that runs on the power-loss layer
(:class:`~leasecheck.nemesis.context.PowerLossServer`), which holds everything unsynced
in its memory and drops it on command. It is recorded like ``kill-store`` (``kill``,
then ``start`` at the heal), and its ``kill`` event says what was dropped: ``bytes``,
``files`` and directory ``entries`` never made durable.

A cluster's members (``power-loss-member``: one, the primary half the time; ``power-loss-all``: every member at once,
a data centre's outage) run on layers of their own when the run's faults need it
(:class:`~leasecheck.nemesis.context.PowerLossCluster`); their cut is recorded like ``kill-primary``'s (the members
as ``victims``, the ``primary`` then) with what each member's layers dropped (``dropped``, by member).

Nothing to undo from outside (``leasecheck heal``): what was lost stays lost, and a
server left down by a killed harness is the guard's and the run folder's to clean up.
"""

from __future__ import annotations

import random
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from leasecheck.nemesis.context import FaultContext, PowerLossCluster, PowerLossServer

#: how long a store or cluster a power cut brought back serves before its power may be cut again, in ttls. The schedule
#: starts the next fault the moment a heal lets go of it, and a slow one (a Postgres cluster's crash recovery on the
#: layers, seconds) left the store up for a tenth of a second between cuts: its clients never came back, and the run
#: never asked it what it kept (claim-after-power-loss). A tick that finds it unsettled keeps its turn for the next
SETTLE_TTLS = 2.0
#: when each store server or cluster came back from its last power cut (time.monotonic())
_BACK_AT: weakref.WeakKeyDictionary[object, float] = weakref.WeakKeyDictionary()


def _came_back(what: object) -> None:
    _BACK_AT[what] = time.monotonic()


def _settled(ctx: FaultContext, what: object) -> bool:
    """Has ``what`` served :data:`SETTLE_TTLS` since its last power cut (or never had one)?"""
    back = _BACK_AT.get(what)
    return back is None or time.monotonic() - back >= ctx.ttl_s(SETTLE_TTLS)


@dataclass
class PowerCut:
    """Cut the store server's power (``start``); bring it back on what survived (``heal``)."""

    server: PowerLossServer
    #: each file's latest unsynced page reaches the disk half written
    torn: bool = False
    victim: str = "store"
    name: str = "power-loss"
    down: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        dropped = self.server.power_cut(self.torn)
        self.down = True
        return {"victims": [self.victim], "dropped": dropped}

    def heal(self) -> dict[str, Any] | None:
        if not self.down:
            return None
        self.down = False
        self.server.start()
        _came_back(self.server)
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return None


def make_power_loss(ctx: FaultContext, rng: random.Random) -> PowerCut | None:
    """The catalogue's ``power-loss``: the store's server, if it runs on the power-loss layer."""
    server = ctx.server
    if not isinstance(server, PowerLossServer) or not server.on_layer or not _settled(ctx, server):
        return None
    return PowerCut(server)


@dataclass
class MemberPowerCut:
    """Cut the power of ``members`` of the cluster at once (``start``); start them all again on what survived (``heal``)."""

    cluster: PowerLossCluster
    members: list[str]
    name: str
    #: the primary when the power was cut (asked of the cluster as the fault was made)
    primary: str | None = None
    torn: bool = False
    down: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        dropped = self.cluster.power_cut_members(self.members, self.torn)
        self.down = True
        return {"victims": list(self.members), "primary": self.primary, "dropped": dropped}

    def heal(self) -> dict[str, Any] | None:
        if not self.down:
            return None
        self.down = False
        self.cluster.start_members(self.members)
        _came_back(self.cluster)
        return {"victims": list(self.members), "primary": self.cluster.primary()}

    def undo_record(self) -> dict[str, Any] | None:
        return None  # the members' layers go with the cluster (and the guard of each, should the harness die)


def _layered(ctx: FaultContext) -> PowerLossCluster | None:
    """The run's cluster if its members are on layers, none is down (a second loss would take a majority) and it has
    settled since its last power cut."""
    cluster = ctx.cluster
    if not isinstance(cluster, PowerLossCluster) or not cluster.on_layers or cluster.down_members() or not _settled(ctx, cluster):
        return None
    return cluster


def make_power_loss_member(ctx: FaultContext, rng: random.Random) -> MemberPowerCut | None:
    """The catalogue's ``power-loss-member``: one member's power cut, the primary's half the time (drawn from the seed)."""
    cluster = _layered(ctx)
    if cluster is None:
        return None
    aim, anyone = rng.random(), rng.choice(sorted(cluster.member_names()))  # always 2 draws
    primary = cluster.primary()
    return MemberPowerCut(cluster, [primary if primary is not None and aim < 0.5 else anyone], "power-loss-member", primary)


def make_power_loss_all(ctx: FaultContext, rng: random.Random) -> MemberPowerCut | None:
    """The catalogue's ``power-loss-all``: every member's power cut at once, and all started again at the heal."""
    cluster = _layered(ctx)
    if cluster is None:
        return None
    return MemberPowerCut(cluster, sorted(cluster.member_names()), "power-loss-all", cluster.primary())
