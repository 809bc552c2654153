"""What an audit is made of: an audited library's plan, a run of it judged against the publication, AUDITS.md's row.

Data only, shared by the audits of lock libraries (:mod:`.audit`) and of job
queues (:mod:`.queue_audit`); it runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from leasecheck.exits import Exit
from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.registry import available


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
            if fault.key == nemesis:
                return fault
        known = ", ".join(f.key for f in self.plan.faults)
        raise KeyError(f"the audit of {self.target} has no fault {nemesis!r} (it has {known})")


@dataclass(frozen=True)
class Unloadable:
    """A registered audit adapter that cannot run here (its library is missing, or its module would not import);
    ``plan``: its published plan when its class loaded without the library (every queue's, most locks')."""

    target: str
    error: str
    plan: AuditPlan | None = None


def is_class_path(library: str) -> bool:
    """Does ``leasecheck audit`` name an adapter by ``module:Class`` (not a library or a registered name)?"""
    return ":" in library and library not in available()


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
