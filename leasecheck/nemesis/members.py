"""Faults between the members of a replicated store: Jepsen's partitions, a lost primary, a failover, a skewed member.

Every fault here acts on the run's cluster through
:class:`~leasecheck.nemesis.context.ClusterControl` (the members are hosts of
their own, :mod:`leasecheck.servers.hosts`), names the members it hit in its
event (``victims``: member names, never worker numbers) and says what the
cluster looked like (``primary`` before; ``cut``: the links cut, ``groups``: the
sides a partition made), so the report can draw it. The shapes are Jepsen's
(``jepsen.nemesis``): the primary isolated from every other member; the members
split into a random minority and majority; a *bridge* (two sides that cannot
see each other and one member that sees both). Only links between members are
cut: the workers reach every member throughout, as clients on a network whose
core, not edge, is split. A primary is always asked of the cluster when the
fault starts, never remembered, since the cluster moves it on its own.

Each class follows :class:`~leasecheck.nemesis.protocol.Fault`; the ``make_*``
functions are the catalogue's factories. What ``leasecheck heal`` can undo after
the harness died: a paused member (SIGCONT of its pids); partitions, skews and
killed members go with the cluster's hosts, which the hosts' guard deletes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the report and the checker's explanations import member_label cheaply
    from leasecheck.nemesis.context import ClusterControl, FaultContext


def _links(sides: list[list[str]]) -> list[tuple[str, str]]:
    """Every link between members of different sides."""
    return sorted((a, b) if a < b else (b, a) for i, side in enumerate(sides) for other in sides[i + 1:]
                  for a in side for b in other)


@dataclass
class MemberPartition:
    """Cut ``links`` between members (both ways) until healed; ``groups`` are the sides, for the history."""

    name: str
    cluster: ClusterControl
    links: list[tuple[str, str]]
    groups: list[list[str]]
    primary: str | None
    active: bool = False

    def _value(self) -> dict[str, Any]:
        victims = sorted({m for link in self.links for m in link})
        return {"victims": victims, "groups": self.groups, "cut": [list(link) for link in self.links],
                "primary": self.primary}

    def start(self) -> dict[str, Any]:
        self.active = True  # from the moment it is tried: a start whose host was lost may have been done in part
        self.cluster.partition(self.links)
        return self._value()

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.cluster.heal_partition(self.links)  # only ours: an overlapping partition keeps its own cuts
        self.active = False  # only once undone: a heal its host failed under is tried again (the schedule's unhealed)
        return {**self._value(), "primary": self.cluster.primary()}

    def undo_record(self) -> dict[str, Any] | None:
        return None  # the rules live in the members' namespaces, which go with the cluster


@dataclass
class MemberFault:
    """Kill or pause one member (its store server and companions) through the cluster; undone at the heal."""

    name: str
    member: str
    inflict: Callable[[str], None]
    undo: Callable[[str], None]
    primary: str | None
    #: asked at the heal: the primary then (a Sentinel or an election may have moved it meanwhile)
    now_primary: Callable[[], str | None]
    record: dict[str, Any] | None = None
    active: bool = False

    def start(self) -> dict[str, Any]:
        self.active = True  # from the moment it is tried (see MemberPartition.start)
        self.inflict(self.member)
        return {"victims": [self.member], "primary": self.primary}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.undo(self.member)
        self.active = False
        return {"victims": [self.member], "primary": self.now_primary()}

    def undo_record(self) -> dict[str, Any] | None:
        return self.record if self.active else None


@dataclass
class Failover:
    """The cluster's own failover (SENTINEL FAILOVER, a promoted standby, a leadership transfer); its heal rebuilds."""

    cluster: ClusterControl
    name: str = "failover"
    moved: dict[str, Any] = field(default_factory=dict)
    active: bool = False

    def start(self) -> dict[str, Any]:
        self.moved = self.cluster.failover()
        self.active = True
        return {"victims": [m for m in (self.moved.get("from"),) if m], **self.moved}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.active = False
        rebuilt = self.cluster.heal_failover() or {}
        return {"victims": [m for m in (self.moved.get("from"),) if m], **rebuilt, "primary": self.cluster.primary()}

    def undo_record(self) -> dict[str, Any] | None:
        return None


@dataclass
class MemberClockSkew:
    """One member's clock ``delta_ms`` off the host's (libfaketime), back to +0 at the heal."""

    cluster: ClusterControl
    member: str
    delta_ms: float
    name: str = "clock-member"
    active: bool = False

    def start(self) -> dict[str, Any]:
        self.active = True  # from the moment it is tried (see MemberPartition.start)
        self.cluster.skew_member(self.member, self.delta_ms)
        return {"victims": [self.member], "delta_ms": self.delta_ms, "primary": self.cluster.primary()}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.cluster.skew_member(self.member, 0.0)
        self.active = False
        return {"victims": [self.member]}

    def undo_record(self) -> dict[str, Any] | None:
        return None


