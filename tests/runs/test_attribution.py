"""Explanations say what differs, and every anomaly says whether a fault hit the processes that prove it.

Issue 20, finding 7: ``lost-commit`` named no field the read got wrong, unfenced
leases printed as ``epoch None``, and nothing told a fault's victim from a
worker that stalled on its own (an audit called a library "invalid under kill"
for a stale write by a process nobody killed). Hand-written histories, each
judged to the letter: the explanation's words, the attributed faults' fields and
the op indices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

from leasecheck.checker import check_source
from leasecheck.checker.attribution import FaultWindow, attribute_one, lease_starts
from leasecheck.checker.explain import outcome
from leasecheck.checker.verdict import Anomaly
from leasecheck.histories import HistoryReader
from leasecheck.histories.format import Header
from leasecheck.histories.writer import HistoryWriter
from leasecheck.verdict.attribution import fault_victims

MS = 1_000_000
A, B = "run-1/a", "run-1/b"


class History:
    """A history written event by event at explicit times (ms), for one test."""

    def __init__(self, path: Path, ttl_ms: int = 100) -> None:
        self.path = path
        self.w = HistoryWriter(path, Header(ttl_ms, 0, {"target": "hand-written"}))

    def op(self, process: int, f: str, node: str, value: dict[str, Any], start_ms: float, end_ms: float,
           typ: str = "ok", result: dict[str, Any] | None = None) -> int:
        """One op, invoked and completed at once: only for ops no other op overlaps (the writer is in file order)."""
        index = self.w.invoke(process, f, node, value, at=int(start_ms * MS))
        self.w.complete(process, typ, result or {}, at=int(end_ms * MS))
        return index

    def invoke(self, process: int, f: str, node: str, value: dict[str, Any], at_ms: float) -> int:
        return self.w.invoke(process, f, node, value, at=int(at_ms * MS))

    def complete(self, process: int, typ: str, value: dict[str, Any], at_ms: float) -> int:
        return self.w.complete(process, typ, value, at=int(at_ms * MS))

    def nemesis(self, f: str, value: dict[str, Any], at_ms: float) -> None:
        self.w.nemesis(f, value, at=int(at_ms * MS))

    def verdict(self) -> dict[str, Any]:
        self.w.close()
        return check_source(self.path, faults=fault_victims).to_json()


def only(verdict: dict[str, Any], kind: str, node: str | None = None) -> list[dict[str, Any]]:
    return [a for a in verdict["anomalies"] if a["kind"] == kind and (node is None or a["node"] == node)]


# ------------------------------------------------------------------ lost-commit: what differs


def lost_commit(tmp_path: Path, read: dict[str, Any], fenced: bool = True) -> dict[str, Any]:
    h = History(tmp_path / "h.jsonl")
    lease = {"epoch": 1} if fenced else {"epoch": None, "token": "tok-a"}
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result=lease)
    h.op(0, "commit", A, {**lease, "result": "r-w0"}, 10, 11)
    h.op(1, "read", A, {}, 20, 21, result=read)
    return h.verdict()


def test_lost_commit_names_each_field_the_read_shows_otherwise_with_both_values(tmp_path: Path) -> None:
    """The issue's case: the read shows the committed result; what differs is the epoch and the owner."""
    v = lost_commit(tmp_path, {"status": "SUCCEEDED", "epoch": 2, "owner": "w1", "result": "r-w0"})
    [a] = only(v, "lost-commit")
    assert a["ops"] == [2, 4]
    assert a["explanation"] == (
        "op 2 (commit with epoch 1, process 0) succeeded at 11.000 ms, making the node SUCCEEDED with epoch 1, "
        "owner 'w0' and result 'r-w0'; but op 4 (read, process 1), invoked later at 20.000 ms, shows epoch 2 "
        "instead of 1 and owner 'w1' instead of 'w0' (status SUCCEEDED and result 'r-w0' agree)."
    )


