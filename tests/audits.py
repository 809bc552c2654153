"""The audit tests' one assertion: a run of a published plan reaches what AUDITS.md publishes.

Each library's test module calls :func:`assert_published` once per fault of its
plan, with the plan's first seed; the failure message carries everything an
auditor needs to see why (verdict, kinds, reason, the proof and the run folder).
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.audit import AuditResult, audited_target, run_audit


def plan_faults(target: str) -> list[str]:
    """The faults ``target``'s published plan runs (for ``pytest.mark.parametrize``)."""
    return [fault.nemesis for fault in audited_target(target).plan.faults]


def published_cases(*targets: str) -> list[tuple[str, str]]:
    """(target, fault) for every fault of each target's published plan: one test each."""
    return [(target, nemesis) for target in targets for nemesis in plan_faults(target)]


def assert_published(target: str, nemesis: str, tmp_path: Path, seed: int | None = None) -> AuditResult:
    """Run ``target``'s audit under ``nemesis`` (the plan's first seed unless given) and assert it is as published."""
    audited = audited_target(target)
    result = run_audit(target, nemesis, seed if seed is not None else audited.plan.seeds[0], tmp_path / "store")
    published = result.published
    assert result.matches, (
        f"{target} under {nemesis} (seed {result.seed}): {result.verdict} {list(result.kinds)}"
        f" (reason: {result.reason}), published: {published.expected} {list(published.kinds)};"
        f" first anomaly {result.proof}; invalid without the fault: {list(result.without_fault)}; run folder {result.run_dir}"
    )
    if result.verdict == "invalid":  # a finding must come with its proof
        assert result.proof is not None and result.proof["ops"] and result.first_anomaly_s is not None
    return result
