"""Coverage of the protocol's dangerous interleavings (issue 10, part 1).

Each situation gets a small hand-written history that reaches it exactly once,
and near misses that reach it zero times: the op one nanosecond on the wrong
side of each bound, an op while the new holder's end is in flight. Then the
plumbing: the catalogue's required situations, the run verdict naming the
missing ones, ``check --json`` and the corpus.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from handwritten import MS, TTL, UNCERTAINTY, History
from paths import REPO

from leasecheck.checker.coverage import Coverage
from leasecheck.histories.vocabulary import SITUATIONS, WORKLOAD_SITUATIONS, ZOMBIE_FUNCTIONS, ZOMBIE_PHASES
from leasecheck.nemesis.catalogue import CATALOGUE, lookup
from leasecheck.run.deadline import Deadline
from leasecheck.verdict.situations import applicable, coverage_gaps, coverage_json
from leasecheck.verdict.tails import CoverageTail

EXAMPLES = REPO / "histories" / "examples"
ZOMBIES = [f"zombie-{f}-{phase}" for f in ZOMBIE_FUNCTIONS for phase in ZOMBIE_PHASES]


def zombie_counts(h: History) -> dict[str, int]:
    cov = h.coverage()
    return {s: cov[s] for s in ZOMBIES if cov[s]}


# ---------------------------------------------------------------- zombies


def takeover(new_effect: int | None = None, new_end: tuple[str, int, int | None, str] | None = None) -> History:
    """Lease 1 (process 1) granted at 1 ms, lease 2 (process 2) granted at 201 ms; then lease 2's effect and end."""
    h = History().claim(1, 0, 1 * MS, epoch=1).claim(2, 200 * MS, 201 * MS, epoch=2)
    if new_effect is not None:
        h.of(2, "effect", new_effect, new_effect + MS, 2)
    if new_end is not None:
        f, start, end, typ = new_end
        h.of(2, f, start, end, 2, typ)
    return h


@pytest.mark.parametrize("f", ZOMBIE_FUNCTIONS)
def test_a_zombie_op_in_each_phase_counts_once(f: str) -> None:
    before = takeover().of(1, f, 202 * MS, 203 * MS, 1)
    assert zombie_counts(before) == {f"zombie-{f}-before-new-effect": 1}
    running = takeover(new_effect=210 * MS).of(1, f, 220 * MS, 221 * MS, 1)
    assert zombie_counts(running) == {f"zombie-{f}-while-new-runs": 1}
    for end in ("commit", "release"):
        ended = takeover(new_effect=210 * MS, new_end=(end, 230 * MS, 231 * MS, "ok")).of(1, f, 240 * MS, 241 * MS, 1)
        assert zombie_counts(ended) == {f"zombie-{f}-after-new-ends": 1}


@pytest.mark.parametrize("typ", ["ok", "fail", "info", None])
def test_every_zombie_op_counts_whatever_its_outcome(typ: str | None) -> None:
    h = takeover().of(1, "commit", 202 * MS, None if typ is None else 203 * MS, 1, typ or "info")
    assert zombie_counts(h) == {"zombie-commit-before-new-effect": 1}


def test_an_op_invoked_when_the_newer_claim_completes_is_no_zombie() -> None:
    assert zombie_counts(takeover().of(1, "renew", 201 * MS, 202 * MS, 1)) == {}
    assert zombie_counts(takeover().of(1, "renew", 201 * MS + 1, 202 * MS, 1)) == {"zombie-renew-before-new-effect": 1}


def test_the_new_holders_effect_must_be_invoked_before_the_zombie_op() -> None:
    same_time = takeover(new_effect=220 * MS).of(1, "effect", 220 * MS, 221 * MS, 1)
    assert zombie_counts(same_time) == {"zombie-effect-before-new-effect": 1}
    one_ns_later = takeover(new_effect=220 * MS).of(1, "effect", 220 * MS + 1, 221 * MS, 1)
    assert zombie_counts(one_ns_later) == {"zombie-effect-while-new-runs": 1}


def test_an_op_while_the_new_holders_end_is_in_flight_counts_in_no_phase() -> None:
    in_flight = takeover(new_effect=210 * MS, new_end=("commit", 230 * MS, 250 * MS, "ok"))
    assert zombie_counts(in_flight.of(1, "commit", 240 * MS, 241 * MS, 1)) == {}
    at_completion = takeover(new_effect=210 * MS, new_end=("commit", 230 * MS, 250 * MS, "ok"))
    assert zombie_counts(at_completion.of(1, "commit", 250 * MS, 251 * MS, 1)) == {}
    after = takeover(new_effect=210 * MS, new_end=("commit", 230 * MS, 250 * MS, "ok"))
    assert zombie_counts(after.of(1, "commit", 250 * MS + 1, 251 * MS, 1)) == {"zombie-commit-after-new-ends": 1}
    refused = takeover(new_effect=210 * MS, new_end=("release", 230 * MS, 231 * MS, "fail"))
    assert zombie_counts(refused.of(1, "renew", 240 * MS, 241 * MS, 1)) == {}


def test_the_newest_of_several_newer_leases_sets_the_phase() -> None:
    h = takeover(new_effect=210 * MS, new_end=("commit", 230 * MS, 231 * MS, "ok"))
    h.claim(3, 300 * MS, 301 * MS, epoch=3)  # granted after lease 2 committed (a broken store; coverage does not judge)
    assert zombie_counts(h.of(1, "effect", 310 * MS, 311 * MS, 1)) == {"zombie-effect-before-new-effect": 1}