@pytest.mark.parametrize(("read", "differs", "agrees"), [
    ({"status": "RUNNING", "epoch": 1, "owner": "w0"}, "status RUNNING instead of SUCCEEDED", "epoch 1 and owner 'w0'"),
    ({"status": "SUCCEEDED", "epoch": 1, "owner": "w0", "result": "r-w9"}, "result 'r-w9' instead of 'r-w0'",
     "status SUCCEEDED, epoch 1 and owner 'w0'"),
    ({"status": "SUCCEEDED", "epoch": 1, "owner": "w0", "result": None}, "no result instead of 'r-w0'",
     "status SUCCEEDED, epoch 1 and owner 'w0'"),
    ({"status": "READY", "epoch": 3}, "status READY instead of SUCCEEDED and epoch 3 instead of 1", ""),
], ids=["status", "result", "no-result", "status-and-epoch"])
def test_lost_commit_says_which_fields_differ_and_which_agree(tmp_path: Path, read: dict[str, Any], differs: str, agrees: str) -> None:
    [a] = only(lost_commit(tmp_path, read), "lost-commit")
    tail = f" ({agrees} agree)." if agrees else "."
    assert a["explanation"].endswith(f"invoked later at 20.000 ms, shows {differs}{tail}"), a["explanation"]


def test_a_read_that_gives_no_result_is_not_compared_on_it(tmp_path: Path) -> None:
    """docs/contracts/anomaly-kinds.md: a field a read does not give is never compared (a job queue that stores no
    result says only that the job succeeded); a null result it gives is."""
    v = lost_commit(tmp_path, {"status": "SUCCEEDED", "epoch": 1, "owner": "w0"})
    assert v["valid"] is True, v["anomalies"]


def test_an_unfenced_lost_commit_names_the_lease_by_its_token(tmp_path: Path) -> None:
    v = lost_commit(tmp_path, {"status": "SUCCEEDED", "epoch": None, "token": "tok-b", "owner": "w1", "result": "r-w0"}, fenced=False)
    [a] = only(v, "lost-commit")
    assert a["explanation"] == (
        "op 2 (commit with token 'tok-a', process 0) succeeded at 11.000 ms, making the node SUCCEEDED with token "
        "'tok-a', owner 'w0' and result 'r-w0'; but op 4 (read, process 1), invoked later at 20.000 ms, shows token "
        "'tok-b' instead of 'tok-a' and owner 'w1' instead of 'w0' (status SUCCEEDED and result 'r-w0' agree)."
    )


def test_an_unfenced_read_is_described_by_its_token_never_epoch_none(tmp_path: Path) -> None:
    h = History(tmp_path / "h.jsonl")
    h.op(1, "read", A, {}, 0, 1, result={"status": "RUNNING", "epoch": None, "token": "tok-a", "owner": "w0"})
    h.w.close()
    [op] = list(HistoryReader(h.path).ops())
    assert outcome(op) == "read RUNNING, token 'tok-a', owner 'w0'"


def test_no_unfenced_explanation_or_chain_says_none(tmp_path: Path) -> None:
    """An unfenced node (epoch null, opaque tokens) with a stale commit by grant order, a duplicate commit, a
    lost commit and a refused claim long after every lease expired: each lease is named by its token, in the
    explanations and in the ``--explain`` chains, never as ``epoch None``."""
    h = History(tmp_path / "h.jsonl")
    lease = {"epoch": None}
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={**lease, "token": "tok-a"})
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={**lease, "token": "tok-b"})
    h.op(1, "commit", A, {**lease, "token": "tok-b", "result": "r-w1"}, 210, 211)
    h.op(0, "commit", A, {**lease, "token": "tok-a", "result": "r-w0"}, 220, 221)
    h.op(2, "read", A, {}, 230, 231, result={"status": "RUNNING", **lease, "token": "tok-a", "owner": "w0"})
    h.op(3, "claim", B, {"owner": "w3"}, 0, 1, result={**lease, "token": "tok-c"})
    h.op(4, "claim", B, {"owner": "w4"}, 500, 501, typ="fail", result={"reason": "held"})
    h.w.close()
    verdict = check_source(h.path, faults=fault_victims)
    from leasecheck.checker.explain import render_chain

    kinds = {a.kind for a in verdict.anomalies}
    assert {"stale-commit", "duplicate-commit", "lost-commit", "stuck-lease"} <= kinds, kinds
    for a in verdict.anomalies:
        for words in (a.explanation, render_chain(a, verdict.cited), a.attribution or ""):
            assert "None" not in words, words
    [lost] = [a for a in verdict.anomalies if a.kind == "lost-commit" and a.ops == [4, 8]]
    assert "shows status RUNNING instead of SUCCEEDED, token 'tok-a' instead of 'tok-b' and owner 'w0' instead of 'w1'" \
        in lost.explanation, lost.explanation
    assert "read RUNNING, token 'tok-a', owner 'w0'" in render_chain(lost, verdict.cited)


# ------------------------------------------------------------------ attribution


