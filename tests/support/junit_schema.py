"""Reading back the JUnit files leasecheck writes: validated against the schema CI systems read, then parsed.

The schema is the Jenkins xUnit plugin's junit-10.xsd (tests/data/junit/README.md says where it is
from); a file that passes it is read by Jenkins, GitLab, GitHub's JUnit actions and Buildkite alike.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import xmlschema
from paths import TESTS

XSD = TESTS / "data" / "junit" / "junit-10.xsd"


@cache
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(XSD)


@dataclass
class Case:
    """One ``<testcase>`` as read back: its outcome (pass, failure, error, skipped) and what it says."""

    name: str
    classname: str
    time: float
    outcome: str
    message: str
    text: str
    type: str
    out: str


def read(path: Path) -> tuple[ET.Element, list[Case]]:
    """Validate ``path`` against junit-10.xsd (raises on any violation), then its root and its test cases."""
    schema().validate(str(path))
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    cases = []
    for el in root.iter("testcase"):
        problem = next((c for c in el if c.tag in ("failure", "error", "skipped")), None)
        out = el.find("system-out")
        cases.append(Case(
            name=el.get("name", ""), classname=el.get("classname", ""), time=float(el.get("time", "0")),
            outcome=problem.tag if problem is not None else "pass",
            message=problem.get("message", "") if problem is not None else "",
            text=(problem.text or "") if problem is not None else "",
            type=problem.get("type", "") if problem is not None else "",
            out=(out.text or "") if out is not None else "",
        ))
    return root, cases


def properties(root: ET.Element) -> dict[str, str]:
    """The first suite's properties."""
    suite = root.find("testsuite")
    assert suite is not None
    return {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}
