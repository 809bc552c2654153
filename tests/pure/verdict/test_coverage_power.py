"""Coverage of a power loss's window (issue 36): ``granted-before-power-loss`` and ``claim-after-power-loss``.

A power cut loses what the store acknowledged and never fsynced, so a power-loss run tests something only when a lease
was granted in the last unsynced interval before a cut (its claim completed ok after the previous restart, and before
this cut's event) and its node was claimed again once the store came back (a claim the store answered, invoked after
the restart and before the next cut). Each gets small hand-written histories that reach it, and near misses one
nanosecond on the wrong side of each bound; then the plumbing: every power-loss fault requires both, so a run that
never met them is ``unknown`` naming them, and the direct loops and the indexed sweeps count the same.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from handwritten import MS, History

from leasecheck.checker.coverage import node_coverage
from leasecheck.histories import HistoryReader, Op
from leasecheck.nemesis.catalogue import FAULTS, lookup
from leasecheck.verdict.run_verdict import evidence_of, fault_windows, run_verdict
from leasecheck.verdict.situations import applicable, coverage_gaps

POWER = ("granted-before-power-loss", "claim-after-power-loss")
POWER_FAULTS = ("power-loss", "power-loss-member", "power-loss-all")


def power_loss(h: History, cut: int, back: int | None, fault: str = "power-loss") -> History:
    """A power cut at ``cut`` (the ``kill`` event), the restart at ``back`` (the ``start`` event; None: never)."""
    victims: list[Any] = ["store"] if fault == "power-loss" else ["m1"]
    h.nemesis(cut, "kill", fault=fault, victims=victims, dropped={"bytes": 10, "files": 1, "entries": 0})
    if back is not None:
        h.nemesis(back, "start", fault=fault, victims=victims)
    return h


def counts(h: History) -> tuple[int, int]:
    cov = h.coverage()
    return cov["granted-before-power-loss"], cov["claim-after-power-loss"]


@pytest.mark.parametrize("fault", POWER_FAULTS)
def test_a_lease_granted_before_a_power_loss_and_its_node_claimed_after_the_restart(fault: str) -> None:
    h = History().claim(1, 0, 10 * MS, epoch=1).claim(2, 90 * MS, 91 * MS, epoch=2)
    assert counts(power_loss(h, 50 * MS, 80 * MS, fault)) == (1, 1)


def test_granted_means_acknowledged_strictly_between_the_previous_restart_and_the_cut() -> None:
    def granted(done: int) -> int:
        return counts(power_loss(History().claim(1, 0, done, epoch=1), 50 * MS, 80 * MS))[0]

    assert granted(50 * MS - 1) == 1
    assert granted(50 * MS) == 0  # acknowledged as the cut was recorded: maybe after it
    assert granted(60 * MS) == 0  # granted while the store was down (another member answered), not before the cut
    refused = History().claim(1, 0, 10 * MS, typ="fail")  # a refused claim is no lease
    assert counts(power_loss(refused, 50 * MS, 80 * MS))[0] == 0
    unknown = History().claim(1, 0, 10 * MS, typ="info")
    assert counts(power_loss(unknown, 50 * MS, 80 * MS))[0] == 0


def test_the_last_unsynced_interval_starts_at_the_previous_restart() -> None:
    def second_cut(done: int) -> History:
        h = History().claim(1, done - MS, done, epoch=1)
        return power_loss(power_loss(h, 50 * MS, 80 * MS), 150 * MS, 180 * MS)

    assert counts(second_cut(40 * MS))[0] == 1  # before the first cut: that cut's, once
    assert counts(second_cut(80 * MS))[0] == 0  # at the first restart: in neither interval
    assert counts(second_cut(80 * MS + 1))[0] == 1  # just after it: the second cut's
    assert counts(second_cut(120 * MS))[0] == 1


def test_a_claim_after_the_power_loss_is_one_the_restarted_store_answered() -> None:
    def after(start: int, typ: str = "ok", reason: str = "held", node: str = "n") -> int:
        h = History().claim(1, 0, 10 * MS, epoch=1)
        if typ == "fail":
            h.op(2, "claim", start, start + MS, "fail", {"owner": "w2"}, {"reason": reason}, node)
        else:
            h.claim(2, start, start + MS if typ != "info" or start else None, epoch=2, typ=typ, node=node)
        return counts(power_loss(h, 50 * MS, 80 * MS))[1]

    assert after(80 * MS + 1) == 1
    assert after(80 * MS) == 0  # invoked as the restart was recorded: maybe before the store was back
    assert after(60 * MS) == 0  # invoked while the store was down
    assert after(90 * MS, "fail", "held") == 1  # refused by a store that remembered the lease: its answer is judged
    assert after(90 * MS, "fail", "unavailable") == 0  # never reached the store
    assert after(90 * MS, "fail", "error") == 1  # "no such node": a store that lost the node says so
    assert after(90 * MS, "info") == 0
    assert after(90 * MS, node="other") == 0  # a node with no lease granted before the cut


def test_a_claim_counts_after_the_loss_it_follows_until_the_next_cut() -> None:
    h = History().claim(1, 0, 10 * MS, epoch=1).claim(2, 200 * MS, 201 * MS, epoch=2)
    assert counts(power_loss(power_loss(h, 50 * MS, 80 * MS), 150 * MS, 180 * MS)) == (1, 0)  # granted before the
    # first cut, claimed after the second: the second found no lease of the node granted before it
    twice = History().claim(1, 0, 10 * MS, epoch=1).claim(2, 100 * MS, 101 * MS, epoch=2).claim(3, 200 * MS, 201 * MS, epoch=3)
    assert counts(power_loss(power_loss(twice, 50 * MS, 80 * MS), 150 * MS, 180 * MS)) == (2, 2)
    never_back = History().claim(1, 0, 10 * MS, epoch=1).claim(2, 200 * MS, 201 * MS, epoch=2)
    assert counts(power_loss(never_back, 50 * MS, None)) == (1, 0)


def test_other_store_faults_are_no_power_loss() -> None:
    h = History().claim(1, 0, 10 * MS, epoch=1).claim(2, 90 * MS, 91 * MS, epoch=2)
    h.nemesis(50 * MS, "kill", fault="kill-store", victims=["store"]).nemesis(80 * MS, "start", fault="kill-store", victims=["store"])
    assert counts(h) == (0, 0)
    m = History().claim(1, 0, 10 * MS, epoch=1).claim(2, 90 * MS, 91 * MS, epoch=2)
    m.nemesis(50 * MS, "kill", fault="kill-primary", victims=["m1"]).nemesis(80 * MS, "start", fault="kill-primary", victims=["m1"])
    assert counts(m) == (0, 0)


def test_the_loops_and_the_sweeps_count_the_same() -> None:
    h = History()
    for i in range(12):  # a node of many leases, a cut between every few
        h.claim(i % 3, 30 * i * MS, (30 * i + 2) * MS, epoch=i + 1)
        h.op(9, "claim", (30 * i + 5) * MS, (30 * i + 6) * MS, "fail", {"owner": "w9"}, {"reason": "held"})
    for k in range(3):
        power_loss(h, (100 + 120 * k) * MS, (120 + 120 * k) * MS)
    reader = HistoryReader(h.lines())
    by_node: dict[str, list[Op]] = defaultdict(list)
    for op in reader.ops():
        by_node[op.node].append(op)
    store, skewed = fault_windows(reader.nemesis)
    loops = node_coverage(reader.header, by_node.values(), store, skewed, small_ops=1 << 30)
    sweeps = node_coverage(reader.header, by_node.values(), store, skewed, small_ops=0)
    assert loops.to_json() == sweeps.to_json()
    # leases granted at 2, 32, ... 332 ms, each before one cut (at 100, 220, 340 ms); the claims answered after the
    # restarts at 120 and 240 ms, before the next cuts (the third restart, at 360 ms, is followed by none)
    assert loops["granted-before-power-loss"] == 12 and loops["claim-after-power-loss"] == 14


@pytest.mark.parametrize("fault", POWER_FAULTS)
def test_every_power_loss_fault_requires_both(fault: str) -> None:
    assert set(POWER) <= set(FAULTS[fault].situations)
    assert applicable(lookup([fault]))[-2:] == list(POWER)
    never = power_loss(History().claim(1, 0, 10 * MS, epoch=1), 50 * MS, 80 * MS, fault)  # no claim after the restart
    assert coverage_gaps(never.coverage(), lookup([fault])) == [
        f"{fault}: lease-expires-during-store-fault, claim-after-power-loss never happened"]


def test_a_power_loss_run_that_never_met_them_is_unknown_never_valid() -> None:
    def protocol(h: History) -> History:  # an ok claim, renew, effect and commit, and a contended claim
        h.claim(1, 0, 10 * MS, epoch=1).of(1, "renew", 11 * MS, 12 * MS, 1).of(1, "effect", 13 * MS, 14 * MS, 1)
        h.claim(2, 15 * MS, 16 * MS, typ="fail").of(1, "commit", 17 * MS, 18 * MS, 1)
        return h

    h = power_loss(protocol(History()), 50 * MS, 80 * MS)  # a lease granted before it, no claim after the restart
    lines = h.lines()
    cov = h.coverage()
    valid, reason = run_verdict(True, evidence_of(lines), lookup(["power-loss"]), cov)
    assert valid == "unknown" and "claim-after-power-loss never happened" in (reason or ""), reason
    again = power_loss(protocol(History()).claim(3, 90 * MS, 91 * MS, typ="fail"), 50 * MS, 80 * MS)
    assert counts(again) == (1, 1)
    assert not [gap for gap in coverage_gaps(again.coverage(), lookup(["power-loss"])) if "-power-loss" in gap]
