"""The member faults choose their victims and shapes as Jepsen's nemeses do, from the seed, and undo what they did.

The cluster here is a recorder of what the faults asked of it (who is primary, which links to cut):
the faults' own logic is what is under test; what a real cluster does with a cut link or a failover
is held by tests/test_cluster_*.py against real Redis, Postgres, etcd and ZooKeeper members.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from leasecheck.nemesis.catalogue import FAULTS, Need
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.members import member_label


@dataclass
class Cluster:
    """What the faults asked of a cluster, in order; its primary moves only when asked to."""

    members: list[str]
    leader: str | None = "m1"
    kind: str = "recorded"
    cut: list[tuple[str, str]] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def member_names(self) -> list[str]:
        return list(self.members)

    def primary(self) -> str | None:
        return self.leader

    def kill_member(self, name: str) -> None:
        self.calls.append(("kill", name))

    def start_member(self, name: str) -> None:
        self.calls.append(("start", name))

    def pause_member(self, name: str) -> None:
        self.calls.append(("pause", name))

    def resume_member(self, name: str) -> None:
        self.calls.append(("resume", name))

    def partition(self, links: Iterable[tuple[str, str]]) -> None:
        self.cut = sorted(links)
        self.calls.append(("partition", self.cut))

    def heal_partition(self, links: Iterable[tuple[str, str]] | None = None) -> None:
        self.cut = []
        self.calls.append(("heal", None if links is None else sorted(links)))

    def down_members(self) -> list[str]:
        return [name for call, name in self.calls if call == "kill"][-1:]

    def failover(self) -> dict[str, Any]:
        old, self.leader = self.leader, "m2"
        self.calls.append(("failover", old))
        return {"from": old, "to": "m2"}

    def heal_failover(self) -> dict[str, Any] | None:
        self.calls.append(("rebuild", None))
        return {"rebuilt": "m1"}

    def skew_member(self, name: str, offset_ms: float) -> None:
        self.calls.append(("skew", (name, offset_ms)))


def make(fault: str, cluster: Cluster, seed: int = 1, skew: float = 250.0) -> Any:
    ctx = FaultContext(ttl_ms=1000, cluster=cluster, store_skew_ms=skew)
    return FAULTS[fault].make(ctx, random.Random(seed))


def test_every_member_fault_needs_a_cluster_and_is_none_without_one() -> None:
    members = [k for k in FAULTS.values() if Need.CLUSTER in k.needs]
    assert [k.name for k in members] == ["isolate-primary", "partition-halves", "partition-bridge", "kill-primary",
                                        "pause-primary", "failover", "clock-member",
                                            "power-loss-member", "power-loss-all"]
    for kind in members:
        assert kind.make(FaultContext(ttl_ms=1000, store_skew_ms=250.0), random.Random(1)) is None, kind.name


def test_isolate_primary_cuts_every_link_of_the_primary_and_only_those() -> None:
    cluster = Cluster(["m1", "m2", "m3"], leader="m2")
    fault = make("isolate-primary", cluster)
    value = fault.start()
    assert cluster.cut == [("m1", "m2"), ("m2", "m3")]
    assert value["groups"] == [["m2"], ["m1", "m3"]] and value["primary"] == "m2" and value["victims"] == ["m1", "m2", "m3"]
    assert member_label(value) == "m2 | m1 m3"
    assert fault.heal() is not None and cluster.cut == [] and fault.heal() is None  # healed once


def test_no_primary_no_isolation() -> None:
    assert make("isolate-primary", Cluster(["m1", "m2", "m3"], leader=None)) is None
    assert make("kill-primary", Cluster(["m1", "m2", "m3"], leader=None)) is None


def test_halves_split_a_minority_from_the_majority_by_the_seed() -> None:
    shapes = set()
    for seed in range(30):
        cluster = Cluster(["m1", "m2", "m3"])
        value = make("partition-halves", cluster, seed).start()
        minority, majority = value["groups"]
        assert len(minority) == 1 and len(majority) == 2 and set(minority) | set(majority) == {"m1", "m2", "m3"}
        assert cluster.cut == sorted(tuple(sorted((minority[0], m))) for m in majority)
        shapes.add(minority[0])
    assert shapes == {"m1", "m2", "m3"}
    again = [make("partition-halves", Cluster(["m1", "m2", "m3"]), 7).start()["groups"] for _ in range(2)]
    assert again[0] == again[1]  # the same seed, the same shape


def test_a_bridge_cuts_one_link_of_three_and_a_pair_has_no_bridge() -> None:
    cluster = Cluster(["m1", "m2", "m3"])
    value = make("partition-bridge", cluster, 3).start()
    left, bridge, right = value["groups"]
    assert len(cluster.cut) == 1 and cluster.cut[0] == tuple(sorted((left[0], right[0])))
    assert bridge[0] not in cluster.cut[0]
    assert make("partition-bridge", Cluster(["m1", "m2"])) is None
    pair = make("partition-halves", Cluster(["m1", "m2"]))
    assert pair is not None and pair.start()["groups"] in ([["m1"], ["m2"]], [["m2"], ["m1"]])


@pytest.mark.parametrize("fault, inflict, undo", [("kill-primary", "kill", "start"), ("pause-primary", "pause", "resume")])
def test_the_primary_is_killed_or_paused_then_brought_back(fault: str, inflict: str, undo: str) -> None:
    cluster = Cluster(["m1", "m2", "m3"], leader="m3")
    f = make(fault, cluster)
    assert f.start() == {"victims": ["m3"], "primary": "m3"}
    cluster.leader = "m1"  # the cluster failed over meanwhile
    assert f.heal() == {"victims": ["m3"], "primary": "m1"}
    assert cluster.calls == [(inflict, "m3"), (undo, "m3")]


def test_a_failover_names_both_members_and_its_heal_rebuilds() -> None:
    cluster = Cluster(["m1", "m2"])
    f = make("failover", cluster)
    value = f.start()
    assert value == {"victims": ["m1"], "from": "m1", "to": "m2"} and member_label(value) == "m1 \u2192 m2"
    assert f.heal() == {"victims": ["m1"], "rebuilt": "m1", "primary": "m2"}
    assert cluster.calls == [("failover", "m1"), ("rebuild", None)]


def test_a_member_clock_is_skewed_within_the_bound_and_reset() -> None:
    seen = set()
    for seed in range(20):
        cluster = Cluster(["m1", "m2", "m3"])
        f = make("clock-member", cluster, seed, skew=200.0)
        value = f.start()
        (member,) = value["victims"]
        assert 100.0 <= abs(value["delta_ms"]) <= 200.0
        f.heal()
        assert cluster.calls == [("skew", (member, value["delta_ms"])), ("skew", (member, 0.0))]
        seen.add(member)
    assert "m1" in seen and len(seen) == 3  # the primary half the time, anyone the other half
    assert make("clock-member", Cluster(["m1"]), skew=0.0) is None