def test_a_zombie_paused_by_the_nemesis_is_its_victim_and_one_that_stalled_by_itself_is_not(tmp_path: Path) -> None:
    """The seed's GC pause on node a (process 0), the workload's own stall on node b (process 2), a kill of
    process 4 meanwhile: only a's stale commit is the pause's; b's stalled on its own, and the kill touched neither."""
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})  # op 0
    h.op(2, "claim", B, {"owner": "w2"}, 2, 3, result={"epoch": 1})  # op 2
    h.nemesis("pause", {"fault": "pause", "victims": [0], "pid": 100}, 10)
    h.op(4, "claim", "run-1/c", {"owner": "w4"}, 20, 21, result={"epoch": 1})  # op 5
    h.invoke(4, "renew", "run-1/c", {"epoch": 1}, 30)  # op 7, killed in flight
    h.nemesis("kill", {"fault": "kill", "victims": [4], "pid": 104}, 40)
    h.nemesis("start", {"victims": [5], "replaces": 4}, 41)
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})  # op 10
    h.op(3, "claim", B, {"owner": "w3"}, 210, 211, result={"epoch": 2})  # op 12
    h.nemesis("resume", {"fault": "pause", "victims": [0], "pid": 100}, 300)
    h.op(0, "renew", A, {"epoch": 1}, 301, 302, typ="fail", result={"reason": "stale"})  # op 15: the zombie wakes
    h.op(0, "commit", A, {"epoch": 1, "result": "r-w0"}, 303, 304)  # op 17: stale, after the pause
    h.op(2, "commit", B, {"epoch": 1, "result": "r-w2"}, 305, 306)  # op 19: stale, no fault on process 2
    v = h.verdict()
    [a] = only(v, "stale-commit", A)
    [b] = only(v, "stale-commit", B)
    assert (a["ops"], b["ops"]) == ([10, 17], [12, 19])
    assert a["faults"] == [{"fault": "pause", "process": 0, "op": 17, "start_s": 0.01, "end_s": 0.3, "everyone": False}]
    assert a["stalled_on_its_own"] is False
    assert a["attribution"] == "Fault: process 0 (op 17) was paused by `pause` 0.010–0.300 s."
    assert b["faults"] == [] and b["stalled_on_its_own"] is True
    assert b["attribution"] == "No fault touched process 2 (op 19) from the claim of its lease to the stale op: it stalled on its own."
    # the four keys of docs/contracts/verdict.md's verdict are as they were, first
    assert list(a)[:4] == ["kind", "node", "ops", "explanation"]


def test_a_pause_before_the_lease_was_claimed_is_not_its_cause(tmp_path: Path) -> None:
    h = History(tmp_path / "h.jsonl")
    h.nemesis("pause", {"fault": "pause", "victims": [0]}, 0)
    h.nemesis("resume", {"fault": "pause", "victims": [0]}, 5)
    h.op(0, "claim", A, {"owner": "w0"}, 10, 11, result={"epoch": 1})  # op 2
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})  # op 4
    h.op(0, "effect", A, {"epoch": 1, "payload": "p"}, 210, 211)  # op 6
    [a] = only(h.verdict(), "stale-effect")
    assert a["ops"] == [4, 6] and a["faults"] == [] and a["stalled_on_its_own"] is True


def test_only_the_stale_op_proves_a_stale_kind_the_newer_claims_process_does_not(tmp_path: Path) -> None:
    """Process 1, which claimed the newer lease, was paused meanwhile: that is no cause of process 0's stale renew."""
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})  # op 2
    h.nemesis("pause", {"fault": "pause", "victims": [1]}, 202)
    h.op(0, "renew", A, {"epoch": 1}, 210, 211)  # op 5
    h.nemesis("resume", {"fault": "pause", "victims": [1]}, 300)
    [a] = only(h.verdict(), "stale-renew")
    assert a["ops"] == [2, 5] and a["faults"] == []


