"""What a ``leasecheck_run`` call gives back, and the message of a test whose runs are not what it expected.

A run's results.json as :class:`LeasecheckResult` (its anomalies as
:class:`Anomaly`), :class:`LeasecheckError` for a run with no verdict, and the
failure message: each wrong run's verdict, the anomalies shown in full (the first
of each kind), where to look and how to replay. Apart from the runner, so the
message can be built (and tested) from a results.json alone.

Imported when pytest loads the plugin: the standard library only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: anomalies shown in full per failing run; the rest are counted by kind
SHOWN_ANOMALIES = 5


class LeasecheckError(Exception):
    """A run that gave no verdict: bad options (exit 3), the environment failed (exit 4), interrupted, or hung.

    Never a verdict on the backend: the test errs with the run's own one-line reason.
    """


@dataclass(frozen=True)
class Anomaly:
    """One anomaly of a run's verdict (docs/contracts/verdict.md): what, on which node, proven by which ops."""

    kind: str
    node: str | None
    ops: tuple[int, ...]
    explanation: str
    #: which fault hit the processes that prove it, or that none did ("" when not said)
    attribution: str = ""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Anomaly:
        return cls(kind=str(obj.get("kind")), node=obj.get("node"), ops=tuple(obj.get("ops") or ()),
                   explanation=str(obj.get("explanation") or ""), attribution=str(obj.get("attribution") or ""))


@dataclass(frozen=True)
class LeasecheckResult:
    """One seed's run: its verdict (``"valid"``, ``"invalid"``, ``"unknown"``), why, and where to look.

    ``report`` is the run folder's ``report.html``; ``command`` replays the run
    (from pytest's rootdir); ``results`` is the run's whole ``results.json``.
    """

    target: str
    seed: int
    verdict: str
    reason: str | None
    anomalies: tuple[Anomaly, ...]
    run_dir: Path
    report: Path
    command: str
    exit_code: int
    results: dict[str, Any] = field(repr=False)

    @property
    def kinds(self) -> list[str]:
        """The anomaly kinds found, each once, in the order first found."""
        return list(dict.fromkeys(a.kind for a in self.anomalies))


def _indent(text: str, prefix: str) -> str:
    return ("\n" + prefix).join(text.splitlines() or [""])


def shown_anomalies(anomalies: Iterable[Anomaly], n: int = SHOWN_ANOMALIES) -> list[Anomaly]:
    """The ``n`` anomalies a message shows in full: the first of each kind, then the next ones in the verdict's order.

    A run's anomalies often come in clusters on one node; the first of each kind
    says more than five of the same.
    """
    found = list(anomalies)
    first_of_kind: dict[str, int] = {}
    for i, a in enumerate(found):
        first_of_kind.setdefault(a.kind, i)
    picked = sorted(first_of_kind.values())[:n]
    picked += [i for i in range(len(found)) if i not in first_of_kind.values()][: n - len(picked)]
    return [found[i] for i in sorted(picked)]


def describe_run(result: LeasecheckResult, expect: str) -> str:
    """One run that is not what was expected: its verdict, its anomalies, and where to look and how to replay."""
    lines = []
    if result.verdict == "invalid":
        by_kind = Counter(a.kind for a in result.anomalies)
        kinds = ", ".join(f"{kind} x{n}" for kind, n in by_kind.items())
        lines.append(f"seed {result.seed}: invalid, {len(result.anomalies)} anomalies ({kinds}) (expected {expect})")
        shown = shown_anomalies(result.anomalies)
        for a in shown:
            ops = ", ".join(str(op) for op in a.ops)
            lines.append(f"  {a.kind} on node {a.node}, ops [{ops}]:")
            lines.append("      " + _indent(a.explanation, "      "))
            if a.attribution:
                lines.append("      " + _indent(a.attribution, "      "))
        shown_ids = {id(a) for a in shown}
        rest = [a for a in result.anomalies if id(a) not in shown_ids]
        if rest:
            more = ", ".join(f"{kind} x{n}" for kind, n in Counter(a.kind for a in rest).items())
            lines.append(f"  ... and {len(rest)} more ({more}): see the report")
    elif result.verdict == "unknown":
        lines.append(f"seed {result.seed}: unknown (expected {expect}): {result.reason or 'no reason given'}")
    else:
        caught = ": the run found no anomaly" if expect == "invalid" else ""
        lines.append(f"seed {result.seed}: valid (expected {expect}){caught}")
    lines.append(f"  run folder: {result.run_dir}")
    lines.append(f"  report:     {result.report}")
    lines.append(f"  replay:     {result.command}")
    return "\n".join(lines)


def failure_message(target: str, nemesis: str, expect: str, wrong: list[LeasecheckResult], total: int) -> str:
    """The assertion message of a test whose runs are not all ``expect``."""
    head = f"leasecheck: target {target}, nemesis {nemesis}: {len(wrong)} of {total} runs not {expect}"
    return "\n\n".join([head, *(describe_run(r, expect) for r in wrong)])
