"""Audits of third-party lock libraries: run a library's published plan and say what it showed.

An audit is a set of ordinary runs: one per fault of the plan and seed, each
judged by the checker like any other run. What this module adds is what an
auditor needs to publish a finding (AUDITS.md): the library's installed
version, whether each run reached the verdict that was published for it, how
long the run took to show its first anomaly, and the op indices that prove it.

A run under one fault also shows what the workload brings about by itself (a
worker that stalls, no fault needed, wakes a zombie). The verdict published
for a fault is what that fault's victims did: an anomaly that no fault of the
run hit (its ``faults`` empty: the processes proving it stalled on their own)
is reported apart, as invalid without the fault, and never makes the library
invalid under it (:func:`fault_verdict`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from leasecheck.auditing.audited import MARKDOWN_HEADER, Audited, AuditResult, Unloadable, is_class_path
from leasecheck.auditing.findings import FaultVerdict, fault_verdict, first_anomaly
from leasecheck.auditing.queue_audit import (
    QUEUE_PREFIX,
    is_queue_class,
    queue_audit,
    queue_audits,
    queue_name,
    queue_plans,
    run_queue_audit,
)
from leasecheck.lists import names
from leasecheck.run.options import RunOptions
from leasecheck.run.workload_options import Workload
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.targets.audits import AuditPlan, faults_of
from leasecheck.targets.registry import TargetNotFound, load, not_installed, registered


def audits() -> tuple[list[Audited], list[Unloadable]]:
    """Every registered backend with an audit plan and every audited job queue, and the audit adapters that failed
    to load (or lack their library)."""
    found, broken = queue_audits()
    for name, where, cls in registered():
        if isinstance(cls, TargetNotFound):
            if ".targets.locks." in where:  # only ours are known to be audits without importing them
                broken.append(Unloadable(name, str(cls)))
            continue
        plan = getattr(cls, "audit", None)
        if not isinstance(plan, AuditPlan):
            continue
        if (lacking := not_installed(cls)) is not None:
            broken.append(Unloadable(name, f"{name!r} {lacking}", plan))
        else:
            found.append(Audited(name, plan))
    return found, broken


def audited_target(target: str) -> Audited:
    """``target``'s published audit, loading that backend alone (not every registered one).

    ``target`` is a registered name or ``module:Class`` (found from the current
    directory too, as ``run --target`` finds it): an adapter of one's own, with
    its plan in the class (``audit = AuditPlan(...)``, as ``new-target --lock`` writes it).
    """
    if target.startswith(QUEUE_PREFIX):
        return queue_audit(target)
    if is_class_path(target) and is_queue_class(target):  # a job queue's adapter of one's own
        return queue_audit(QUEUE_PREFIX + target)
    try:
        plan = getattr(load(target), "audit", None)
    except TargetNotFound as e:
        raise LookupError(str(e)) from None
    if not isinstance(plan, AuditPlan):
        if is_class_path(target):
            raise LookupError(f"{target} has no audit plan: give the class one (audit = AuditPlan(...), "
                              "as `leasecheck new-target --lock LIBRARY` writes it)")
        raise LookupError(f"{target} is no registered backend with an audit plan (see leasecheck audit --list)")
    return Audited(target, plan)

def select(library: str, modes: tuple[str, ...] = ()) -> list[Audited]:
    """The audits of ``library`` (its PyPI name, one adapter's target name, ``module:Class``, or ``all``), in ``modes`` if given."""
    if is_class_path(library):
        if is_queue_class(library):  # a job queue's adapter of one's own: every mode it has a plan for
            return _in_modes(library, queue_plans(library), modes)
        return _in_modes(library, [audited_target(library)], modes)
    found, broken = audits()
    queue = library == "queues" and (lambda a: a.target.startswith(QUEUE_PREFIX))
    chosen = [a for a in found if library in (a.plan.library, a.target, queue_name(a.target), "all")
              or (queue and queue(a))]
    if not chosen:
        missing = [b for b in broken if library in b.target]
        if missing:
            error = missing[0].error
            raise LookupError(error if "pip install" in error else f"{error} (pip install 'leasecheck[audit]')")
        raise LookupError(f"no audit of {library!r} ({_audited_here(found, broken)}; see leasecheck audit --list;"
                          " or name an adapter of your own by module:Class)")
    return _in_modes(library, chosen, modes)


def _audited_here(found: list[Audited], broken: list[Unloadable]) -> str:
    """The libraries audited, those that run here and those that cannot with why (one reason each), never "none"
    while audits exist."""
    here = sorted({a.plan.library for a in found})
    why: dict[str, str] = {}
    for b in broken:
        why.setdefault(b.plan.library if b.plan is not None else b.target, b.error)
    words = [f"audited libraries: {', '.join(here)}"] if here else []
    if why:
        words.append("not loadable here: " + "; ".join(f"{lib} ({reason})" for lib, reason in sorted(why.items())))
    return "; ".join(words) or "no audit is registered"


def _in_modes(library: str, chosen: list[Audited], modes: tuple[str, ...]) -> list[Audited]:
    if modes:
        unknown = set(modes) - {a.plan.mode for a in chosen}
        if unknown:
            have = ", ".join(sorted(a.plan.mode for a in chosen))
            raise LookupError(f"{library} has no mode {', '.join(sorted(unknown))} (its modes: {have})")
        chosen = [a for a in chosen if a.plan.mode in modes]
    return chosen

def options_for(audited: Audited, nemesis: str, seed: int, store: Path, time_limit: float | None = None) -> RunOptions:
    """The run options of one audit run: the plan's settings, this fault and seed.

    A run waits up to one more time limit for the evidence its verdict needs
    (``--evidence-wait``: its faults' situations and the fault's ``require``), so a slow machine gives a
    late verdict rather than ``unknown``.
    """
    plan = audited.plan
    fault = audited.fault(nemesis)  # refuses a fault the plan does not publish
    limit = time_limit if time_limit is not None else plan.time_limit
    opts = RunOptions(target=audited.target, nemesis=names(faults_of(nemesis), "--fault"), seed=seed, time_limit=limit,
                      evidence_wait_s=limit, store=str(store), require=tuple(fault.require), cluster=fault.cluster)
    options = dict(plan.options)
    if isinstance(options.get("workload"), dict):
        options["workload"] = Workload(**options["workload"])
    return replace(opts, **options)


def run_audit(target: str, nemesis: str, seed: int, store: Path, time_limit: float | None = None,
              progress: Callable[[dict[str, Any]], None] | None = None) -> AuditResult:
    """Run one fault of ``target``'s published audit with one seed, and judge it against the publication."""
    from leasecheck.run.runner import run

    audited = audited_target(target)
    if target.startswith(QUEUE_PREFIX):
        return run_queue_audit(audited, nemesis, seed, store, time_limit)
    opts = options_for(audited, nemesis, seed, store, time_limit)
    result = run(opts, progress)
    history = RunFolder(result.run_dir).history
    judged = fault_verdict(result.verdict, result.reason, faults_of(nemesis), history)
    first_s, proof = first_anomaly(history, result.verdict.cited, judged.anomalies)
    _, without_proof = first_anomaly(history, result.verdict.cited, judged.without_fault)
    return AuditResult(
        target=target, library=audited.plan.library, version=audited.version, mode=audited.plan.mode,
        nemesis=nemesis, seed=seed, verdict=judged.verdict, kinds=tuple(sorted({a.kind for a in judged.anomalies})),
        reason=judged.reason, run_dir=result.run_dir, published=audited.fault(nemesis),
        first_anomaly_s=first_s, proof=proof, exit_code=result.exit_code, options=dict(audited.plan.options),
        without_fault=tuple(sorted({a.kind for a in judged.without_fault})),
        without_fault_count=len(judged.without_fault), without_fault_proof=without_proof,
    )


__all__ = ["MARKDOWN_HEADER", "QUEUE_PREFIX", "AuditResult", "Audited", "FaultVerdict", "Unloadable", "audited_target",
           "audits", "fault_verdict", "first_anomaly", "is_class_path", "options_for", "run_audit", "select"]