def test_a_store_fault_hits_every_process_whose_span_it_overlaps(tmp_path: Path) -> None:
    """kill-store between a lost commit and the read that shows it lost: it hit the commit's lease
    (claimed before it, the anomaly proven after it), not the read, invoked after the restart."""
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.op(0, "commit", A, {"epoch": 1, "result": "r"}, 10, 11)  # op 2
    h.nemesis("kill", {"fault": "kill-store", "victims": ["store"]}, 50)
    h.nemesis("start", {"fault": "kill-store", "victims": ["store"]}, 80)
    h.op(1, "read", A, {}, 100, 101, result={"status": "RUNNING", "epoch": 1, "owner": "w0"})  # op 6
    [a] = only(h.verdict(), "lost-commit")
    assert a["ops"] == [2, 6]
    assert a["faults"] == [{"fault": "kill-store", "process": 0, "op": 2, "start_s": 0.05, "end_s": 0.08, "everyone": True}]
    assert a["attribution"] == "Fault: `kill-store` killed the store 0.050–0.080 s, which hits every process: process 0 (op 2)."


@pytest.mark.parametrize(("scope", "victims", "hit"), [("all", [7, 8], True), ("some", [0], True), ("some", [7], False)])
def test_a_network_fault_hits_its_victims_or_everyone_when_its_scope_is_all(
    tmp_path: Path, scope: str, victims: list[int], hit: bool,
) -> None:
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.nemesis("partition", {"fault": "partition", "victims": victims, "proxies": [9], "mode": "cut", "scope": scope}, 5)
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})  # op 3
    h.nemesis("heal", {"fault": "partition", "victims": victims, "proxies": [9], "mode": "cut"}, 250)
    h.op(0, "commit", A, {"epoch": 1, "result": "r"}, 260, 261)  # op 6
    [a] = only(h.verdict(), "stale-commit")
    assert a["ops"] == [3, 6]
    expected = [{"fault": "partition", "process": 0, "op": 6, "start_s": 0.005, "end_s": 0.25, "everyone": scope == "all"}]
    assert a["faults"] == (expected if hit else [])


def test_a_fault_never_healed_runs_to_the_end(tmp_path: Path) -> None:
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.nemesis("clock-skew", {"fault": "clock-bump", "victims": [0], "clocks": [0], "delta_ms": 500}, 5)
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})
    h.op(0, "commit", A, {"epoch": 1, "result": "r"}, 260, 261)  # op 5
    [a] = only(h.verdict(), "stale-commit")
    assert a["faults"] == [{"fault": "clock-bump", "process": 0, "op": 5, "start_s": 0.005, "end_s": None, "everyone": False}]
    assert a["attribution"] == "Fault: process 0 (op 5) was clock-skewed by `clock-bump` from 0.005 s on (never healed)."


def test_attribution_is_a_pure_function_of_the_cited_ops_their_leases_and_the_windows(tmp_path: Path) -> None:
    """The function itself, without a history file: the lease's claim starts the zombie's span."""
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})
    h.op(0, "commit", A, {"epoch": 1, "result": "r"}, 260, 261)
    h.w.close()
    ops = {op.index: op for op in HistoryReader(h.path).ops()}
    starts = lease_starts(ops.values(), [ops[4]])
    assert starts == {4: 0}
    anomaly = Anomaly("stale-commit", A, [2, 4], "...")
    inside = FaultWindow("pause", 50 * MS, 150 * MS, frozenset({0}), did="paused")
    other = FaultWindow("pause", 50 * MS, 150 * MS, frozenset({1}), did="paused")
    after = FaultWindow("pause", 262 * MS, 300 * MS, frozenset({0}), did="paused")
    faults, _ = attribute_one(anomaly, ops, starts, [inside, other, after])
    assert [(f["fault"], f["process"], f["op"]) for f in faults] == [("pause", 0, 4)]
    assert attribute_one(anomaly, ops, {}, [inside])[0] == []  # without the lease's start: only the op itself