def member_label(value: dict[str, Any]) -> str:
    """A cluster fault's start event in a few characters, for the report and explanations; '' for other faults.

    ``m1 | m2 m3``: a partition's sides; ``m1 → m2``: a failover; ``m1``: a member killed or paused;
    ``m2 +120 ms``: a member's clock.
    """
    groups = value.get("groups")
    if isinstance(groups, list) and all(isinstance(g, list) for g in groups):
        return " | ".join(" ".join(map(str, g)) for g in groups)
    if isinstance(value.get("from"), str) and isinstance(value.get("to"), str):
        return f"{value['from']} \u2192 {value['to']}"
    victims = [v for v in value.get("victims", ()) if isinstance(v, str)] if isinstance(value.get("victims"), list) else []
    if not victims:
        return ""
    delta = value.get("delta_ms")
    return " ".join(victims) + (f" {delta:+g} ms" if isinstance(delta, (int, float)) else "")


# ---------------------------------------------------------------- the catalogue's factories


def _members(ctx: FaultContext) -> tuple[ClusterControl, list[str]] | None:
    cluster = ctx.cluster
    return None if cluster is None else (cluster, sorted(cluster.member_names()))


def make_isolate_primary(ctx: FaultContext, rng: random.Random) -> MemberPartition | None:
    """The catalogue's ``isolate-primary``: every link of the primary to another member cut (None while it has none)."""
    found = _members(ctx)
    if found is None:
        return None
    cluster, members = found
    primary = cluster.primary()
    if primary is None:
        return None
    others = [m for m in members if m != primary]
    return MemberPartition("isolate-primary", cluster, _links([[primary], others]), [[primary], others], primary)


def make_partition_halves(ctx: FaultContext, rng: random.Random) -> MemberPartition | None:
    """The catalogue's ``partition-halves``: a random minority cut from the majority (Jepsen's random halves)."""
    found = _members(ctx)
    if found is None or len(found[1]) < 2:
        return None
    cluster, members = found
    shuffled = rng.sample(members, len(members))
    minority, majority = sorted(shuffled[: len(members) // 2]), sorted(shuffled[len(members) // 2:])
    return MemberPartition("partition-halves", cluster, _links([minority, majority]), [minority, majority], cluster.primary())


def make_partition_bridge(ctx: FaultContext, rng: random.Random) -> MemberPartition | None:
    """The catalogue's ``partition-bridge``: two sides that cannot see each other, and one member that sees both.

    With three members: one link cut, the third member the bridge; a cluster of two has no bridge (None).
    """
    found = _members(ctx)
    if found is None or len(found[1]) < 3:
        return None
    cluster, members = found
    shuffled = rng.sample(members, len(members))
    bridge, rest = shuffled[0], shuffled[1:]
    left, right = sorted(rest[: len(rest) // 2]), sorted(rest[len(rest) // 2:])
    return MemberPartition("partition-bridge", cluster, _links([left, right]), [left, [bridge], right], cluster.primary())


def _primary_fault(ctx: FaultContext, name: str, kill: bool) -> MemberFault | None:
    """The primary, killed or paused; None while a member is already down: the fault loses *the primary*, and a
    second loss would take a majority of three (or both of two), which no failover can survive."""
    cluster = ctx.cluster
    if cluster is None or cluster.down_members():
        return None
    primary = cluster.primary()
    if primary is None:
        return None
    if kill:
        return MemberFault(name, primary, cluster.kill_member, cluster.start_member, primary, cluster.primary)
    return MemberFault(name, primary, cluster.pause_member, cluster.resume_member, primary, cluster.primary)


def make_kill_primary(ctx: FaultContext, rng: random.Random) -> MemberFault | None:
    """The catalogue's ``kill-primary``: the primary's host crashes (SIGKILL), and starts again on its data at the heal."""
    return _primary_fault(ctx, "kill-primary", kill=True)


def make_pause_primary(ctx: FaultContext, rng: random.Random) -> MemberFault | None:
    """The catalogue's ``pause-primary``: the primary's host stops (SIGSTOP: a VM freeze, a long GC), then goes on."""
    return _primary_fault(ctx, "pause-primary", kill=False)


def make_failover(ctx: FaultContext, rng: random.Random) -> Failover | None:
    """The catalogue's ``failover``: the cluster moves its primary role its own way.

    None while it has no primary or a member is down (killed, or a failed-over primary not yet rebuilt): there
    may be no member to fail over to.
    """
    cluster = ctx.cluster
    if cluster is None or cluster.down_members() or cluster.primary() is None:
        return None
    return Failover(cluster)


def make_clock_member(ctx: FaultContext, rng: random.Random) -> MemberClockSkew | None:
    """The catalogue's ``clock-member``: one member's clock (the primary's half the time) skewed by up to ±store_skew."""
    found = _members(ctx)
    if found is None or ctx.store_skew_ms <= 0:
        return None
    cluster, members = found
    aim, anyone, sign, size = rng.random(), rng.choice(members), rng.choice((-1, 1)), rng.uniform(0.5, 1.0)  # always 4 draws
    primary = cluster.primary()
    member = primary if primary is not None and aim < 0.5 else anyone
    delta = sign * size * ctx.store_skew_ms
    return MemberClockSkew(cluster, member, round(delta, 1))
