"""The audit tests' one assertion: a run of a published plan reaches what AUDITS.md publishes.

Each library's test module calls :func:`assert_published` once per fault of its
plan, with the plan's first seed; the failure message carries everything an
auditor needs to see why (verdict, kinds, reason, the proof and the run folder).
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.auditing.audit import AuditResult, audited_target, run_audit


def plan_faults(target: str) -> list[str]:
    """The faults ``target``'s published plan runs (for ``pytest.mark.parametrize``)."""
    return [fault.key for fault in audited_target(target).plan.faults]


def published_cases(*targets: str) -> list[tuple[str, str]]:
    """(target, fault) for every fault of each target's published plan: one test each."""
    return [(target, nemesis) for target in targets for nemesis in plan_faults(target)]


#: how many of a plan's seeds a published finding may take to be proven again (see :func:`assert_published`): all
#: five a plan publishes. Three were not enough beside load: a fresh-clone CI run found etcd3-lock's pause-store
#: finding valid on seeds 1-3 (the store so slow that seeds 2 and 3 were still short of a contended claim 8 s past
#: their time limit); seed 1 came out valid in each of three runs beside two CPU-bound processes, seed 2 invalid
FINDING_SEEDS = 5


def assert_published(target: str, nemesis: str, tmp_path: Path, seed: int | None = None) -> AuditResult:
    """Run ``target``'s audit under ``nemesis`` (the plan's first seed unless given) and assert it is as published.

    A published finding (``invalid``) that a seed does not prove again is run with the plan's next seed, up to
    :data:`FINDING_SEEDS`: an invalid verdict is a proof, a valid one only says that this seed's faults missed the
    window, which a loaded machine makes likelier (a stopped store restarted late, a paused holder woken after its
    successor was done). A published ``valid`` gets one seed and no second chance: a run that finds an anomaly there
    is a finding, never luck.
    """
    audited = audited_target(target)
    seeds = [seed] if seed is not None else list(audited.plan.seeds)
    expected = next(f.expected for f in audited.plan.faults if f.key == nemesis)
    tries = seeds[:FINDING_SEEDS] if expected == "invalid" else seeds[:1]
    for attempt, this in enumerate(tries):
        result = run_audit(target, nemesis, this, tmp_path / f"store-{attempt}")
        if result.matches or result.verdict == "invalid":  # an invalid run with other kinds is a finding as it stands
            break
    published = result.published
    assert result.matches, (
        f"{target} under {nemesis} (seed {result.seed}): {result.verdict} {list(result.kinds)}"
        f" (reason: {result.reason}), published: {published.expected} {list(published.kinds)};"
        f" first anomaly {result.proof}; invalid without the fault: {list(result.without_fault)}; run folder {result.run_dir}"
    )
    if result.verdict == "invalid":  # a finding must come with its proof
        assert result.proof is not None and result.proof["ops"] and result.first_anomaly_s is not None
    return result