def test_check_json_carries_the_attribution_and_the_terminal_prints_it(tmp_path: Path) -> None:
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.nemesis("pause", {"fault": "pause", "victims": [0]}, 10)
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})
    h.nemesis("resume", {"fault": "pause", "victims": [0]}, 250)
    h.op(0, "commit", A, {"epoch": 1, "result": "r"}, 260, 261)  # op 6
    h.w.close()
    done = subprocess.run([sys.executable, "-m", "leasecheck", "check", "--json", str(h.path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    [a] = json.loads(done.stdout)["anomalies"]
    assert a["faults"] == [{"fault": "pause", "process": 0, "op": 6, "start_s": 0.01, "end_s": 0.25, "everyone": False}]
    printed = subprocess.run([sys.executable, "-m", "leasecheck", "check", str(h.path)], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "COLUMNS": "80", "TERM": "dumb"})
    assert "Fault: process 0 (op 6) was paused by `pause` 0.010–0.250 s." in printed.stdout.splitlines(), printed.stdout


def test_a_split_history_is_attributed_as_one_checked_in_memory(tmp_path: Path) -> None:
    """A big history is checked in spilled partitions: its ops are read again for the leases' claims."""
    h = History(tmp_path / "h.jsonl")
    for n in range(6):
        node = f"run-1/n{n}"
        t = n * 1000
        h.op(0, "claim", node, {"owner": "w0"}, t, t + 1, result={"epoch": 1})
        if n % 2:
            h.nemesis("pause", {"fault": "pause", "victims": [0]}, t + 10)
        h.op(1, "claim", node, {"owner": "w1"}, t + 200, t + 201, result={"epoch": 2})
        if n % 2:
            h.nemesis("resume", {"fault": "pause", "victims": [0]}, t + 250)
        h.op(0, "commit", node, {"epoch": 1, "result": "r"}, t + 260, t + 261)
    h.w.close()
    whole = check_source(h.path, faults=fault_victims).to_json()
    split = check_source(h.path, faults=fault_victims, partitions=3, jobs=1).to_json()
    assert split["anomalies"] == whole["anomalies"]
    assert [(a["node"], bool(a["faults"])) for a in whole["anomalies"]] == [(f"run-1/n{n}", n % 2 == 1) for n in range(6)]


# ------------------------------------------------------------------ where it is said: JUnit, the report, pytest


def paused_zombie(path: Path) -> Path:
    """One stale commit of a process the nemesis paused (op 6), one of a process that stalled by itself (op 13)."""
    h = History(path)
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.nemesis("pause", {"fault": "pause", "victims": [0]}, 10)
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})
    h.nemesis("resume", {"fault": "pause", "victims": [0]}, 250)
    h.op(0, "commit", A, {"epoch": 1, "result": "r"}, 260, 261)  # op 6
    h.op(2, "claim", B, {"owner": "w2"}, 300, 301, result={"epoch": 1})
    h.op(3, "claim", B, {"owner": "w3"}, 500, 501, result={"epoch": 2})
    h.op(2, "commit", B, {"epoch": 1, "result": "r"}, 510, 511)  # op 12
    h.w.close()
    return path


PAUSED = "Fault: process 0 (op 6) was paused by `pause` 0.010–0.250 s."
ON_ITS_OWN = "No fault touched process 2 (op 12) from the claim of its lease to the stale op: it stalled on its own."


