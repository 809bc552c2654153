"""The seed's verification table against every backend, with real servers.

Every reference backend, fenced or not, keeps every promise; every
deliberately broken variant breaks the one that matches its bug (and the test
says which, so a variant that silently got fixed, or a scenario that stopped
biting, turns red).

The registered variants are all fenced, so the scenarios that unfenced stores
get wrong are also held against small unfenced variants of the reference token
lease defined here: a release that does not check the token (the classic
``DEL lock`` unlock) and a heartbeat that adds its ttl to the old expiry. And a
correct token store that words its refusals differently (``expired`` where the
reference says ``stale``) must still pass: a scenario judges what happened,
not the store's vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from stores import Store
from variants import broken_variants

from leasecheck.kit.conformance import RESTARTING, SCENARIOS
from leasecheck.kit.scenario_outcomes import Result, supersedes
from leasecheck.kit.scenarios_ownership import judge_race
from leasecheck.targets.base import Lease, Refused
from leasecheck.targets.redis_token_lease import TOKEN_PRELUDE, RedisTokenLease
from leasecheck.targets.registry import TargetSpec, available, load

#: every registered backend that declares no bug and is no third party's (those are audited: AUDITS.md):
#: the fenced references and the unfenced redis-token
REFERENCES = sorted(name for name in available() if not load(name).bug and getattr(load(name), "audit", None) is None)

#: broken variant -> the scenario its bug must fail, and a word its evidence must contain
BROKEN = {
    "sqlite-ttl-only": ("zombie", "commit -> ok"),
    "sqlite-non-atomic-claim": ("race", "did not have exactly one winner"),
    "postgres-fence-in-memory": ("zombie", "commit -> ok"),
    "postgres-client-clock": ("skewed-client", "took the live lease"),
    "redis-queue-as-authority": ("duplicate-delivery", "both deliveries own the node"),
    "redis-no-increment": ("epochs-increase", "after epoch"),
    "sqlite-swallowed-heartbeat": ("zombie", "renew -> ok"),
    "sqlite-release-any-epoch": ("zombie-release", "freed the new holder's lease"),
    "sqlite-fence-at-commit": ("zombie", "effect -> ok"),
    "sqlite-cached-read": ("zombie", "read shows a lease the store no longer has"),
    "postgres-grace-after-failover": ("expiry-across-restart", "stuck-lease"),
    "sqlite-renew-worker-clock": ("skewed-renew", "premature-expiry"),
    "sqlite-fence-follows-writes": ("resource", "is below epoch"),
    "sqlite-write-behind-effects": ("resource", "but accepted"),
    "sqlite-stamped-by-node": ("resource", "but the resource lists it as"),
    "sqlite-live-lease-guard": ("zombie-after-lapse", "-> ok"),
}
#: broken variants no sequential scenario can reach, and where their bug is caught instead
RUN_ONLY = {
    "sqlite-check-then-write-effect": "its effect checks the lease, then writes a round trip later: only a worker paused "
                                      "in between writes late (tests/runs/test_run.py runs it under pause)",
}


class ReleaseAnyTokenRedis(RedisTokenLease):
    """BROKEN release-any-token: the release deletes whatever lease the node has, without checking the token."""

    name = "test-redis-token-release-any"
    bug = "release frees the node whoever holds it: a zombie's release frees the new holder's lease"
    RELEASE_GUARD = "status == 'RUNNING'"


class AccumulatingRenewRedis(RedisTokenLease):
    """BROKEN accumulating heartbeat: each renew adds a ttl to the old expiry instead of to the server's now."""

    name = "test-redis-token-accumulating-renew"
    bug = "each heartbeat extends the old expiry by a ttl: a lease outlives its owner's last heartbeat by many ttls"
    RENEWED_EXPIRY = "expires + tonumber(ARGV[2])"


_STALE = "if holder ~= token then return {'stale', 'token ' .. token .. ' is not the current holder'} end"
assert _STALE in TOKEN_PRELUDE


class SaysExpiredRedis(RedisTokenLease):
    """A correct token lease that tells a superseded token ``expired`` (it cannot know there was a newer claim)."""

    name = "test-redis-token-says-expired"
    PRELUDE = TOKEN_PRELUDE.replace(_STALE, "if holder ~= token then return {'expired', 'not the current lease'} end")


