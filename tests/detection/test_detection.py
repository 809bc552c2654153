"""The detection matrix: every reference backend stays valid under every fault kind, and
every broken variant is caught, with its documented anomaly kind, by the fault that exposes it.

Real servers (started by each run: the store faults need the runner to own its
server), real Toxiproxy, real signals, fixed seeds.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from variants import DETECTION, VariantRun, variant_params

from leasecheck.histories import read_history
from leasecheck.run.runner import RunOptions, run
from leasecheck.rundir.storedir import load_faults

TTL_MS = 300

#: (target, faults, seed): each must be valid
REFERENCE_RUNS = [
    ("sqlite", "pause,kill,clock-bump,clock-strobe", 11),
    ("postgres", "pause,kill,pause-store,kill-store", 12),
    ("postgres", "clock-bump,clock-strobe,clock-store", 13),
    ("postgres", "partition,latency,bandwidth", 14),
    ("redis", "pause,kill,pause-store,kill-store", 15),
    ("redis", "clock-bump,clock-strobe,clock-store", 16),
    ("redis", "partition,latency,bandwidth", 17),
    ("postgres@docker", "docker-pause,docker-kill,docker-disconnect,pause", 18),
    ("redis@docker", "docker-pause,docker-kill,docker-disconnect,pause", 19),
]

#: each broken variant under what its ``exposed_by`` names (tests/support/variants.py): each must be
#: invalid with one of its expected kinds
VARIANT_RUNS = variant_params(DETECTION)


#: how long past its time limit a reference run may go on while its history still lacks what the
#: run verdict needs (every fault started and healed, contention, ...): on a loaded machine the
#: same seconds hold fewer ops and faults; the test waits for the evidence, not for an idle machine
EVIDENCE_WAIT_S = 90.0


def go(tmp_path: Path, target: str, faults: tuple[str, ...], seed: int, dup_rate: float = 0.1, time_limit: float = 10.0,
       evidence_wait_s: float = 0.0, fail_fast: bool = False):
    """One run; ``name@docker`` runs the store as a container (--env docker)."""
    target, _, env = target.partition("@")
    if env == "docker":
        time_limit += 5  # a killed Postgres container takes ~2 s to recover
    return run(RunOptions(
        target=target, env=env or "local", nemesis=faults, nemesis_interval=0.8, time_limit=time_limit,
        concurrency=5, ttl_ms=TTL_MS, nodes=10, dup_rate=dup_rate, seed=seed, store=str(tmp_path), op_timeout_s=1.0,
        evidence_wait_s=evidence_wait_s, fail_fast=fail_fast,
    ))


def assert_nothing_left_behind(run_dir: Path) -> None:
    """No fault record, no clock skew, and no stopped process of ours."""
    assert load_faults(run_dir) == []
    assert not (run_dir / "clocks").exists() or not any((run_dir / "clocks").iterdir())
    me = psutil.Process()
    stopped = [p.pid for p in me.children(recursive=True) if p.status() == psutil.STATUS_STOPPED]
    assert stopped == []


@pytest.mark.parametrize("target, faults, seed", REFERENCE_RUNS, ids=[f"{t}-{f}" for t, f, _ in REFERENCE_RUNS])
def test_reference_backend_is_valid_under_faults(tmp_path: Path, target: str, faults: str, seed: int) -> None:
    r = go(tmp_path, target, tuple(faults.split(",")), seed, evidence_wait_s=EVIDENCE_WAIT_S)
    # the run verdict, not a count of commits: valid means no anomaly *and* an ok claim, renew,
    # effect and commit, a contended claim, and every fault of the list started and healed
    assert r.verdict.valid is True, (r.reason, [a.explanation for a in r.verdict.anomalies[:3]])
    header, _, reader = read_history(r.run_dir / "history.jsonl")
    started = {e.f for e in reader.nemesis}
    assert {e.value.get("fault") for e in reader.nemesis} >= set(faults.split(","))
    if "clock-store" in faults:
        assert header.clock_uncertainty_ms >= 2 * TTL_MS / 4  # twice the store skew (default ttl/4)
    if "partition" in faults:
        assert "partition" in started
        assert r.stats["info"] + r.stats["fail_reasons"].get("unavailable", 0) > 0
    assert_nothing_left_behind(r.run_dir)
    if target.endswith("@docker"):
        import docker

        from leasecheck.machine.labels import run_label

        # this run's label only: another Docker run may be going on beside it (pytest -n 2);
        # the run id is the run directory's name, as leasecheck/run/environment.py derives it
        run_id = r.run_dir.name.replace(":", "").replace(".", "-").lower()
        left = docker.from_env().containers.list(all=True, filters={"label": run_label(run_id)})
        assert left == [], "the run's containers must be gone"


@pytest.mark.parametrize("v", VARIANT_RUNS)
def test_broken_variant_is_caught_by_its_fault(tmp_path: Path, v: VariantRun) -> None:
    r = go(tmp_path, v.variant, v.nemesis, v.seed, dup_rate=v.dup_rate, time_limit=v.seconds, fail_fast=True)
    kinds = {a.kind for a in r.verdict.anomalies}
    exposer = ",".join(v.nemesis) or f"duplicate delivery ({v.dup_rate:g})"
    assert r.verdict.valid is False, f"{v.variant} under {exposer} looked valid: {v.bug!r} not exposed"
    assert kinds & set(v.expected), f"{v.variant}: found {kinds}, expected one of {v.expected}"
    for a in r.verdict.anomalies:
        assert a.ops and a.explanation
    assert_nothing_left_behind(r.run_dir)