def test_junit_lists_each_anomaly_with_its_attribution(tmp_path: Path) -> None:
    history = paused_zombie(tmp_path / "h.jsonl")
    out = tmp_path / "check.xml"
    done = subprocess.run([sys.executable, "-m", "leasecheck", "check", str(history), "--junit", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    import xml.etree.ElementTree as ET

    failure = ET.parse(out).getroot().find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    lines = [line for line in failure.text.splitlines() if line.startswith("stale-commit on ")]
    assert [line.split(": ", 1)[0] for line in lines] == [f"stale-commit on {A}, ops [3, 6]", f"stale-commit on {B}, ops [10, 12]"]
    assert lines[0].endswith(" " + PAUSED) and lines[1].endswith(" " + ON_ITS_OWN)


def test_the_report_shows_each_anomalys_attribution(tmp_path: Path) -> None:
    from browser import BrowserMissing, chromium
    from report_page import read_page
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    history = paused_zombie(tmp_path / "h.jsonl")
    done = subprocess.run([sys.executable, "-m", "leasecheck", "report", str(history)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = tmp_path / "h.html"
    _, _, meta = read_page(report)
    assert [(a["node"], a["ops"], a["attribution"]) for a in meta["anomalies"]] == [(A, [3, 6], PAUSED), (B, [10, 12], ON_ITS_OWN)]
    try:
        driver = chromium()
    except BrowserMissing as e:
        pytest.fail(f"the report's browser check needs Chromium: {e}", pytrace=False)
    try:
        driver.get(report.as_uri())
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return !!window.lcReport && window.lcReport.ready === true"))
        assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".anomaly .a-fault")] == [PAUSED, ON_ITS_OWN]
        driver.find_elements(By.CSS_SELECTOR, ".anomaly")[0].click()
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chain .expl.fault"))
        assert driver.find_element(By.CSS_SELECTOR, "#chain .expl.fault").text == PAUSED
    finally:
        driver.quit()


def test_the_pytest_plugin_says_whom_a_fault_hit() -> None:
    from leasecheck.ci.plugin_results import Anomaly as Shown
    from leasecheck.ci.plugin_results import LeasecheckResult, describe_run

    anomaly = {"kind": "stale-commit", "node": A, "ops": [3, 6], "explanation": "op 6 was stale.", "attribution": PAUSED}
    result = LeasecheckResult("t", 4, "invalid", None, (Shown.from_json(anomaly),), Path("run"), Path("run/report.html"),
                              "leasecheck run", 1, {})
    assert f"      {PAUSED}" in describe_run(result, "valid").splitlines()


def test_the_verdict_schema_knows_the_attribution_and_refuses_a_half_one(tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads((REPO / "histories" / "schema" / "verdict-v1.json").read_text())
    check = jsonschema.Draft202012Validator(schema)
    verdict = check_source(paused_zombie(tmp_path / "h.jsonl"), faults=fault_victims).to_json()
    check.validate(verdict)
    a = verdict["anomalies"][0]
    for broken in ({**a, "faults": [{**a["faults"][0], "process": "zero"}]},
                   {k: v for k, v in a.items() if k != "attribution"},
                   {**a, "stalled_on_its_own": "no"}):
        assert list(check.iter_errors({**verdict, "anomalies": [broken]})), broken


def test_a_kill_after_the_victims_op_completed_did_not_make_it(tmp_path: Path) -> None:
    """A worker killed after its commit was acknowledged, then the read that shows the commit lost: the store's doing, not the kill's."""
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.op(0, "commit", A, {"epoch": 1, "result": "r"}, 10, 11)  # op 2
    h.nemesis("kill", {"fault": "kill", "victims": [0]}, 20)
    h.nemesis("start", {"victims": [2], "replaces": 0}, 21)
    h.op(1, "read", A, {}, 100, 101, result={"status": "RUNNING", "epoch": 1, "owner": "w0"})  # op 6
    [a] = only(h.verdict(), "lost-commit")
    assert a["ops"] == [2, 6] and a["faults"] == [] and a["stalled_on_its_own"] is True
    assert a["attribution"] == (
        "No fault touched processes 0 and 1 (ops 2, 6) from the claim of their lease to the anomaly's last op: "
        "it happened without a fault."
    )


# ------------------------------------------------------------------ audits: per fault, what its victims did


def audit_history(path: Path, zombie_paused: bool) -> Path:
    """A run under ``pause`` that tested everything a pause run must (ok claim, renew, effect and commit; a
    takeover; a claim after expiry; the pause started and healed), with one stale commit on node b by process 2:
    paused by the nemesis or, with ``zombie_paused`` false, stalled on its own (the pause hit process 0 instead)."""
    h = History(path)
    victim = 2 if zombie_paused else 0
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.op(0, "renew", A, {"epoch": 1}, 10, 11)
    h.op(0, "effect", A, {"epoch": 1, "payload": "p"}, 12, 13)
    h.op(2, "claim", B, {"owner": "w2"}, 14, 15, result={"epoch": 1})  # op 6
    h.nemesis("pause", {"fault": "pause", "victims": [victim]}, 20)
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})  # over an expired lease
    h.op(3, "claim", B, {"owner": "w3"}, 210, 211, result={"epoch": 2})  # op 11
    h.nemesis("resume", {"fault": "pause", "victims": [victim]}, 250)
    h.op(1, "commit", A, {"epoch": 2, "result": "r-w1"}, 260, 261)
    h.op(2, "commit", B, {"epoch": 1, "result": "r-w2"}, 270, 271)  # op 16: stale
    h.w.close()
    return path


@pytest.mark.parametrize("zombie_paused", [True, False], ids=["victim", "own-stall"])
def test_an_audit_publishes_per_fault_only_what_the_faults_victims_did(tmp_path: Path, zombie_paused: bool) -> None:
    from leasecheck.auditing.audit import fault_verdict
    from leasecheck.verdict.run_verdict import fault_windows

    history = audit_history(tmp_path / "h.jsonl", zombie_paused)
    verdict = check_source(history, windows=fault_windows, faults=fault_victims)
    [a] = verdict.anomalies
    assert (a.kind, a.node, a.ops) == ("stale-commit", B, [11, 16])
    judged = fault_verdict(verdict, None, "pause", history)
    if zombie_paused:
        assert (judged.verdict, judged.reason, judged.anomalies, judged.without_fault) == ("invalid", None, [a], [])
    else:  # the run tested all a pause run must, and the pause's victims did nothing wrong
        assert (judged.verdict, judged.reason, judged.anomalies, judged.without_fault) == ("valid", None, [], [a])


def test_an_audit_whose_only_anomalies_stalled_on_their_own_is_judged_like_a_run_without_them(tmp_path: Path) -> None:
    """Nothing of the pause's own (it never healed): unknown with the run verdict's reason, not invalid, not valid."""
    from leasecheck.auditing.audit import fault_verdict
    from leasecheck.verdict.run_verdict import fault_windows

    history = audit_history(tmp_path / "h.jsonl", zombie_paused=False)
    lines = [line for line in history.read_text().splitlines() if '"resume"' not in line]
    for i, line in enumerate(lines[1:]):  # renumber the events, as a history without the heal would be
        lines[i + 1] = json.dumps({**json.loads(line), "index": i})
    history.write_text("\n".join(lines) + "\n")
    verdict = check_source(history, windows=fault_windows, faults=fault_victims)
    judged = fault_verdict(verdict, None, "pause", history)
    assert judged.verdict == "unknown" and judged.reason == "the run did not test enough: pause never healed"
    assert [a.kind for a in judged.without_fault] == ["stale-commit"]


# ------------------------------------------------------------------ a real run


#: seeds tried in turn until one's pause made a zombie (seed 3 does on a quiet machine; a loaded one may stall a
#: worker on its own first): every run's anomalies are checked, so a seed passed over still proves its attributions
PAUSE_SEEDS = (3, 4, 5, 6)


def test_a_real_run_under_pause_attributes_every_anomaly_to_the_pause_or_to_nothing(tmp_path: Path) -> None:
    """``leasecheck run`` of a broken variant under ``pause``: each anomaly in results.json is attributed, and
    exactly as recomputed here from the raw history (the pause windows of its events, the stale op's lease).
    Both answers must be seen: the run goes on to the next seed until one of its anomalies is the pause's doing."""
    for seed in PAUSE_SEEDS:
        if _attributions_of_a_run_under_pause(tmp_path / f"seed-{seed}", seed):
            return
    raise AssertionError(f"no anomaly of seeds {PAUSE_SEEDS} was the pause's doing: pick seeds whose pause made a zombie")


def _attributions_of_a_run_under_pause(cwd: Path, seed: int) -> int:
    """Run one seed, check every anomaly's attribution against the raw history; how many were the pause's doing."""
    cwd.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "run", "--target", "sqlite-fence-at-commit", "--nemesis", "pause",
         "--seed", str(seed), "--time-limit", "15", "--ttl", "300", "--nemesis-interval", "1", "--store", "store",
         "--json"],
        cwd=cwd, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    results = json.loads(done.stdout)
    run_dir = Path(results["run_dir"])
    events = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()[1:]]
    opened: dict[int, int] = {}
    windows: list[tuple[int, int, int]] = []  # (victim, start, end), from the raw pause / resume events
    for ev in events:
        if ev["process"] == "nemesis" and ev["f"] in ("pause", "resume"):
            for victim in ev["value"]["victims"]:  # a pause may stop several workers: each is its victim
                if ev["f"] == "pause":
                    opened[victim] = ev["time"]
                else:
                    windows.append((victim, opened.pop(victim), ev["time"]))
    windows += [(victim, start, 2**63) for victim, start in opened.items()]
    assert windows, "the run never paused a worker"
    invokes = {ev["index"]: ev for ev in events if ev["type"] == "invoke"}
    done_at: dict[int, int] = {}
    pending: dict[Any, int] = {}
    for ev in events:
        if ev["process"] != "nemesis":
            if ev["type"] == "invoke":
                pending[ev["process"]] = ev["index"]
            else:
                done_at[pending.pop(ev["process"])] = ev["time"]

    def lease_start(i: int) -> int:
        op = invokes[i]
        claims = [c for c in invokes.values() if c["f"] == "claim" and c["node"] == op["node"] and c["index"] < i
                  and c["process"] == op["process"] and c["index"] in done_at]
        return max(c["time"] for c in claims) if claims else op["time"]

    anomalies = results["anomalies"]
    assert anomalies and all({"faults", "stalled_on_its_own", "attribution"} <= set(a) for a in anomalies)
    attributed = 0
    for a in anomalies:
        if a["kind"] == "fence-regression":  # its resource's fence, read back, is below the claim that should have lifted it
            continue
        assert a["kind"] in ("stale-effect", "stale-commit", "stale-renew"), a  # what this variant gets wrong
        stale = a["ops"][-1]
        process = invokes[stale]["process"]
        expected = [(victim, start, end) for victim, start, end in windows
                    if victim == process and start <= done_at[stale] and end >= lease_start(stale)]
        got = [(f["process"], round(f["start_s"] * 1e9), round(f["end_s"] * 1e9) if f["end_s"] is not None else 2**63)
               for f in a["faults"]]
        assert [(v, round(s / 1e3), round(e / 1e3) if e != 2**63 else e) for v, s, e in expected] == \
            [(v, round(s / 1e3), round(e / 1e3) if e != 2**63 else e) for v, s, e in got], a
        assert all(f["fault"] == "pause" and f["op"] == stale and f["everyone"] is False for f in a["faults"])
        assert a["stalled_on_its_own"] is (not a["faults"])
        attributed += bool(a["faults"])
        if a["faults"]:
            assert a["attribution"].startswith(f"Fault: process {process} (op {stale}) was paused by `pause` ")
        else:
            assert a["attribution"].startswith(f"No fault touched process {process} (op {stale})")
    return attributed


