"""What the checker says: the verdict JSON of DESIGN.md, as dataclasses.

The anomaly kinds it may name are declared in :mod:`leasecheck.histories.vocabulary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from leasecheck.checker.coverage import Coverage
    from leasecheck.histories import Header

Validity = bool | Literal["unknown"]


@dataclass(slots=True)
class Anomaly:
    """One finding: its kind, the node, the ops (invoke indices) that prove it, and why."""

    kind: str
    node: str
    ops: list[int]
    explanation: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "node": self.node, "ops": self.ops, "explanation": self.explanation}


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
        """0 valid, 1 anomalies found, 2 unknown (DESIGN.md exit codes)."""
        if self.valid is True:
            return 0
        if self.valid is False:
            return 1
        return 2
