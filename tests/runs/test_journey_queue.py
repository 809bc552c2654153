"""The job queue journey (docs/journeys/audit-a-job-queue.md) runs end to end, from the page itself.

taskiq with its Redis broker (taskiq-redis), a queue leasecheck ships no adapter for, from
``leasecheck new-target --queue`` to a finding published in the adapter's plan: the test
scaffolds the adapter, puts the page's blocks in place of the scaffold's parts, runs the page's
commands in a fresh folder and holds their real output to the page's. The blocks are marked as
tests/runs/test_journeys.py's pages are (its docstring), with its helpers; the page's marked names
are exactly the ones this test uses.

Its audits are the page's: the fault ``none`` alone (the task's own stalls), one seed each
(``--seeds 1``, the next seed only where a run proved nothing), at the plan's time limit.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path

import pytest
from inner_pytest import failed_tests, passed_count
from journey import Page, environment, ops_of, run, run_until_proven, same_shape

from leasecheck.kit.queue_conformance import PROMISES
from leasecheck.kit.scaffold_queue import QUEUE_DUTIES
from leasecheck.targets.audits import REDELIVERED_JOB

#: the versions the page audits (pyproject.toml's test dependencies pin them)
PINNED = {"taskiq": "0.13.0", "taskiq-redis": "1.2.4"}
LINE = re.compile(r"^taskiq-redis 1\.2\.4 \[documented\] none seed (\d+): invalid \(([^)]*)\); first anomaly after [\d.]+ s: "
                  r"(\S+) on (\S+), ops \[([\d, ]+)\];.* (NOT as published \(valid\)|as published)\n  (\S+)$", re.M)


def put_in_place(page: Page, scaffold: str) -> str:
    """The scaffold with the page's edits: its imports, its task, its identity line, its methods."""
    imports = re.search(r"^from typing import ClassVar\n.*?^# import taskiq_redis\b[^\n]*\n", scaffold, re.M | re.S)
    assert imports, "the scaffold has no imports ending in `# import taskiq_redis` to replace"
    written = page.block("imports", "python")
    kept = {line for line in imports.group(0).splitlines() if line.startswith("from leasecheck")}
    assert all(any(line.startswith(k.rpartition(" import ")[0]) for line in written.splitlines()) for k in kept), \
        "the page's imports drop a module the scaffold imports from"
    text = scaffold[:imports.start()] + written + scaffold[imports.end():]
    task = re.search(r"^def run_job\(.*?(?=^class )", text, re.M | re.S)
    assert task, "the scaffold has no run_job before its class"
    text = text[:task.start()] + page.block("task", "python").rstrip("\n") + "\n\n\n" + text[task.end():]
    identity = re.search(r"^    identity = \"attempt\"\n", text, re.M)
    assert identity, "the scaffold has no `identity = \"attempt\"` line"
    text = text[:identity.start()] + page.block("identity", "python") + text[identity.end():]
    return text[:text.index("    def __init__(")] + page.block("methods", "python")


def unchanged(plan: str) -> list[str]:
    """A plan's code lines but its faults' and its fix (what the finding changes), comments left out."""
    kept, in_fix = [], False
    for line in plan.splitlines():
        code = re.sub(r"\s+#.*$", "", line).strip()
        in_fix = code.startswith("fix=") or (in_fix and code.startswith('"'))
        if code and not code.startswith("#") and not in_fix and "FaultAudit(" not in code:
            kept.append(code)
    return kept


def proof_in_history(node: str, ops: list[int], run_dir: str) -> None:
    """The ops printed are in the history of the run folder printed, on the node printed."""
    history = ops_of(Path(run_dir))
    assert all(history[i]["node"] == node for i in ops), (node, ops, [history.get(i) for i in ops])


def invalid_under_none(out: str) -> bool:
    return LINE.search(out) is not None