def test_an_audit_result_reports_the_workloads_own_stalls_apart(tmp_path: Path) -> None:
    """JSON, AUDITS.md's row and the terminal line: valid under the fault, invalid without it, with the first proof."""
    from rich.console import Console

    from leasecheck.auditing.audit import AuditResult
    from leasecheck.report.terminal import print_audit_result
    from leasecheck.targets.audits import FaultAudit

    proof = {"kind": "stale-commit", "node": B, "ops": [11, 16]}
    r = AuditResult("etcd3-lock", "etcd3", "0.12.0", "documented", "kill", 1, "valid", (), None, tmp_path,
                    FaultAudit("kill", "valid"), without_fault=("stale-commit", "stale-effect"),
                    without_fault_count=3, without_fault_proof=proof)
    assert r.matches
    assert r.to_json()["without_fault"] == {"kinds": ["stale-commit", "stale-effect"], "anomalies": 3, "proof": proof}
    assert "| kill | 1 | valid; invalid without the fault (stale-commit, stale-effect: the workload's own stall) | - |" in r.markdown_row()
    console = Console(record=True, width=400)
    print_audit_result(console, r)
    assert ("etcd3 0.12.0 [documented] kill seed 1: valid; invalid without the fault (the workload's own stall): "
            f"stale-commit, stale-effect (3 anomalies; first: stale-commit on {B}, ops [11, 16]); as published") \
        in console.export_text()
    clean = AuditResult("etcd3-lock", "etcd3", "0.12.0", "documented", "pause", 1, "valid", (), None, tmp_path,
                        FaultAudit("pause", "valid"))
    assert clean.to_json()["without_fault"] is None and "without" not in clean.markdown_row()


