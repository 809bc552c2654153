"""What the checker says: the verdict JSON of docs/contracts/verdict.md, as dataclasses.

The anomaly kinds it may name are declared in :mod:`leasecheck.histories.vocabulary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from leasecheck.exits import verdict_exit

if TYPE_CHECKING:
    from leasecheck.checker.coverage import Coverage
    from leasecheck.histories import Event, Header

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
    linearizability search ran out of its budget, or the history was cut, and
    nothing else was found). ``unknown_nodes`` names the nodes whose search
    gave up; ``cut``, how the history was cut (its last line, or its promised
    end never came), naming the file and the line. A cut history is never
    valid, but an anomaly proven in the part that was read stays proven: its
    verdict is ``False`` and still says ``cut``.
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
    #: the one line saying the history is cut, naming the file and the line (None: it ends whole)
    cut: str | None = None

    @property
    def reason(self) -> str | None:
        """Why the verdict is ``"unknown"`` (None otherwise): the cut first, then the search that gave up."""
        if self.valid != "unknown":
            return None
        if self.cut is not None:
            return self.cut
        if self.unknown_nodes:
            return f"the linearizability search ran out of its budget on {len(self.unknown_nodes)} node(s)"
        return None

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
        if self.cut is not None:
            out["cut"] = self.cut
        reason = self.reason
        if reason is not None:
            out["reason"] = reason
        return out

    @property
    def exit_code(self) -> int:
        """Valid, anomalies found or unknown (docs/contracts/exit-codes.md)."""
        return verdict_exit(self.valid)


class Reading(Protocol):
    """What a read of a whole history found beside its ops (a :class:`~leasecheck.histories.HistoryReader`, or the
    :class:`~leasecheck.histories.chunks.Stitch` of its chunks)."""

    warnings: list[str]
    nemesis: list[Event]
    events: int

    @property
    def cut(self) -> str | None: ...


def add_reading(verdict: Verdict, header: Header, read: Reading) -> Verdict:
    """``verdict`` with what the reading found: the header, its warnings, its event counts, and whether it was cut.

    The one place the rule "a cut history is never valid" is applied to a checker's verdict, whoever read the
    history (``leasecheck check``, the run's online checker): a cut history that proves nothing is ``"unknown"``;
    one that proves an anomaly stays invalid (a proof in a prefix holds in the whole), and says ``cut`` too.
    """
    verdict.header = header
    verdict.warnings.extend(read.warnings)
    verdict.stats["events"] = read.events
    verdict.stats["nemesis_events"] = len(read.nemesis)
    verdict.cut = read.cut
    if verdict.cut is not None and verdict.valid is True:
        verdict.valid = "unknown"
    return verdict
