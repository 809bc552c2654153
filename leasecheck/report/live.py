"""The anomaly lines a run says while it goes: one short line per (kind, node), a count for the rest.

A broken backend proves the same kind on the same node again and again (every
later effect of a zombie is another ``stale-effect``), and a cluster run printed
hundreds of lines of 300–500 characters that buried the verdict. So the first
proof of a (kind, node) is said on one line under :data:`LINE_MAX` characters
(``anomaly stale-effect run-1/node-7 (ops 57, 91) at 4.693 s``); later ones only
raise its count, said again when it reaches 10, 100, 1000, …; past
:data:`NODES_PER_KIND` nodes of one kind, a kind's new nodes are counted, not
listed, after one line that says so. :meth:`LiveAnomalies.summary` is the one
line at the end that counts what was not said. Every proof, whole, is in
``anomalies.jsonl`` and the report; the lines are only where to start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from leasecheck.rundir.runfolder import RunFolder

#: the longest anomaly line, in characters (a node name of up to ~50 characters fits)
LINE_MAX = 120
#: the nodes of one kind that get a line of their own; the next ones are counted only
NODES_PER_KIND = 10
#: the cited ops a line shows (the rest: "…")
OPS_SHOWN = 3


def ops_text(ops: Sequence[int]) -> str:
    """``ops 57, 91`` (at most :data:`OPS_SHOWN` of them, then ``…``)."""
    shown = ", ".join(map(str, ops[:OPS_SHOWN]))
    return f"ops {shown}{', …' if len(ops) > OPS_SHOWN else ''}"


@dataclass
class LiveAnomalies:
    """What is said of each proof as it comes (:meth:`line`), and what was left unsaid (:meth:`summary`)."""

    #: proofs so far per (kind, node), in the order first proven
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: the (kind, node)s that got a line of their own (at most :data:`NODES_PER_KIND` of a kind)
    listed: set[tuple[str, str]] = field(default_factory=set)
    #: nodes of each kind past :data:`NODES_PER_KIND` (counted only)
    unlisted: Counter[str] = field(default_factory=Counter)
    #: lines said so far
    lines: int = 0

    def line(self, kind: str, node: str, ops: Sequence[int], proof_s: float, provisional: bool = False) -> str | None:
        """The line to say for this proof now, or None (its count is raised, said later or in the summary)."""
        key = (kind, node)
        self.counts[key] += 1
        n = self.counts[key]
        text: str | None = None
        if n == 1 and sum(1 for k, _ in self.listed if k == kind) < NODES_PER_KIND:
            self.listed.add(key)
            text = f"anomaly {kind} {node} ({ops_text(ops)}) at {proof_s:.3f} s{', provisional' if provisional else ''}"
        elif n == 1:
            self.unlisted[kind] += 1
            if self.unlisted[kind] == 1:
                text = f"anomaly {kind} on more than {NODES_PER_KIND} nodes: the next are counted in the summary"
        elif key in self.listed and is_resaid(n):
            text = f"anomaly {kind} {node}: {n:,} proofs so far (latest {ops_text(ops)}) at {proof_s:.3f} s"
        if text is not None:
            self.lines += 1
        return text

    @property
    def proofs(self) -> int:
        return sum(self.counts.values())

    def summary(self, where: str = RunFolder.ANOMALIES) -> str | None:
        """One line counting every proof, or None when each had a line of its own::

            anomalies while running: 48 proofs of 3 (kind, node) pairs (stale-effect 45, lost-commit 3) in 4 lines; all in anomalies.jsonl
        """
        if self.proofs == len(self.listed):
            return None
        by_kind: Counter[str] = Counter()
        for (kind, _), n in self.counts.items():
            by_kind[kind] += n
        kinds = ", ".join(f"{k} {n:,}" for k, n in by_kind.most_common())
        return (f"anomalies while running: {self.proofs:,} proofs of {len(self.counts):,} (kind, node) pairs ({kinds}) "
                f"in {self.lines:,} lines; all in {where}")


def is_resaid(n: int) -> bool:
    """Is a (kind, node)'s count said again at its ``n``-th proof? At 10, 100, 1000, …"""
    return n >= 10 and str(n).rstrip("0") == "1"


__all__ = ["LINE_MAX", "NODES_PER_KIND", "LiveAnomalies", "is_resaid", "ops_text"]