def test_a_commit_lost_to_a_paused_zombies_commit_is_the_pauses_doing(tmp_path: Path) -> None:
    """The read shows the zombie's lease: its commit (not cited by the lost-commit) is a proving op too."""
    h = History(tmp_path / "h.jsonl")
    h.op(0, "claim", A, {"owner": "w0"}, 0, 1, result={"epoch": 1})
    h.nemesis("pause", {"fault": "pause", "victims": [0]}, 10)
    h.op(1, "claim", A, {"owner": "w1"}, 200, 201, result={"epoch": 2})  # op 3
    h.op(1, "commit", A, {"epoch": 2, "result": "r-w1"}, 210, 211)  # op 5
    h.nemesis("resume", {"fault": "pause", "victims": [0]}, 250)
    h.op(0, "commit", A, {"epoch": 1, "result": "r-w0"}, 260, 261)  # op 8: the zombie's, over it
    h.op(2, "read", A, {}, 300, 301, result={"status": "SUCCEEDED", "epoch": 1, "owner": "w0", "result": "r-w0"})  # op 10
    v = h.verdict()
    [lost] = only(v, "lost-commit")
    assert lost["ops"] == [5, 10]
    assert lost["faults"] == [{"fault": "pause", "process": 0, "op": 8, "start_s": 0.01, "end_s": 0.25, "everyone": False}]
    assert lost["attribution"] == "Fault: process 0 (op 8) was paused by `pause` 0.010–0.250 s. Op 8 is the commit of the lease that op 10 shows."
    assert [a["faults"][0]["op"] for a in only(v, "stale-commit") + only(v, "duplicate-commit")] == [8, 8]
