"""The hand-written example corpus (``histories/examples``) against the checker.

Every ``*.jsonl`` in the folder is listed in ``expected.json`` with the verdict
worked out by hand from docs/contracts/anomaly-kinds.md (kinds, and the ops each anomaly must cite by
the invoke index, following the citation convention of the corpus), or with
``"valid": "bad-input"`` and the line the reader must name, and with ``"cut"``
(the line, and whether it is a cut last line or a promised history-end event
that never came) for a history that is cut: never valid. The test checks the
library entry point (``check_source``) on every file, and the real CLI on a few,
because the exit code and the single JSON object are what CI gates consume.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import EXAMPLES

from leasecheck.checker import CHECKS, check_source
from leasecheck.histories import HistoryError
from leasecheck.histories.vocabulary import KINDS, LINEARIZABILITY_KINDS, NON_LINEARIZABLE, TIMING_KINDS

EXPECTED: dict[str, dict[str, Any]] = json.loads((EXAMPLES / "expected.json").read_text())

BAD_INPUT = "bad-input"
EXIT_CODES = {True: 0, False: 1, "unknown": 2, BAD_INPUT: 3}


def test_every_example_is_listed() -> None:
    """A new example without an expectation (or a stale entry) fails loudly."""
    on_disk = {p.name for p in EXAMPLES.glob("*.jsonl")}
    listed = set(EXPECTED)
    assert on_disk - listed == set(), "examples missing from expected.json"
    assert listed - on_disk == set(), "expected.json lists files that do not exist"


def test_expectations_are_well_formed() -> None:
    for name, exp in EXPECTED.items():
        assert exp["valid"] in (True, False, "unknown", BAD_INPUT), name
        assert exp["kinds"] == sorted(set(exp["kinds"])), name
        assert set(exp["kinds"]) <= set(KINDS), name
        assert {a["kind"] for a in exp["anomalies"]} == set(exp["kinds"]), name
        assert (exp["valid"] is False) == bool(exp["kinds"]), name
        assert exp["why"], name
        if exp["valid"] == BAD_INPUT:
            assert isinstance(exp["line"], int), name
        if "cut" in exp:
            assert exp["valid"] in (False, "unknown"), f"{name}: a cut history is never valid"
            assert isinstance(exp["cut"]["line"], int) and exp["cut"]["by"] in CUT_BY, name


#: how a history is cut: its last line cut mid-write, or its promised history-end event missing
CUT_BY = {"cut-line": "the last line is cut", "missing-end": "the history ends without its history-end event"}


def test_the_corpus_has_each_cut_and_a_finished_history() -> None:
    """Both ways a history is cut, one cut history that still proves an anomaly, and one that promised its end and has it."""
    cuts = {(exp["cut"]["by"], exp["valid"]) for exp in EXPECTED.values() if "cut" in exp}
    assert {("cut-line", "unknown"), ("missing-end", "unknown"), ("cut-line", False)} <= cuts
    finished = [n for n, e in EXPECTED.items() if e["valid"] is True and '"end_marker": true' in (EXAMPLES / n).read_text()]
    assert finished, "no valid example that promises its history-end event"


def _assert_cut(where: str, name: str, exp: dict[str, Any], cut: str | None) -> None:
    """The verdict's ``cut`` names the file and the line, and says how (the corpus's ``cut``), or is absent."""
    if "cut" not in exp:
        assert cut is None, f"{where}: {cut}"
        return
    assert cut is not None, f"{where}: the cut is not said"
    _assert_bad_input_message(cut, name, exp["cut"]["line"])
    assert CUT_BY[exp["cut"]["by"]] in cut and cut.endswith("a cut history is never valid"), cut


def test_every_kind_has_an_example() -> None:
    """A new anomaly kind comes with a hand-checked example of it."""
    shown = {k for exp in EXPECTED.values() for k in exp["kinds"]}
    assert set(KINDS) - shown == set(), "kinds with no example in histories/examples"


def test_kind_classes_partition_the_kinds() -> None:
    """Every kind is a proof kind, a timing kind, or non-linearizable itself: exactly one."""
    assert LINEARIZABILITY_KINDS.isdisjoint(TIMING_KINDS)
    assert LINEARIZABILITY_KINDS | TIMING_KINDS | {NON_LINEARIZABLE} == set(KINDS)
    assert len(KINDS) == len(set(KINDS))


def test_the_table_of_checks_covers_every_kind() -> None:
    """Each kind is reported by some row, each row reports only known kinds, and a row
    that is skipped once some kinds are found runs after every row that reports them."""
    reported = {k for row in CHECKS for k in row.reports}
    assert reported == set(KINDS)
    for i, row in enumerate(CHECKS):
        later = {k for r in CHECKS[i:] for k in r.reports}
        assert not (row.unless & later), f"row {i} ({row.run.__name__}) runs before a row it depends on"


def _invoke_indices(path: Path) -> set[int]:
    out = set()
    for raw in path.read_text().splitlines()[1:]:
        try:
            ev = json.loads(raw)
        except ValueError:
            continue  # the truncated last line
        if ev.get("type") == "invoke":
            out.add(ev["index"])
    return out


def _assert_bad_input_message(message: str, name: str, line: int) -> None:
    """docs/contracts/history-format.md: the reader names the line; the report reads "path:LINE: message"."""
    assert re.search(rf"(^|[/\\]){re.escape(name)}:{line}: \S", message), message


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example(name: str) -> None:
    exp = EXPECTED[name]
    path = EXAMPLES / name
    if exp["valid"] == BAD_INPUT:
        with pytest.raises(HistoryError) as info:
            check_source(str(path))
        _assert_bad_input_message(str(info.value), name, exp["line"])
        return

    verdict = check_source(str(path))
    found = [(a.kind, list(a.ops)) for a in verdict.anomalies]
    assert verdict.valid == exp["valid"] and type(verdict.valid) is type(exp["valid"]), found
    assert {a.kind for a in verdict.anomalies} == set(exp["kinds"]), found
    for want in exp["anomalies"]:
        if "ops" in want:
            assert (want["kind"], want["ops"]) in found, f"missing {want} in {found}"
        else:
            assert any(kind == want["kind"] for kind, _ in found), f"missing {want} in {found}"
    invokes = _invoke_indices(path)
    for a in verdict.anomalies:
        assert a.ops, f"{a.kind} names no op"
        assert set(a.ops) <= invokes, f"{a.kind} cites {a.ops}, not all invoke indices"
        assert a.explanation
    if "warning" in exp:
        assert any(exp["warning"] in w for w in verdict.warnings), verdict.warnings
    _assert_cut("check_source", name, exp, verdict.cut)
    if exp["valid"] == "unknown" and "cut" in exp:
        assert verdict.reason == verdict.cut
    json.dumps(verdict.to_json())  # serialisable as the verdict JSON


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e["valid"] is True))
def test_valid_examples_stay_valid_under_search(name: str) -> None:
    """No false positives whichever engine decides linearizability."""
    verdict = check_source(str(EXAMPLES / name), engine="search")
    assert verdict.valid is True, [(a.kind, a.ops) for a in verdict.anomalies]


def _cli() -> list[str]:
    """The installed console script of this interpreter, else the module's main()."""
    script = Path(sys.executable).with_name("leasecheck")
    if script.exists():
        return [str(script)]
    found = shutil.which("leasecheck")
    if found:
        return [found]
    return [sys.executable, "-c", "from leasecheck.cli import main; main()"]