def test_only_the_claimers_own_read_is_a_zombie_read() -> None:
    assert zombie_counts(takeover().of(1, "read", 202 * MS, 203 * MS, None)) == {"zombie-read-before-new-effect": 1}
    assert zombie_counts(takeover().of(3, "read", 202 * MS, 203 * MS, None)) == {}
    assert zombie_counts(takeover().of(2, "read", 202 * MS, 203 * MS, None)) == {}  # the new holder's: the newest lease


def test_an_op_of_the_newest_lease_is_no_zombie() -> None:
    assert zombie_counts(takeover().of(2, "effect", 202 * MS, 203 * MS, 2)) == {}


def test_unfenced_leases_are_newer_by_grant_order_and_token() -> None:
    def unfenced(second_invoke: int, token: str) -> History:
        h = History().claim(1, 0, 10 * MS, token="a").claim(2, second_invoke, 201 * MS, token=token)
        return h.of(1, "commit", 202 * MS, 203 * MS, None, token="a")

    assert zombie_counts(unfenced(200 * MS, "b")) == {"zombie-commit-before-new-effect": 1}
    assert zombie_counts(unfenced(10 * MS, "b")) == {}  # invoked when lease "a" was granted: not after it
    assert zombie_counts(unfenced(10 * MS + 1, "b")) == {"zombie-commit-before-new-effect": 1}
    # a token shared by two workers: a lease is named by its grant, so the other worker's claim replaced it
    assert zombie_counts(unfenced(200 * MS, "a")) == {"zombie-commit-before-new-effect": 1}
    again = History().claim(1, 0, 10 * MS, token="a").claim(1, 200 * MS, 201 * MS, token="a")
    assert zombie_counts(again.of(1, "commit", 202 * MS, 203 * MS, None, token="a")) == {}  # one worker's reused token


# ---------------------------------------------------------------- claims


def test_two_claims_racing_for_a_ready_node() -> None:
    assert History().claim(1, 0, 10 * MS, epoch=1).claim(2, 5 * MS, 12 * MS, typ="fail").coverage()["claim-race-ready"] == 1
    # the second invoked when the first completed: not concurrent
    assert History().claim(1, 0, 10 * MS, epoch=1).claim(2, 10 * MS, 12 * MS, typ="fail").coverage()["claim-race-ready"] == 0
    # three at once: each later claim once
    three = History().claim(1, 0, 10 * MS, epoch=1).claim(2, 1, 10 * MS, typ="fail").claim(3, 2, None, typ="info")
    assert three.coverage()["claim-race-ready"] == 2


def ready_again(release_done: int, release: str = "ok") -> History:
    """Lease 1 granted, released (ok at ``release_done``), then two claims racing from 300 ms."""
    h = History().claim(1, 0, MS, epoch=1).of(1, "release", 250 * MS, release_done, 1, release)
    return h.claim(2, 300 * MS, 310 * MS, epoch=2).claim(3, 305 * MS, 311 * MS, typ="fail")


def test_a_node_is_ready_again_only_once_its_lease_was_released() -> None:
    assert ready_again(251 * MS).coverage()["claim-race-ready"] == 1
    assert ready_again(300 * MS).coverage()["claim-race-ready"] == 0  # released when the first claim was invoked
    assert ready_again(251 * MS, "fail").coverage()["claim-race-ready"] == 0
    held = History().claim(1, 0, MS, epoch=1).claim(2, 300 * MS, 310 * MS, epoch=2).claim(3, 305 * MS, 311 * MS, typ="fail")
    assert held.coverage()["claim-race-ready"] == 0


def held(claim_at: int, *ops: tuple[str, int, int | None, str]) -> int:
    """claim-while-held of a claim at ``claim_at``; lease 1 granted at 1 ms (invoked at 0), with ``ops`` of it."""
    h = History().claim(1, 0, MS, epoch=1)
    for f, start, end, typ in ops:
        h.of(1, f, start, end, 1, typ)
    return h.claim(2, claim_at, claim_at + MS, typ="fail").coverage()["claim-while-held"]


