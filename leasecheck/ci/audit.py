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

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from leasecheck.checker.verdict import Anomaly, Validity, Verdict
from leasecheck.exits import Exit
from leasecheck.run.options import RunOptions
from leasecheck.run.workload import Workload
from leasecheck.targets.registry import TargetNotFound, available, load, not_installed, registered
from leasecheck.targets.thirdparty.audit import AuditPlan, FaultAudit


@dataclass(frozen=True)
class Audited:
    """A registered backend that carries a published audit plan."""

    target: str
    plan: AuditPlan

    @property
    def version(self) -> str:
        try:
            return version(self.plan.library)
        except PackageNotFoundError:
            return "not installed"

    def fault(self, nemesis: str) -> FaultAudit:
        for fault in self.plan.faults:
            if fault.nemesis == nemesis:
                return fault
        known = ", ".join(f.nemesis for f in self.plan.faults)
        raise KeyError(f"the audit of {self.target} has no fault {nemesis!r} (it has {known})")


@dataclass(frozen=True)
class Unloadable:
    """A registered audit adapter whose module would not import (its library is missing)."""

    target: str
    error: str


def audits() -> tuple[list[Audited], list[Unloadable]]:
    """Every registered backend with an audit plan, and the audit adapters that failed to load (or lack their library)."""
    found: list[Audited] = []
    broken: list[Unloadable] = []
    for name, where, cls in registered():
        if isinstance(cls, TargetNotFound):
            if ".thirdparty." in where:  # only ours are known to be audits without importing them
                broken.append(Unloadable(name, str(cls)))
            continue
        plan = getattr(cls, "audit", None)
        if not isinstance(plan, AuditPlan):
            continue
        if (lacking := not_installed(cls)) is not None:
            broken.append(Unloadable(name, f"{name!r} {lacking}"))
        else:
            found.append(Audited(name, plan))
    return found, broken


def audited_target(target: str) -> Audited:
    """``target``'s published audit, loading that backend alone (not every registered one).

    ``target`` is a registered name or ``module:Class`` (found from the current
    directory too, as ``run --target`` finds it): an adapter of one's own, with
    its plan in the class (``audit = AuditPlan(...)``, as ``new-target --lock`` writes it).
    """
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


def is_class_path(library: str) -> bool:
    """Does ``leasecheck audit`` name an adapter by ``module:Class`` (not a library or a registered name)?"""
    return ":" in library and library not in available()


def select(library: str, modes: tuple[str, ...] = ()) -> list[Audited]:
    """The audits of ``library`` (its PyPI name, one adapter's target name, ``module:Class``, or ``all``), in ``modes`` if given."""
    if is_class_path(library):
        return _in_modes(library, [audited_target(library)], modes)
    found, broken = audits()
    chosen = [a for a in found if library in (a.plan.library, a.target, "all")]
    if not chosen:
        missing = [b for b in broken if library in b.target]
        if missing:
            error = missing[0].error
            raise LookupError(error if "pip install" in error else f"{error} (pip install 'leasecheck[audit]')")
        names = ", ".join(sorted({a.plan.library for a in found})) or "none"
        raise LookupError(f"no audit of {library!r} (audited libraries: {names}; see leasecheck audit --list;"
                          " or name an adapter of your own by module:Class)")
    return _in_modes(library, chosen, modes)


def _in_modes(library: str, chosen: list[Audited], modes: tuple[str, ...]) -> list[Audited]:
    if modes:
        unknown = set(modes) - {a.plan.mode for a in chosen}
        if unknown:
            have = ", ".join(sorted(a.plan.mode for a in chosen))
            raise LookupError(f"{library} has no mode {', '.join(sorted(unknown))} (its modes: {have})")
        chosen = [a for a in chosen if a.plan.mode in modes]
    return chosen