def _local(cls: type[RedisTokenLease]) -> str:
    """The ``module:Class`` name of a variant defined here, as a TargetSpec (and a spawned process) loads it."""
    return f"{__name__}:{cls.__name__}"


#: unfenced variants of this module -> the scenario its bug must fail, and a word its evidence must contain
LOCAL_BROKEN = {
    _local(ReleaseAnyTokenRedis): ("zombie-release", "freed the new holder's lease"),
    _local(AccumulatingRenewRedis): ("stuck-lease", "stuck-lease"),
}


def run(scenario: str, spec: TargetSpec, store: Store) -> Result:
    fn = SCENARIOS[scenario]
    return fn(spec, store.restart) if scenario in RESTARTING else fn(spec)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("target", REFERENCES)
def test_reference_backend_keeps_the_promise(target: str, scenario: str, store_for: Callable[[str], Store]) -> None:
    store = store_for(target)
    r = run(scenario, store.spec(target), store)
    assert r.held, f"{target} broke {scenario}: {r.detail}"


def test_the_references_include_an_unfenced_backend() -> None:
    """The table must be run against both kinds of lease, or an unfenced bug in a scenario goes unseen."""
    assert {"sqlite", "postgres", "redis", "redis-token"} <= set(REFERENCES)
    assert {load(name).fenced for name in REFERENCES} == {True, False}


@pytest.mark.parametrize("target", [cls.name for cls in broken_variants()] + list(LOCAL_BROKEN))
def test_broken_variant_fails_the_scenario_of_its_bug(target: str, store_for: Callable[[str], Store]) -> None:
    table = {**BROKEN, **LOCAL_BROKEN}
    if target in RUN_ONLY:
        pytest.skip(RUN_ONLY[target])
    assert target in table, f"{target} ({load(target).bug}) has no conformance scenario: add the one its bug fails to BROKEN"
    scenario, evidence = table[target]
    store = store_for(target)
    r = run(scenario, store.spec(target), store)
    assert not r.held, f"{target} was expected to fail {scenario}, but: {r.detail}"
    assert evidence in r.detail, r.detail


@pytest.mark.parametrize("target", list(LOCAL_BROKEN))
def test_an_unfenced_variant_breaks_only_its_own_promise_among_the_zombie_and_expiry_scenarios(
    target: str, store_for: Callable[[str], Store]
) -> None:
    """Each local variant differs from the reference by one rule: the other new scenario still passes it."""
    own, _ = LOCAL_BROKEN[target]
    store = store_for(target)
    for scenario in {"zombie", "zombie-release", "stuck-lease"} - {own}:
        r = run(scenario, store.spec(target), store)
        assert r.held, f"{target} broke {scenario}, not only {own}: {r.detail}"


@pytest.mark.parametrize("scenario", ["zombie", "zombie-release", "crash-takeover"])
def test_a_superseded_token_refused_as_expired_counts_as_refused(scenario: str, store_for: Callable[[str], Store]) -> None:
    target = _local(SaysExpiredRedis)
    store = store_for(target)
    r = run(scenario, store.spec(target), store)
    assert r.held, r.detail
    if scenario == "zombie":
        assert r.facts == {"renew": "expired", "commit": "expired", "effect": "expired"}


def test_race_counts_every_round(store_for: Callable[[str], Store]) -> None:
    """The race scenario really races: 50 rounds, each reported by both processes."""
    store = store_for("sqlite")
    r = run("race", store.spec("sqlite"), store)
    assert (r.facts["rounds"], r.facts["bad"]) == (50, 0) and r.held, r.detail
    broken = run("race", store.spec("sqlite-non-atomic-claim"), store)
    assert broken.facts["bad"] >= 25  # the 20 ms think time loses most races