CLI_SAMPLES = [
    "clean-run-three-nodes-four-workers.jsonl",
    "nemesis-pause-resume.jsonl",
    "truncated-last-line.jsonl",
    "end-marker-missing.jsonl",
    "end-marker-finished.jsonl",
    "stale-commit-in-cut-history.jsonl",
    "stale-commit-after-takeover.jsonl",
    "overlapping-lease-after-renew.jsonl",
    "non-linearizable-renew-after-release.jsonl",
    "unfenced-stale-commit-by-grant-order.jsonl",
    "stale-effect-lease-after-newer-claim.jsonl",
    "stale-effect-before-any-newer-effect.jsonl",
    "bad-input-index-gap.jsonl",
    "bad-input-bad-json-in-middle.jsonl",
    "bad-input-unknown-effect-fence.jsonl",
]


@pytest.mark.parametrize("name", CLI_SAMPLES)
def test_cli(name: str) -> None:
    exp = EXPECTED[name]
    path = EXAMPLES / name
    proc = subprocess.run(
        [*_cli(), "check", str(path), "--json"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == EXIT_CODES[exp["valid"]], (proc.stdout, proc.stderr)
    if exp["valid"] == BAD_INPUT:
        _assert_bad_input_message(proc.stdout + proc.stderr, name, exp["line"])
        return
    out = json.loads(proc.stdout)  # exactly one JSON object, nothing else on stdout
    assert isinstance(out, dict)
    assert {"valid", "anomalies", "stats"} <= set(out)
    assert out["valid"] == exp["valid"]
    assert sorted({a["kind"] for a in out["anomalies"]}) == exp["kinds"]
    for want in exp["anomalies"]:
        if "ops" in want:
            assert any(a["kind"] == want["kind"] and a["ops"] == want["ops"] for a in out["anomalies"]), out
    _assert_cut("check --json", name, exp, out.get("cut"))
    if exp["valid"] == "unknown":
        assert out["reason"] == out.get("cut", out["reason"])


#: (the example, its mirror under the other effect_fence): the same events, judged by each rule
EFFECT_FENCE_TWINS = [("stale-effect-before-any-newer-effect.jsonl", "stale-effect-lease-after-newer-claim.jsonl")]


@pytest.mark.parametrize(("token", "lease"), EFFECT_FENCE_TWINS)
def test_effect_fence_twins_differ_only_in_the_rule(token: str, lease: str) -> None:
    """One zombie effect, after the newer claim and before the newer holder's first effect:
    a near miss for a resource that knows only tokens, stale for one a claim fences."""
    t_lines = (EXAMPLES / token).read_text().splitlines()
    l_lines = (EXAMPLES / lease).read_text().splitlines()
    assert t_lines[1:] == l_lines[1:], "the twins must share every event"
    assert json.loads(t_lines[0]).get("effect_fence") == "token"
    assert json.loads(l_lines[0]).get("effect_fence", "lease") == "lease"
    assert check_source(str(EXAMPLES / token)).valid is True
    lease_verdict = check_source(str(EXAMPLES / lease))
    assert [(a.kind, a.ops) for a in lease_verdict.anomalies] == [("stale-effect", EXPECTED[lease]["anomalies"][0]["ops"])]
    assert 'effect_fence "lease"' in lease_verdict.anomalies[0].explanation


def test_every_effect_fence_has_a_near_miss_and_an_anomaly() -> None:
    """Each rule of stale-effect is pinned by the corpus from both sides."""
    seen: dict[tuple[str, bool], list[str]] = {}
    for name, exp in EXPECTED.items():
        if exp["valid"] == BAD_INPUT or "effect" not in name:
            continue
        header = json.loads((EXAMPLES / name).read_text().splitlines()[0])
        if header.get("fencing") is False:
            continue
        rule = header.get("effect_fence", "lease")
        seen.setdefault((rule, exp["valid"] is True), []).append(name)
    for rule in ("lease", "token"):
        assert (rule, True) in seen, f"no {rule} near miss"
        assert (rule, False) in seen, f"no {rule} anomaly"