@dataclass
class AuditResult:
    """One run of an audit, judged against what was published for it."""

    target: str
    library: str
    version: str
    mode: str
    nemesis: str
    seed: int
    #: the run verdict: ``valid``, ``invalid`` or ``unknown``
    verdict: str
    kinds: tuple[str, ...]
    reason: str | None
    run_dir: Path
    published: FaultAudit
    #: seconds from the history's first operation to the completion of the last op that proves the first anomaly
    first_anomaly_s: float | None = None
    #: the first anomaly: kind, node and the op indices that prove it
    proof: dict[str, Any] | None = None
    exit_code: int = Exit.VALID
    options: dict[str, Any] = field(default_factory=dict)
    #: the kinds of the anomalies no fault of this run hit (their processes stalled on their own), reported apart
    without_fault: tuple[str, ...] = ()
    #: how many anomalies those are (listed ones), and the first of them proven
    without_fault_count: int = 0
    without_fault_proof: dict[str, Any] | None = None

    @property
    def matches(self) -> bool:
        """Did the run reach the published verdict (and, if invalid, only kinds the publication names)?"""
        if self.verdict != self.published.expected:
            return False
        if self.verdict == "invalid" and self.published.kinds:
            return bool(set(self.kinds) & set(self.published.kinds)) and set(self.kinds) <= set(self.published.kinds)
        if self.verdict == "unknown" and self.published.reason:
            return self.published.reason in (self.reason or "")
        return True

    def command(self) -> str:
        """The one command that reproduces this run."""
        audited = self.target if is_class_path(self.target) else self.library  # an adapter of one's own: by module:Class
        return f"leasecheck audit {audited} --mode {self.mode} --fault {self.nemesis} --seeds {self.seed}"

    def markdown_row(self) -> str:
        """One row of AUDITS.md's table (:data:`MARKDOWN_HEADER`)."""
        kinds = ", ".join(f"`{k}`" for k in self.kinds) or "-"
        first = f"{self.first_anomaly_s:.1f} s" if self.first_anomaly_s is not None else "-"
        proof = f"{self.proof['node']} ops {', '.join(map(str, self.proof['ops']))}" if self.proof else "-"
        verdict = self.verdict if self.matches else f"{self.verdict} (published: {self.published.expected})"
        if self.without_fault:
            verdict += f"; invalid without the fault ({', '.join(self.without_fault)}: the workload's own stall)"
        return f"| {self.library} | {self.version} | {self.mode} | {self.nemesis} | {self.seed} | {verdict} | {kinds} | {first} | {proof} |"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target, "library": self.library, "version": self.version, "mode": self.mode,
            "nemesis": self.nemesis, "seed": self.seed, "verdict": self.verdict, "kinds": list(self.kinds),
            "reason": self.reason, "first_anomaly_s": self.first_anomaly_s, "proof": self.proof,
            "published": {"verdict": self.published.expected, "kinds": list(self.published.kinds)},
            "matches": self.matches, "run_dir": str(self.run_dir), "command": self.command(),
            "without_fault": {"kinds": list(self.without_fault), "anomalies": self.without_fault_count,
                              "proof": self.without_fault_proof} if self.without_fault else None,
        }


#: the head of the table :meth:`AuditResult.markdown_row` fills
MARKDOWN_HEADER = (
    "| library | version | mode | fault | seed | verdict | kinds | first anomaly | proof (node, ops) |\n"
    "|---|---|---|---|---:|---|---|---:|---|"
)


def options_for(audited: Audited, nemesis: str, seed: int, store: Path, time_limit: float | None = None) -> RunOptions:
    """The run options of one audit run: the plan's settings, this fault and seed.

    A run waits up to one more time limit for the evidence its verdict needs
    (``--evidence-wait``: its faults' situations and the fault's ``require``), so a slow machine gives a
    late verdict rather than ``unknown``.
    """
    plan = audited.plan
    fault = audited.fault(nemesis)  # refuses a fault the plan does not publish
    limit = time_limit if time_limit is not None else plan.time_limit
    opts = RunOptions(target=audited.target, nemesis=tuple(nemesis.split(",")), seed=seed, time_limit=limit,
                      evidence_wait_s=limit, store=str(store), require=tuple(fault.require))
    options = dict(plan.options)
    if isinstance(options.get("workload"), dict):
        options["workload"] = Workload(**options["workload"])
    return replace(opts, **options)


