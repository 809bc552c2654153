"""The seed's verification table against every backend, with real servers.

Every reference backend keeps every promise; every deliberately broken variant
breaks the one that matches its bug (and the test says which, so a variant
that silently got fixed, or a scenario that stopped biting, turns red).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from stores import Store

from leasecheck.conformance import SCENARIOS, Result
from leasecheck.targets.registry import TargetSpec

REFERENCES = ["sqlite", "postgres", "redis"]

#: broken variant -> the scenario its bug must fail, and a word its evidence must contain
BROKEN = {
    "sqlite-ttl-only": ("zombie", "commit -> ok"),
    "sqlite-non-atomic-claim": ("race", "did not have exactly one winner"),
    "postgres-fence-in-memory": ("zombie", "commit -> ok"),
    "postgres-client-clock": ("skewed-client", "took the live lease"),
    "redis-queue-as-authority": ("duplicate-delivery", "both deliveries own the node"),
    "redis-no-increment": ("epochs-increase", "after epoch"),
}


def run(scenario: str, spec: TargetSpec, store: Store) -> Result:
    fn = SCENARIOS[scenario]
    return fn(spec, store.restart) if scenario == "durable-commit" else fn(spec)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("target", REFERENCES)
def test_reference_backend_keeps_the_promise(target: str, scenario: str, store_for: Callable[[str], Store]) -> None:
    store = store_for(target)
    r = run(scenario, store.spec(target), store)
    assert r.held, f"{target} broke {scenario}: {r.detail}"


@pytest.mark.parametrize("target", list(BROKEN))
def test_broken_variant_fails_the_scenario_of_its_bug(target: str, store_for: Callable[[str], Store]) -> None:
    scenario, evidence = BROKEN[target]
    store = store_for(target)
    r = run(scenario, store.spec(target), store)
    assert not r.held, f"{target} was expected to fail {scenario}, but: {r.detail}"
    assert evidence in r.detail


def test_race_counts_every_round(store_for: Callable[[str], Store]) -> None:
    """The race scenario really races: 50 rounds, each reported by both processes."""
    store = store_for("sqlite")
    r = run("race", store.spec("sqlite"), store)
    assert r.facts == {"rounds": 50, "bad": 0}
    broken = run("race", store.spec("sqlite-non-atomic-claim"), store)
    assert broken.facts["bad"] >= 25  # the 20 ms think time loses most races