def test_a_job_queue_is_audited_from_new_target_to_its_published_finding(tmp_path: Path) -> None:
    page = Page.read("audit-a-job-queue.md")
    for dist, version in PINNED.items():
        installed = importlib.metadata.version(dist)
        assert installed == version, f"the page audits {dist} {version}, {installed} is installed: pip install {dist}=={version}"
    env = environment(tmp_path)

    out = run(page, "scaffold", tmp_path, env)
    same_shape(page, "scaffold", out)
    folder = tmp_path / "taskiq-audit"
    adapter, test = folder / "taskiq_redis_queue.py", "test_taskiq_redis_queue.py"
    assert adapter.is_file() and (folder / test).is_file(), out

    out = run(page, "adapter-test", folder, env, expect=1)
    same_shape(page, "adapter-test-unwritten", out)
    assert failed_tests(out, test) == {f"test_method_is_written[{m}]" for m in QUEUE_DUTIES}, out
    assert f"{len(QUEUE_DUTIES)} failed, {len(PROMISES)} skipped" in out, out

    # the page's edits, then the conformance: one short queue run on a Redis leasecheck starts
    adapter.write_text(put_in_place(page, adapter.read_text()))
    out = run(page, "adapter-test", folder, env)
    same_shape(page, "adapter-test", out)
    assert passed_count(out) == len(QUEUE_DUTIES) + len(PROMISES) and not failed_tests(out, test), out

    # the plan claims "valid": taskiq-redis runs a stalled job again while its first execution still runs
    out, seed = run_until_proven(page, "audit", folder, env, invalid_under_none, expect=1)
    same_shape(page, "audit", out)
    line = LINE.search(out)
    assert line and line.group(1) == str(seed) and line.group(6) == "NOT as published (valid)", out
    kinds = set(line.group(2).split(", "))
    assert kinds <= set(REDELIVERED_JOB) and kinds & {"stale-effect", "stale-commit", "duplicate-commit"}, kinds
    proof_in_history(line.group(4), [int(i) for i in line.group(5).split(", ")], line.group(7))
    # the proof is two executions of one job, each named by its own token (the task id and a worker's consumer name)
    history = ops_of(Path(line.group(7)))
    tokens = {op["value"]["token"] for op in history.values()
              if op.get("node") == line.group(4) and op["f"] == "claim" and op["type"] == "ok"}
    assert len(tokens) >= 2 and all(t.startswith(f"{line.group(4)}@") for t in tokens), tokens

    # the finding written into the plan: taskiq-redis now behaves as published
    text = adapter.read_text()
    plan = re.search(r"^    audits: ClassVar\[tuple\[AuditPlan, \.\.\.\]\] = \(\n.*?^    \)\n", text, re.M | re.S)
    assert plan, "the scaffold has no `audits = (AuditPlan(...),)` to replace"
    written = page.block("plan", "python")
    assert unchanged(written) == unchanged(plan.group(0)), "the page's plan differs from the scaffold's beyond the finding"
    adapter.write_text(text[:plan.start()] + written + text[plan.end():])
    out, seed = run_until_proven(page, "as-published", folder, env, invalid_under_none, expect=0)
    same_shape(page, "as-published", out)
    line = LINE.search(out)
    assert line and line.group(6) == "as published", out
    assert f"| taskiq-redis | 1.2.4 | documented | none | {seed} | invalid |" in out, out

    # a run's replay command, from --json: it is the page's, and its proof is in the run's history
    replay = page.block("replay", "bash").strip()

    def proven_row(out: str) -> bool:
        rows = [json.loads(row) for row in out.splitlines() if row.startswith("{")]
        return len(rows) == 1 and rows[0]["verdict"] == "invalid"

    out, seed = run_until_proven(page, "replay", folder, env, proven_row, expect=1, extra=" --json")
    row = next(json.loads(row) for row in out.splitlines() if row.startswith("{"))
    assert row["command"] == re.sub(r"--seeds \d+", f"--seeds {seed}", replay), row["command"]
    assert row["library"] == "taskiq-redis" and row["version"] == "1.2.4", row
    assert row["matches"] is True and row["published"]["verdict"] == "invalid", row
    assert set(row["kinds"]) <= set(REDELIVERED_JOB), row
    proof_in_history(row["proof"]["node"], row["proof"]["ops"], row["run_dir"])
    page.all_used()


def test_the_page_edits_fail_on_a_scaffold_they_no_longer_fit() -> None:
    """A page whose blocks drift from the scaffold fails its journey (here: a scaffold without its identity line)."""
    page = Page.read("audit-a-job-queue.md")
    from leasecheck.kit.scaffold_queue import render_queue

    scaffold = render_queue("taskiq_redis_queue", "TaskiqRedisQueue", "taskiq-redis", "taskiq-redis")["taskiq_redis_queue.py"]
    assert "def worker_command(self, slot: int)" in put_in_place(page, scaffold)
    with pytest.raises(AssertionError, match="identity"):
        put_in_place(page, scaffold.replace('identity = "attempt"', 'identity = "id"'))