def run_audit(target: str, nemesis: str, seed: int, store: Path, time_limit: float | None = None,
              progress: Callable[[dict[str, Any]], None] | None = None) -> AuditResult:
    """Run one fault of ``target``'s published audit with one seed, and judge it against the publication."""
    from leasecheck.run.runner import run

    audited = audited_target(target)
    opts = options_for(audited, nemesis, seed, store, time_limit)
    result = run(opts, progress)
    history = result.run_dir / "history.jsonl"
    judged = fault_verdict(result.verdict, result.reason, nemesis, history)
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


@dataclass(frozen=True)
class FaultVerdict:
    """What a run's faults' victims did: the verdict for the fault, why, its anomalies, and those no fault hit."""

    verdict: str
    reason: str | None
    anomalies: list[Anomaly]
    without_fault: list[Anomaly]


def fault_verdict(verdict: Verdict, reason: str | None, nemesis: str, history: Path) -> FaultVerdict:
    """The verdict a run under ``nemesis`` publishes for that fault (``verdict``: the run's :class:`Verdict`).

    An anomaly belongs to the fault when one of the run's faults hit a process
    proving it (its ``faults``: :mod:`leasecheck.checker.attribution`; one
    checked without attribution belongs to it too). When every listed anomaly
    stalled on its own, the fault is judged as the run verdict judges a run
    without them: ``valid``, or ``unknown`` with what the run did not test;
    and ``unknown`` when anomalies were only counted (past 100 per node and
    kind), since whom they were proven by is not known.
    """
    names = set(nemesis.split(","))
    mine = [a for a in verdict.anomalies if a.faults is None or any(f.get("fault") in names for f in a.faults)]
    ours = {id(a) for a in mine}
    without = [a for a in verdict.anomalies if id(a) not in ours]
    if mine or not without:
        return FaultVerdict(_word(verdict.valid), reason, mine, without)
    counted = sum(int(n) for n in verdict.stats.get("anomalies", {}).values())
    if counted > len(verdict.anomalies):
        return FaultVerdict("unknown", f"{counted - len(verdict.anomalies):,} anomalies were counted, not listed: "
                            f"whether {nemesis}'s victims proved them is not known", [], without)
    from leasecheck.checker.coverage import Coverage
    from leasecheck.nemesis.catalogue import lookup
    from leasecheck.verdict.run_verdict import evidence_of, run_verdict

    with history.open("rb") as f:
        evidence = evidence_of(f)
    checked: Validity = "unknown" if verdict.unknown_nodes else True
    valid, why = run_verdict(checked, evidence, lookup(nemesis.split(",")), verdict.coverage or Coverage())
    return FaultVerdict(_word(valid), why, [], without)


def _word(valid: object) -> str:
    return "valid" if valid is True else "invalid" if valid is False else "unknown"


def first_anomaly(history: Path, cited: dict[int, Any], anomalies: list[Any]) -> tuple[float | None, dict[str, Any] | None]:
    """The anomaly proven earliest (by the completion of the last op it cites), and when, from the first op's invoke."""
    if not anomalies:
        return None, None

    def proven_at(anomaly: Any) -> int:
        times = [op.complete_time if op.complete_time is not None else op.invoke_time
                 for op in (cited.get(i) for i in anomaly.ops) if op is not None]
        return max(times, default=0)

    first = min(anomalies, key=proven_at)
    start = _first_time(history)
    at = proven_at(first)
    seconds = round((at - start) / 1e9, 3) if start is not None and at else None
    return seconds, {"kind": first.kind, "node": first.node, "ops": list(first.ops)}


def _first_time(history: Path) -> int | None:
    """The time of the history's first event after the header (the run's start, as the history saw it)."""
    try:
        with history.open("rb") as f:
            next(f, None)  # the header
            line = next(f, None)
    except OSError:
        return None
    if not line:
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    t = event.get("time")
    return t if isinstance(t, int) else None