def test_a_claim_while_a_lease_is_surely_held() -> None:
    bound = (TTL - UNCERTAINTY) * MS  # T = 0 (the claim's invoke)
    assert held(bound - 1) == 1
    assert held(bound) == 0
    assert held(MS // 2) == 0  # the lease not yet granted


def test_a_renew_extends_the_held_window_from_its_invoke_once_it_completed() -> None:
    assert held(100 * MS, ("renew", 50 * MS, 99 * MS, "ok")) == 1  # T = 50 ms: held until 140 ms
    assert held(140 * MS, ("renew", 50 * MS, 99 * MS, "ok")) == 0
    assert held(100 * MS, ("renew", 50 * MS, 100 * MS, "ok")) == 0  # completed at the claim's invoke: not before
    assert held(100 * MS, ("renew", 50 * MS, 60 * MS, "fail")) == 0


def test_a_lease_whose_end_was_invoked_is_not_held() -> None:
    assert held(40 * MS, ("release", 30 * MS, 31 * MS, "fail")) == 0
    assert held(40 * MS, ("release", 40 * MS, 41 * MS, "ok")) == 1  # invoked at the claim's invoke: not before


def after_expiry(claim_at: int, *ops: tuple[str, int, int | None, str]) -> int:
    """claim-after-expiry of a claim at ``claim_at``; lease 1 granted at 1 ms, with ``ops`` of it."""
    h = History().claim(1, 0, MS, epoch=1)
    for f, start, end, typ in ops:
        h.of(1, f, start, end, 1, typ)
    return h.claim(2, claim_at, claim_at + MS, epoch=2).coverage()["claim-after-expiry"]


def test_a_claim_on_a_lease_that_surely_expired() -> None:
    bound = (1 + TTL + UNCERTAINTY) * MS  # G = 1 ms
    assert after_expiry(bound + 1) == 1
    assert after_expiry(bound) == 0


def test_an_ok_renew_moves_the_expiry_and_a_pending_one_rules_it_out() -> None:
    assert after_expiry(162 * MS, ("renew", 50 * MS, 52 * MS, "ok")) == 0  # G = 52 ms
    assert after_expiry(162 * MS + 1, ("renew", 50 * MS, 52 * MS, "ok")) == 1
    assert after_expiry(112 * MS, ("renew", 50 * MS, 51 * MS, "fail")) == 1
    assert after_expiry(180 * MS, ("renew", 150 * MS, 200 * MS, "fail")) == 0  # in flight at the claim
    assert after_expiry(180 * MS, ("renew", 150 * MS, 180 * MS, "fail")) == 0  # completes at the claim's invoke
    assert after_expiry(300 * MS, ("renew", 50 * MS, 60 * MS, "info")) == 0  # may take effect at any time


def test_a_claim_after_the_lease_ended_is_not_after_expiry() -> None:
    assert after_expiry(300 * MS, ("release", 50 * MS, 51 * MS, "fail")) == 0
    assert after_expiry(300 * MS, ("commit", 300 * MS, 301 * MS, "ok")) == 1  # invoked with the claim: not before


# ---------------------------------------------------------------- faults


def lease_1(*nemesis: tuple[int, str, dict[str, Any]], renew: tuple[int, int] | None = None, end_at: int | None = None,
            claimed: tuple[int, int] = (0, MS)) -> Coverage:
    """Lease 1 (process 1) claimed over ``claimed`` (ns), with a renew and an end if given, under ``nemesis`` events."""
    h = History().claim(1, claimed[0], claimed[1], epoch=1)
    if renew is not None:
        h.of(1, "renew", renew[0], renew[1], 1)
    if end_at is not None:
        h.of(1, "commit", end_at, end_at + MS, 1)
    for t, f, value in nemesis:
        h.nemesis(t, f, **value)
    return h.coverage()


def store_fault(*nemesis: tuple[int, str, dict[str, Any]], renew: tuple[int, int] | None = None,
                end_at: int | None = None) -> int:
    """lease-expires-during-store-fault of lease 1 (granted at 1 ms: deadline 101 ms), with ``nemesis`` events."""
    return lease_1(*nemesis, renew=renew, end_at=end_at)["lease-expires-during-store-fault"]


def ended_in_the_outage(*ends: tuple[str, int, str]) -> int:
    """lease-expires-during-store-fault of lease 1 (deadline 101 ms) in a store pause of 90-150 ms, its holder trying
    to end it with ``ends`` (f, invoke, type), each answered a ms later."""
    h = History().claim(1, 0, MS, epoch=1)
    for f, at, typ in ends:
        h.of(1, f, at, at + MS, 1, typ)
    for t, f, value in pause_store(90 * MS, 150 * MS):
        h.nemesis(t, f, **value)
    return h.coverage()["lease-expires-during-store-fault"]


def pause_store(start: int, heal: int | None) -> list[tuple[int, str, dict[str, Any]]]:
    events = [(start, "pause", {"fault": "pause-store", "victims": ["store"]})]
    return events + ([(heal, "resume", {"fault": "pause-store", "victims": ["store"]})] if heal is not None else [])


def test_a_lease_that_expires_while_the_store_is_paused() -> None:
    deadline = 101 * MS
    assert store_fault(*pause_store(90 * MS, 150 * MS)) == 1
    assert store_fault(*pause_store(90 * MS, None)) == 1  # never healed: to the end
    assert store_fault(*pause_store(deadline, 150 * MS)) == 0
    assert store_fault(*pause_store(deadline - 1, 150 * MS)) == 1
    assert store_fault(*pause_store(90 * MS, deadline)) == 0
    assert store_fault(*pause_store(90 * MS, deadline + 1)) == 1


def test_the_deadline_counts_renews_completed_before_it() -> None:
    assert store_fault(*pause_store(90 * MS, 120 * MS), renew=(40 * MS, 50 * MS)) == 0  # deadline 150 ms
    assert store_fault(*pause_store(140 * MS, 160 * MS), renew=(40 * MS, 50 * MS)) == 1
    assert store_fault(*pause_store(90 * MS, 120 * MS), renew=(60 * MS, 101 * MS)) == 1  # completed at the deadline: too late


def test_a_lease_ended_before_its_deadline_does_not_expire() -> None:
    assert store_fault(*pause_store(90 * MS, 150 * MS), end_at=100 * MS) == 0
    assert store_fault(*pause_store(90 * MS, 150 * MS), end_at=101 * MS) == 1


def test_a_commit_the_store_refused_leaves_the_lease_held_to_its_deadline() -> None:
    """A holder that tries to finish in the outage and is refused (the store unreachable) did not end the store's
    lease: its deadline still falls in the fault. One never answered (info) may have ended it: not counted."""
    assert ended_in_the_outage(("commit", 95 * MS, "fail"), ("release", 97 * MS, "fail")) == 1
    assert ended_in_the_outage(("commit", 95 * MS, "fail"), ("release", 97 * MS, "info")) == 0
    assert ended_in_the_outage(("commit", 95 * MS, "ok")) == 0
    assert ended_in_the_outage(("commit", 95 * MS, "fail"), ("release", 101 * MS, "ok")) == 1  # sent at the deadline


def test_only_store_side_faults_count_and_each_lease_once() -> None:
    worker_pause = [(90 * MS, "pause", {"fault": "pause", "victims": [1]}), (150 * MS, "resume", {"fault": "pause", "victims": [1]})]
    assert store_fault(*worker_pause) == 0
    latency = [(90 * MS, "latency", {"fault": "latency"}), (150 * MS, "heal", {"fault": "latency"})]
    assert store_fault(*latency) == 1  # a store-side fault (it needs a store server), though no fault requires it
    assert store_fault(*pause_store(90 * MS, 150 * MS), *pause_store(95 * MS, 140 * MS)) == 1


def test_a_worker_replacement_never_heals_a_store_kill() -> None:
    kill = [(90 * MS, "kill", {"fault": "kill-store", "victims": ["store"]}),
            (95 * MS, "start", {"victims": [9], "replaces": 3}),
            (150 * MS, "start", {"fault": "kill-store", "victims": ["store"]})]
    assert store_fault(*kill) == 1


def test_histories_without_fault_names_tell_store_faults_by_their_victims() -> None:
    legacy_store = [(90 * MS, "kill", {"targets": ["store"]}), (150 * MS, "start", {"targets": ["store"]})]
    assert store_fault(*legacy_store) == 1
    legacy_worker = [(90 * MS, "pause", {"processes": [1]}), (150 * MS, "resume", {"processes": [1]})]
    assert store_fault(*legacy_worker) == 0


def skewed(*nemesis: tuple[int, str, dict[str, Any]]) -> int:
    """lease-held-by-skewed-worker: lease 1 of process 1, granted at 1 ms, committed at 50 ms."""
    h = History().claim(1, 0, MS, epoch=1).of(1, "commit", 50 * MS, 51 * MS, 1)
    for t, f, value in nemesis:
        h.nemesis(t, f, **value)
    return h.coverage()["lease-held-by-skewed-worker"]


def clock(fault: str, start: int, reset: int | None, victims: list[Any]) -> list[tuple[int, str, dict[str, Any]]]:
    events = [(start, "clock-skew", {"fault": fault, "victims": victims, "delta_ms": 500})]
    return events + ([(reset, "clock-reset", {"fault": fault, "victims": victims})] if reset is not None else [])


@pytest.mark.parametrize("fault", ["clock-bump", "clock-strobe"])
def test_a_lease_held_by_a_worker_whose_clock_is_skewed(fault: str) -> None:
    assert skewed(*clock(fault, 40 * MS, 200 * MS, [1])) == 1
    assert skewed(*clock(fault, 40 * MS, None, [1])) == 1
    assert skewed(*clock(fault, 49 * MS, 200 * MS, [1])) == 1
    assert skewed(*clock(fault, 50 * MS, 200 * MS, [1])) == 0  # skewed from the commit's invoke on: ended
    assert skewed(*clock(fault, 0, MS, [1])) == 0  # reset when the claim completed: never held while skewed
    assert skewed(*clock(fault, 0, MS + 1, [1])) == 1
    assert skewed(*clock(fault, 40 * MS, 200 * MS, [2])) == 0  # another worker
    assert skewed(*clock(fault, 10 * MS, 20 * MS, [1]), *clock(fault, 30 * MS, 45 * MS, [1])) == 1  # each lease once


def test_a_store_clock_skew_is_not_a_skewed_worker() -> None:
    assert skewed(*clock("clock-store", 40 * MS, 200 * MS, ["store"])) == 0


# ---------------------------------------------------------------- a cluster's members


def member_fault(fault: str, start: int, heal: int | None, **value: Any) -> list[tuple[int, str, dict[str, Any]]]:
    from leasecheck.nemesis.catalogue import FAULTS

    start_f, heal_f = FAULTS[fault].events
    events = [(start, start_f, {"fault": fault, "victims": ["m1"], **value})]
    return events + ([(heal, heal_f, {"fault": fault, "victims": ["m1"]})] if heal is not None else [])


@pytest.mark.parametrize("fault", ["failover", "kill-primary", "pause-primary", "isolate-primary"])
def test_a_lease_granted_within_a_ttl_before_the_primary_was_lost(fault: str) -> None:
    granted = MS
    assert lease_1(*member_fault(fault, granted + 50 * MS, 300 * MS))["lease-granted-before-primary-lost"] == 1
    assert lease_1(*member_fault(fault, granted + TTL * MS, 300 * MS))["lease-granted-before-primary-lost"] == 1
    assert lease_1(*member_fault(fault, granted + TTL * MS + 1, 300 * MS))["lease-granted-before-primary-lost"] == 0
    assert lease_1(*member_fault(fault, granted, 300 * MS))["lease-granted-before-primary-lost"] == 0  # granted as it was lost
    assert lease_1(*member_fault(fault, 50 * MS, 300 * MS), end_at=40 * MS)["lease-granted-before-primary-lost"] == 0  # ended


def test_a_partition_of_members_alone_loses_no_primary() -> None:
    for fault in ("partition-halves", "partition-bridge"):
        assert lease_1(*member_fault(fault, 50 * MS, 300 * MS))["lease-granted-before-primary-lost"] == 0


@pytest.mark.parametrize("fault", ["failover", "kill-primary"])
def test_a_lease_renewed_across_a_failover(fault: str) -> None:
    assert lease_1(*member_fault(fault, 50 * MS, 60 * MS), renew=(70 * MS, 80 * MS))["lease-renewed-across-failover"] == 1
    assert lease_1(*member_fault(fault, 50 * MS, 60 * MS), renew=(40 * MS, 80 * MS))["lease-renewed-across-failover"] == 0
    late = lease_1(*member_fault(fault, 50 * MS, 60 * MS), renew=(70 * MS, 80 * MS), claimed=(55 * MS, 56 * MS))
    assert late["lease-renewed-across-failover"] == 0  # granted after the failover: nothing to carry across
    refused = History().claim(1, 0, MS, epoch=1).of(1, "renew", 70 * MS, 80 * MS, 1, typ="fail")
    for t, f, value in member_fault(fault, 50 * MS, 60 * MS):
        refused.nemesis(t, f, **value)
    assert refused.coverage()["lease-renewed-across-failover"] == 1  # attempted across it: the store's answer is judged


@pytest.mark.parametrize("fault", ["isolate-primary", "partition-halves", "partition-bridge"])
def test_a_claim_granted_during_a_partition_of_the_members(fault: str) -> None:
    def during(start: int, heal: int | None) -> int:
        return lease_1(*member_fault(fault, start, heal), claimed=(10 * MS, 20 * MS))["claim-during-member-partition"]

    assert during(5 * MS, 30 * MS) == 1
    assert during(10 * MS, None) == 1
    assert during(11 * MS, 30 * MS) == 0  # invoked before the cut
    assert during(5 * MS, 20 * MS) == 1  # granted as it healed: invoked during the cut is what counts
    assert during(5 * MS, 10 * MS) == 0  # healed as it was invoked
    stalled = History().claim(1, 10 * MS, None, typ="info")  # a synchronous cluster stalls a claim while cut
    for t, f, value in member_fault(fault, 5 * MS, 30 * MS):
        stalled.nemesis(t, f, **value)
    assert stalled.coverage()["claim-during-member-partition"] == 1


def test_the_member_faults_require_their_situations() -> None:
    assert applicable(lookup(["failover"]))[-2:] == ["lease-granted-before-primary-lost", "lease-renewed-across-failover"]
    assert "claim-during-member-partition" in applicable(lookup(["partition-halves"]))
    assert applicable(lookup(["clock-member"])) == list(WORKLOAD_SITUATIONS)


# ---------------------------------------------------------------- the whole


def test_the_vocabulary_and_the_catalogue_agree() -> None:
    assert SITUATIONS[:15] == tuple(ZOMBIES) and len(WORKLOAD_SITUATIONS) == 18
    assert SITUATIONS[18:22] == ("zombie-op-while-new-lapsed", "op-in-flight-across-claim", "late-write-across-claim",
                                 "lagging-clock-claim-on-recent-node")
    assert SITUATIONS[22:27] == ("lease-expires-during-store-fault", "lease-held-by-skewed-worker",
                               "lease-granted-before-primary-lost", "lease-renewed-across-failover",
                               "claim-during-member-partition")
    for kind in CATALOGUE:
        assert set(kind.situations) <= set(SITUATIONS), kind.name
    assert [s for s in applicable(lookup(["pause", "partition"])) if "-inside-" not in s] == [*WORKLOAD_SITUATIONS, "zombie-op-while-new-lapsed",
                                                          "op-in-flight-across-claim", "late-write-across-claim",
                                                          "lease-expires-during-store-fault"]
    assert applicable(()) == list(WORKLOAD_SITUATIONS)


def test_coverage_helpers() -> None:
    h = takeover().of(1, "commit", 202 * MS, 203 * MS, 1)
    cov = h.coverage()
    assert cov.reached == ("zombie-commit-before-new-effect", "claim-after-expiry")
    assert cov.missing(["claim-after-expiry", "claim-race-ready"]) == ["claim-race-ready"]
    assert cov.summary(WORKLOAD_SITUATIONS).startswith("coverage: 2/18 situations reached; never: zombie-renew-before-new-effect, ")
    assert Coverage().summary(["claim-race-ready"]) == "coverage: 0/1 situations reached; never: claim-race-ready"
    assert cov.summary(["claim-after-expiry"]) == "coverage: 1/1 situations reached"
    obj = coverage_json(cov, lookup(["pause", "latency"]))
    assert list(obj["counts"]) == list(SITUATIONS) and obj["counts"]["claim-after-expiry"] == 1
    assert [s for s in obj["applicable"] if "-inside-" not in s] == [*WORKLOAD_SITUATIONS, "zombie-op-while-new-lapsed",
                                                                   "op-in-flight-across-claim", "late-write-across-claim"]
    assert obj["required"] == {"pause": ["claim-after-expiry"], "latency": []}
    sought = {fault: [s for s in seeks if "-inside-" not in s] for fault, seeks in obj["sought"].items()}
    assert sought == {"pause": ["zombie-op-while-new-lapsed", "op-in-flight-across-claim", "late-write-across-claim"],
                      "latency": ["op-in-flight-across-claim", "late-write-across-claim"]}
    assert "claim-after-expiry" not in obj["missing"] and "claim-race-ready" in obj["missing"]


def test_a_fault_whose_situation_never_happened_is_named() -> None:
    cov = History().claim(1, 0, MS, epoch=1).coverage()
    assert coverage_gaps(cov, lookup(["pause", "latency", "pause-store"])) == [
        "pause: claim-after-expiry never happened",
        "pause-store: lease-expires-during-store-fault never happened",
    ]
    assert coverage_gaps(takeover().coverage(), lookup(["pause"])) == []


def test_coverage_of_a_growing_history_is_recomputed_at_most_every_second_or_twice_its_cost(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    now = [0.0]
    tail = CoverageTail(path, clock=lambda: now[0])
    assert tail.poll() == Coverage()  # no file yet
    History().claim(1, 0, MS, epoch=1).write(path)
    now[0] = 0.5
    assert tail.poll()["claim-after-expiry"] == 0  # the last computation (at 0 s) is less than 1 s old
    now[0] = 1.0
    assert tail.poll()["claim-after-expiry"] == 0  # the lease has not expired yet
    takeover().write(path)
    now[0] = 1.9
    assert tail.poll()["claim-after-expiry"] == 0
    now[0] = 2.0
    assert tail.poll()["claim-after-expiry"] == 1

    readings = iter([10.0, 13.0, 15.0, 16.0, 16.5])  # a computation that takes 3 s, then one that takes 0.5 s
    tail = CoverageTail(path, clock=lambda: next(readings))
    assert tail.poll()["claim-after-expiry"] == 1  # from 10 s to 13 s: due again at 10 + 2 × 3 = 16 s
    History().claim(1, 0, MS, epoch=1).write(path)
    assert tail.poll()["claim-after-expiry"] == 1  # at 15 s: the old count
    assert tail.poll()["claim-after-expiry"] == 0  # at 16 s: recomputed


def test_check_json_carries_the_coverage(tmp_path: Path) -> None:
    path = takeover().of(1, "commit", 202 * MS, 203 * MS, 1).write(tmp_path / "h.jsonl")
    done = subprocess.run([sys.executable, "-m", "leasecheck", "check", "--json", str(path)], capture_output=True, text=True, timeout=120)
    obj = json.loads(done.stdout)
    assert done.returncode == 1 and obj["valid"] is False  # the zombie's commit was accepted: stale-commit
    assert obj["coverage"]["counts"]["zombie-commit-before-new-effect"] == 1
    assert list(obj["coverage"]["counts"]) == list(SITUATIONS)
    assert obj["coverage"]["missing"] == [s for s in WORKLOAD_SITUATIONS if s not in ("zombie-commit-before-new-effect", "claim-after-expiry")]


def test_check_names_what_the_headers_faults_required(tmp_path: Path) -> None:
    h = History(nemesis=["pause-store", "no-such-fault"]).claim(1, 0, MS, epoch=1)
    path = h.write(tmp_path / "h.jsonl")
    done = subprocess.run([sys.executable, "-m", "leasecheck", "check", "--coverage", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "coverage: 0/19 situations reached; never: zombie-renew-before-new-effect, " in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].split() == ["lease-expires-during-store-fault", "0", "never"]
    assert "lease-held-by-skewed-worker" not in done.stdout


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.jsonl")))
def test_check_of_every_example_prints_its_coverage(name: str) -> None:
    done = subprocess.run([sys.executable, "-m", "leasecheck", "check", str(EXAMPLES / name)], capture_output=True, text=True, timeout=120)
    if name.startswith("bad-input-"):
        assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr
        return
    assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr, done.stderr
    assert "coverage: " in done.stdout and "situations reached" in done.stdout


def test_a_deadline_counts_the_situations_of_the_checker_following_the_run_and_of_the_file_if_it_failed(tmp_path: Path) -> None:
    """A soak's deadline must not count situations from the whole file (it would hold the history at once): it asks
    the checker that follows the run; when that checker failed (None), it counts them from the file."""
    path = takeover().write(tmp_path / "history.jsonl")  # one claim after expiry, in the file
    answer: list[Coverage | None] = [Coverage({"claim-after-expiry": 7})]
    end = Deadline(path, lookup(["pause"]), (), time_limit=0, longest_s=10, now=0, coverage=lambda: answer[0])
    assert end.reached()["claim-after-expiry"] == 7
    answer[0] = None
    assert end.reached()["claim-after-expiry"] == 1


def test_a_deadline_reads_the_evidence_as_the_history_grows(tmp_path: Path) -> None:
    """So that the end of an hour's run reads its last second, not the hour."""
    path = takeover().write(tmp_path / "history.jsonl")
    end = Deadline(path, lookup(["pause"]), (), time_limit=100, longest_s=110, now=0)
    assert not end.passed(0.5)
    assert end.tail.evidence.ok["claim"] == 2 and end.tail.evidence.takeovers == 1


# ---------------------------------------------------------------- the windows of issue 25


def test_a_zombie_op_while_the_newer_lease_lapsed() -> None:
    """Lease 2 granted at 201 ms (ttl 100, uncertainty 10): lapsed strictly after 311 ms, while nothing renews or ends it."""
    def lapsed(h: History) -> int:
        return h.coverage()["zombie-op-while-new-lapsed"]

    assert lapsed(takeover().of(1, "effect", 312 * MS, 313 * MS, 1)) == 1
    assert lapsed(takeover().of(1, "commit", 312 * MS, 313 * MS, 1, typ="fail")) == 1  # whatever its outcome
    assert lapsed(takeover().of(1, "effect", 311 * MS, 313 * MS, 1)) == 0  # one bound: not strictly past G + ttl + u
    assert lapsed(takeover().of(1, "read", 312 * MS, 313 * MS, None)) == 0  # a read carries no lease
    renewed = takeover().of(2, "renew", 249 * MS, 250 * MS, 2)
    assert lapsed(renewed.of(1, "effect", 312 * MS, 313 * MS, 1)) == 0  # renewed until 360 ms
    assert lapsed(renewed.of(1, "effect", 361 * MS, 362 * MS, 1)) == 1
    pending = takeover().of(2, "renew", 300 * MS, None, 2, typ="info")
    assert lapsed(pending.of(1, "effect", 312 * MS, 313 * MS, 1)) == 0  # a renew that may yet land
    ended = takeover(new_end=("release", 250 * MS, 251 * MS, "ok"))
    assert lapsed(ended.of(1, "effect", 312 * MS, 313 * MS, 1)) == 0  # given back: nothing lapsed
    reclaimed = takeover().claim(3, 304 * MS, 305 * MS, epoch=3)
    assert lapsed(reclaimed.of(1, "effect", 312 * MS, 313 * MS, 1)) == 0  # re-claimed: the newest lease is fresh


def test_a_zombie_of_a_repeated_epoch_is_named_by_its_grant() -> None:
    """A store that grants epoch 1 twice: the first holder's ops after the second grant are still a zombie's."""
    h = History().claim(1, 0, 1 * MS, epoch=1).claim(2, 200 * MS, 201 * MS, epoch=1)
    assert zombie_counts(h.of(1, "effect", 202 * MS, 203 * MS, 1)) == {"zombie-effect-before-new-effect": 1}
    assert zombie_counts(History().claim(1, 0, 1 * MS, epoch=1).claim(2, 200 * MS, 201 * MS, epoch=1)
                         .of(2, "effect", 202 * MS, 203 * MS, 1)) == {}  # the new holder's own
    back = History().claim(1, 0, 1 * MS, epoch=7).claim(2, 200 * MS, 201 * MS, epoch=5)  # an epoch that went back
    assert zombie_counts(back.of(1, "commit", 202 * MS, 203 * MS, 7)) == {"zombie-commit-before-new-effect": 1}
    assert History().claim(1, 0, 1 * MS, epoch=1).claim(2, 200 * MS, 201 * MS, epoch=1).of(
        1, "effect", 312 * MS, 313 * MS, 1).coverage()["zombie-op-while-new-lapsed"] == 1


def across(f: str, start_ms: float, end_ms: float | None, typ: str = "ok", claim: tuple[int, str] = (2, "ok"),
           lease_ops: tuple[tuple[str, float, float, str], ...] = ()) -> tuple[int, int]:
    """(op-in-flight-across-claim, late-write-across-claim) of an ``f`` of lease 1 over [start_ms, end_ms].

    Lease 1 (process 1) claimed from 0 to 1 ms with ``lease_ops`` of it (ms); then ``claim`` = (its process, its outcome)
    over [100, 110] ms. ttl 100 ms and uncertainty 5 ms: with no renew, lease 1 is surely live before 95 ms and its last
    tenth begins at 90 ms.
    """
    h = History(uncertainty_ms=5).claim(1, 0, MS, epoch=1)
    for g, a, b, t in lease_ops:
        h.of(1, g, int(a * MS), int(b * MS), 1, typ=t)
    h.of(1, f, int(start_ms * MS), None if end_ms is None else int(end_ms * MS), 1, typ=typ)
    cov = h.claim(claim[0], 100 * MS, 110 * MS, epoch=2, typ=claim[1]).coverage()
    return cov["op-in-flight-across-claim"], cov["late-write-across-claim"]


def test_a_write_under_a_live_lease_in_flight_across_a_rivals_grant() -> None:
    """The op is sent while its lease is surely live, and the rival's grant (110 ms) falls strictly inside it."""
    assert across("effect", 92, 130) == (1, 1)  # sent in the last tenth: late too
    assert across("effect", 50, 130) == (1, 0)  # live, not late
    assert across("commit", 92, 130, typ="fail") == (1, 1)  # refused after the grant: it was in flight across it
    assert across("effect", 90, 130) == (1, 1)  # the last tenth begins at T + 0.9 ttl, inclusive
    assert across("effect", 89.999999, 130) == (1, 0)
    assert across("effect", 92, 110) == (0, 0)  # came back as the claim did: not across it
    assert across("effect", 92, 110.000001) == (1, 1)
    assert across("effect", 92, None, typ="info") == (0, 0)  # never came back: not known to have been in flight then
    assert across("renew", 92, 130) == (0, 0)  # a heartbeat writes nothing
    assert across("effect", 92, 130, claim=(2, "fail")) == (0, 0)  # a refused claim grants nothing


def test_a_zombies_write_is_not_in_flight_across_a_claim() -> None:
    """The near misses: an op sent once its lease may have run out (a zombie's, refused at its check), or after its end."""
    assert across("effect", 95, 130) == (0, 0)  # at T + ttl − uncertainty: the lease may have lapsed
    assert across("effect", 94.999999, 130) == (1, 1)
    assert across("effect", 99, 130, typ="fail") == (0, 0)  # a zombie, refused: what the old count took for the window
    assert across("commit", 105, 130, typ="fail") == (0, 0)  # sent as the rival's claim was on its way: a zombie's
    assert across("effect", 50, 130, lease_ops=(("release", 40, 41, "fail"),)) == (0, 0)  # its lease ended before


def test_a_renew_moves_the_live_lease_only_once_it_came_back() -> None:
    renewed = (("renew", 60, 61, "ok"),)  # T = 60 ms: surely live before 155 ms, its last tenth from 150 ms
    assert across("effect", 99, 130, lease_ops=renewed) == (1, 0)
    assert across("effect", 150, 160, lease_ops=renewed) == (0, 0)  # the rival's grant at 110 ms is before it
    refused = (("renew", 60, 61, "fail"),)
    assert across("effect", 99, 130, lease_ops=refused) == (0, 0)


def test_a_late_write_across_a_renewed_lease() -> None:
    h = History(uncertainty_ms=5).claim(1, 0, MS, epoch=1).of(1, "renew", 60 * MS, 61 * MS, 1)
    h.of(1, "effect", 152 * MS, 190 * MS, 1, typ="fail").claim(2, 170 * MS, 180 * MS, epoch=2)
    cov = h.coverage()
    assert (cov["op-in-flight-across-claim"], cov["late-write-across-claim"]) == (1, 1)


def lagging(claim: tuple[float, float], *nemesis: tuple[float, str, dict[str, Any]], claimer: int = 2, typ: str = "ok",
            earlier: tuple[tuple[int, float, float], ...] = ((1, 0, 1),)) -> int:
    """lagging-clock-claim-on-recent-node of a claim by ``claimer`` over ``claim`` (ms), after the ``earlier`` grants
    (process, invoke, completion, ms), under ``nemesis`` events (ms)."""
    h = History()
    for epoch, (p, a, b) in enumerate(earlier, start=1):
        h.claim(p, int(a * MS), int(b * MS), epoch=epoch)
    h.claim(claimer, int(claim[0] * MS), int(claim[1] * MS), epoch=len(earlier) + 1, typ=typ)
    for t, f, value in nemesis:
        h.nemesis(int(t * MS), f, **value)
    return h.coverage()["lagging-clock-claim-on-recent-node"]


def bump(delta_ms: float, start: float = 150, reset: float = 400, victims: tuple[int, ...] = (2,)) -> list[tuple[float, str, dict[str, Any]]]:
    return [(start, "clock-skew", {"fault": "clock-bump", "victims": list(victims), "delta_ms": delta_ms}),
            (reset, "clock-reset", {"fault": "clock-bump", "victims": list(victims)})]


def test_a_claim_granted_while_its_clock_reads_before_the_nodes_last_grant() -> None:
    """Process 1 was granted at 1 ms; process 2's clock is set 500 ms behind from 150 to 400 ms."""
    assert lagging((200, 201), *bump(-500)) == 1
    assert lagging((200, 201), *bump(500)) == 0  # a clock ahead is not behind
    assert lagging((200, 201), *bump(-200)) == 0  # 200 ms behind, the grant 200 ms before the claim's: not more
    assert lagging((199, 200), *bump(-200)) == 1
    assert lagging((120, 121), *bump(-500)) == 0  # before the skew
    assert lagging((150, 151), *bump(-500)) == 1  # invoked at the skew's stamp: the skew acted no later
    assert lagging((390, 394), *bump(-500)) == 1
    assert lagging((390, 395), *bump(-500)) == 0  # granted within EVENT_LAG of the reset's stamp: it may have been reset
    assert lagging((200, 201), *bump(-500), claimer=3) == 0  # not the skewed worker
    assert lagging((200, 201), *bump(-500, victims=(2,)), earlier=((2, 0, 1),)) == 0  # only its own grant before
    # its own grant is the latest; the latest to another process is the one that counts
    assert lagging((200, 201), *bump(-500), earlier=((1, 0, 1), (2, 100, 101))) == 1


def test_a_refused_lagging_claim_is_not_the_window() -> None:
    assert lagging((200, 201), *bump(-500), typ="fail") == 0
    assert lagging((200, 201), *bump(-500), typ="info") == 0


def strobe(delta_ms: float = -500, period_ms: float = 20, duration_s: float = 0.3) -> list[tuple[float, str, dict[str, Any]]]:
    value = {"fault": "clock-strobe", "victims": [2], "delta_ms": delta_ms, "period_ms": period_ms, "duration_s": duration_s}
    return [(150, "clock-skew", value), (500, "clock-reset", {"fault": "clock-strobe", "victims": [2]})]


def test_a_strobe_counts_only_claims_inside_its_behind_half_periods() -> None:
    """From 150 ms, behind in [150, 170), [190, 210), ... and the true time in between; over at 450 ms."""
    assert lagging((192, 194), *strobe()) == 1
    assert lagging((172, 174), *strobe()) == 0  # the strobe showed the true time
    assert lagging((190, 204.9), *strobe()) == 1
    assert lagging((200, 205), *strobe()) == 0  # may have flipped back before it was granted (EVENT_LAG)
    assert lagging((168, 172), *strobe()) == 0  # across a flip
    assert lagging((470, 472), *strobe()) == 0  # an even half-period, but the strobe was over
    assert lagging((192, 194), *strobe(delta_ms=500)) == 0
