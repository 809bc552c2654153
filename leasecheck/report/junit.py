"""JUnit XML: verdicts in the one format every CI system shows as tests (Jenkins, GitLab, GitHub checks, Buildkite).

One ``<testcase>`` per run, checked history or matrix cell (a :class:`~leasecheck.verdict.outcomes.Row`),
judged by :meth:`Row.judge`, so the XML says exactly what the terminal table says:

* a match passes; an ``invalid`` verdict nobody expected (or a broken variant
  expected ``invalid`` that came out ``valid``) is a ``<failure>`` whose
  message names the anomaly kinds and whose text lists each anomaly's kind,
  node, ops, explanation and attribution (the first :data:`MAX_LISTED`, then how many more);
* ``unknown``, an interrupted run and a run whose environment failed are an
  ``<error>`` with the reason: nothing was proven either way;
* a matrix cell an interrupt kept from starting is ``<skipped>``.

The file validates against the Jenkins xUnit plugin's ``junit-10.xsd``
(vendored in tests/data/junit/), the strictest schema CI systems publish.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from leasecheck.checker.attribution import attribution_of
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.outcomes import Row

#: anomalies listed in a failure's text; the rest are counted (results.json has them all)
MAX_LISTED = 100

#: characters XML 1.0 cannot hold at all (ElementTree would write them and produce a file no parser reads)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(s: object) -> str:
    return _NOT_XML.sub("\ufffd", str(s))


@dataclass
class Suite:
    """One ``<testsuite>``: its rows and the properties a CI reader shows beside them."""

    name: str
    rows: list[Row]
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    hostname: str = field(default_factory=socket.gethostname)


def classname(row: Row) -> str:
    """``leasecheck.<target>``: CI tools group test cases by it (dots split packages, so none inside the target)."""
    return "leasecheck." + (re.sub(r"[^A-Za-z0-9_-]+", "_", row.target).strip("_") or "unknown")


def anomaly_lines(row: Row) -> list[str]:
    """Each listed anomaly as ``kind on node, ops [..]: explanation attribution``, the first :data:`MAX_LISTED`, then a count.

    The attribution says which fault hit the processes that prove it, or that none did.
    """
    lines = [
        f"{a.get('kind')} on {a.get('node')}, ops {a.get('ops')}: "
        + " ".join(f"{a.get('explanation', '')} {attribution_of(a) or ''}".split())
        for a in row.anomalies[:MAX_LISTED]
    ]
    more = max(row.counted, len(row.anomalies)) - len(lines)
    if more > 0:
        where = f" ({RunFolder(row.run_dir).results} lists them)" if row.run_dir is not None else ""
        lines.append(f"... and {more:,} more anomalies{where}")
    return lines


def _details(row: Row) -> list[str]:
    """What someone reading the CI page needs to find and replay the run."""
    out = []
    if row.run_dir is not None:
        out += [f"run folder: {row.run_dir}", f"report: {row.report}"]
    if row.command:
        out.append(f"replay: {row.command}")
    if row.reason and row.verdict != "error":
        out.append(f"reason: {row.reason}")
    return out


def testcase(row: Row) -> ET.Element:
    judged = row.judge()
    case = ET.Element("testcase", name=_text(row.label), classname=classname(row), time=f"{row.seconds or 0.0:.3f}")
    if judged.outcome != "pass":
        tag = {"failure": "failure", "error": "error", "skipped": "skipped"}[judged.outcome]
        kind = "interrupted" if row.interrupted and row.verdict != "invalid" else row.verdict
        problem = ET.SubElement(case, tag, message=_text(judged.message), type=f"leasecheck.{kind}")
        report = [f"report: {row.report}"] if row.report is not None else []
        problem.text = _text("\n".join([judged.message, *anomaly_lines(row), *report]))
    details = _details(row)
    if details:
        ET.SubElement(case, "system-out").text = _text("\n".join(details))
    return case


def testsuite(suite: Suite) -> ET.Element:
    judged = [r.judge() for r in suite.rows]
    el = ET.Element(
        "testsuite", name=_text(suite.name), tests=str(len(suite.rows)),
        failures=str(sum(j.outcome == "failure" for j in judged)), errors=str(sum(j.outcome == "error" for j in judged)),
        skipped=str(sum(j.outcome == "skipped" for j in judged)),
        time=f"{sum(r.seconds or 0.0 for r in suite.rows):.3f}",
        timestamp=suite.timestamp.strftime("%Y-%m-%dT%H:%M:%S"), hostname=_text(suite.hostname),
    )
    if suite.properties:
        props = ET.SubElement(el, "properties")
        for name, value in suite.properties.items():
            ET.SubElement(props, "property", name=_text(name), value=_text(value))
    for row in suite.rows:
        el.append(testcase(row))
    return el


def document(suites: list[Suite]) -> ET.ElementTree:
    root = ET.Element("testsuites", name="leasecheck")
    children = [testsuite(s) for s in suites]
    root.set("tests", str(sum(int(c.get("tests", "0")) for c in children)))
    root.set("failures", str(sum(int(c.get("failures", "0")) for c in children)))
    root.set("errors", str(sum(int(c.get("errors", "0")) for c in children)))
    root.set("time", f"{sum(float(c.get('time', '0')) for c in children):.3f}")
    root.extend(children)
    ET.indent(root)
    return ET.ElementTree(root)


def unwritable(path: str | Path) -> str | None:
    """Why ``path`` cannot take an output file, checked before a run starts (None: it can)."""
    p = Path(path)
    if p.is_dir():
        return f"{path} is a directory"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"{path} is not writable"
    return None


def write(path: str | Path, suites: list[Suite]) -> None:
    """Write the document atomically (a CI step reading it never sees half a file); raises OSError."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        document(suites).write(tmp, encoding="utf-8", xml_declaration=True)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)


def run_properties(row: Row) -> dict[str, str]:
    """The properties of a one-run suite: seed, target, nemesis, run folder and report."""
    props = {"target": row.target, "nemesis": ",".join(row.nemesis) or "none",
             "seed": "" if row.seed is None else str(row.seed)}
    if row.run_dir is not None:
        props["run_dir"] = str(row.run_dir)
        props["report"] = str(row.report)
    if row.command:
        props["command"] = row.command
    return props
