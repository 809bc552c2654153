"""What the checker says: the verdict JSON of docs/contracts/verdict.md, as dataclasses.

The anomaly kinds it may name are declared in :mod:`leasecheck.histories.vocabulary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from leasecheck.exits import Exit

if TYPE_CHECKING:
    from leasecheck.checker.coverage import Coverage
    from leasecheck.histories import Header

Validity = bool | Literal["unknown"]


@dataclass(slots=True)
class Anomaly:
    """One finding: its kind, the node, the ops (invoke indices) that prove it, and why.

    When the history's faults are known, also whether a fault hit the processes
    that prove it (``faults``, ``attribution``): extra keys of the JSON, after the
    four of docs/contracts/verdict.md's verdict.
    """

    kind: str
    node: str
    ops: list[int]
    explanation: str
    #: the faults that hit the processes proving it (:mod:`leasecheck.checker.attribution`); None: not attributed
    faults: list[dict[str, Any]] | None = None
    #: one sentence: which fault hit them, or that none did (they stalled on their own)
    attribution: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "node": self.node, "ops": self.ops, "explanation": self.explanation}
        if self.faults is not None:
            out["faults"] = self.faults
            out["stalled_on_its_own"] = not self.faults
            out["attribution"] = self.attribution
        return out


@dataclass(slots=True)
class Verdict:
    """The checker's answer for one history.

    ``valid`` is ``True``, ``False`` (anomalies found) or ``"unknown"`` (a
    linearizability search ran out of its budget and nothing else was found).
    ``unknown_nodes`` names the nodes whose search gave up.
    """

    valid: Validity
    anomalies: list[Anomaly]
    stats: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    unknown_nodes: list[str] = field(default_factory=list)
    #: every op an anomaly cites, by index, for ``--explain`` (not part of the JSON)
    cited: dict[int, Any] = field(default_factory=dict, repr=False)
    #: the history's header, when read from a file or lines (not part of the JSON)
    header: Header | None = field(default=None, repr=False)
    #: the history's coverage, when asked for (:func:`leasecheck.checker.core.check_source`'s ``windows``)
    coverage: Coverage | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "valid": self.valid,
            "anomalies": [a.to_json() for a in self.anomalies],
            "stats": self.stats,
        }
        if self.warnings:
            out["warnings"] = self.warnings
        if self.unknown_nodes:
            out["unknown_nodes"] = self.unknown_nodes
        return out

    @property
    def exit_code(self) -> int:
        """Valid, anomalies found or unknown (docs/contracts/exit-codes.md)."""
        if self.valid is True:
            return Exit.VALID
        if self.valid is False:
            return Exit.INVALID
        return Exit.UNKNOWN