def test_a_race_won_twice_proves_a_double_grant_only_while_the_first_lease_was_surely_live() -> None:
    """Seen beside two CPU-bound processes: sherlock's 1 s lock won twice, the second racer held back past the ttl."""
    a, b = Lease("n", "a", None, "t-a"), Lease("n", "b", None, "t-b")
    held = Refused("held")
    one = {f"n/{i}": [("a", a, 0.0, 0.01), ("b", held, 0.0, 0.02)] for i in range(4)}
    assert judge_race(one, ttl_s=1.0).held
    overlapping = {**one, "n/0": [("a", a, 0.0, 0.01), ("b", b, 0.0, 0.99)]}
    r = judge_race(overlapping, ttl_s=1.0)
    assert not r.held and r.facts["bad"] == 1 and "while the first lease was surely live" in r.detail, r.detail
    late = {**one, "n/0": [("a", a, 0.0, 0.01), ("b", b, 0.0, 1.2)]}  # b's answer came after a's lease may have ended
    r = judge_race(late, ttl_s=1.0)
    assert r.held and (r.facts["bad"], r.facts["late"]) == (0, 1) and "1 more were won twice" in r.detail, r.detail
    held_back_first = {**one, "n/0": [("a", a, 0.0, 1.5), ("b", b, 0.1, 0.2)]}  # a may have been granted after b's ended
    r = judge_race(held_back_first, ttl_s=1.0)
    assert r.held and (r.facts["bad"], r.facts["late"]) == (0, 1), r.detail
    mostly_late = {f"n/{i}": [("a", a, 0.0, 0.01), ("b", b, 0.0, 1.5)] for i in range(3)} | {"n/3": one["n/3"]}
    r = judge_race(mostly_late, ttl_s=1.0)
    assert not r.held and r.facts["bad"] == 0 and "too few to tell" in r.detail, r.detail  # tested too little: no pass
    nobody = {**one, "n/1": [("a", held, 0.0, 0.01), ("b", held, 0.0, 0.01)]}
    assert not judge_race(nobody, ttl_s=1.0).held


def test_an_unfenced_race_is_won_by_the_granted_lease_not_by_an_epoch(store_for: Callable[[str], Store]) -> None:
    """Seen on main: every unfenced race had "no winner", because only an integer epoch counted as a win."""
    store = store_for("redis-token")
    r = run("race", store.spec("redis-token"), store)
    assert r.held and (r.facts["rounds"], r.facts["bad"]) == (50, 0), r.detail


def test_an_unfenced_crash_takeover_names_both_tokens(store_for: Callable[[str], Store]) -> None:
    """Seen on main: "the first claim did not succeed: None" for a claim that had succeeded with a token."""
    store = store_for("redis-token")
    r = run("crash-takeover", store.spec("redis-token"), store)
    assert r.held, r.detail
    old, new = r.facts["old"], r.facts["new"]
    assert old["epoch"] is None and new["epoch"] is None and old["token"] != new["token"]


def test_stuck_lease_tells_a_lease_that_ends_on_time_from_one_that_lingers(store_for: Callable[[str], Store]) -> None:
    """The reference token store frees the node within ttl + margin of the last heartbeat; the accumulating one
    is still held after it, and the evidence says how long."""
    store = store_for("redis-token")
    ok = run("stuck-lease", store.spec("redis-token"), store)
    ttl = store.spec("redis-token").config.ttl_ms / 1000
    assert ok.held and ok.facts["refusals"] >= 1 and ok.facts["granted_after_s"] <= 1.5 * ttl + 0.05 + 0.1, ok.detail
    stuck = run("stuck-lease", store.spec(_local(AccumulatingRenewRedis)), store)
    assert not stuck.held and stuck.facts["held_for_s"] > 1.5 * ttl, stuck.detail


@pytest.mark.parametrize(
    "new, old, later",
    [
        (Lease("n", "b", 2), Lease("n", "a", 1), True),
        (Lease("n", "b", 1), Lease("n", "a", 1), False),
        (Lease("n", "b", None, "t2"), Lease("n", "a", None, "t1"), True),
        (Lease("n", "b", None, "t1"), Lease("n", "a", None, "t1"), False),
        (Lease("n", "b", None, None), Lease("n", "a", None, "t1"), False),
        (Lease("n", "b", 2), Lease("n", "a", None, "t1"), False),  # a backend that fences only sometimes
    ],
)
def test_supersedes_compares_epochs_when_there_are_epochs_and_tokens_otherwise(new: Lease, old: Lease, later: bool) -> None:
    assert supersedes(new, old) is later
