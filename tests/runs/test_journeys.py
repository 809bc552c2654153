"""The worked examples of docs/journeys/ run end to end, from the pages themselves.

Each test reads its page and does what the page says, with the page's own text: it
writes the files the page shows, makes the edits it describes and runs its commands,
in a fresh folder, as a newcomer would. The blocks it uses are marked
(tests/support/journey.py says how, and follows a page).

A page's marked names are exactly the ones its test uses: a block dropped, renamed or
added fails the test, and so does a command that no longer does what the page says.

The pages' runs are shortened, and the pages say so: 5 s of workload per run
(``--time-limit 5 --evidence-wait 30`` added to ``leasecheck run``, ``--leasecheck-time-limit 5
--leasecheck-max-time 20`` given to pytest through ``PYTEST_ADDOPTS``: a gate goes on until covered for 20 s at
most, not the 50 s of 10 × its time limit) and one seed per audit (``--seeds 1``). Playing the
team's own database is a Postgres that leasecheck's code starts (the session's
``postgres_server``), with a role and a database of the team's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import uuid
from pathlib import Path

import psycopg
import pytest
from inner_pytest import failed_tests, passed_count
from journey import (
    EVIDENCE_WAIT_S,
    SHORT_RUN_S,
    Page,
    environment,
    nodes_of,
    ops_of,
    run,
    run_folders,
    run_until_proven,
    same_shape,
    shortened,
)

from leasecheck.kit.scaffold import LOCK_DUTIES, LOCK_SCENARIOS
from leasecheck.servers.base import LocalServer
from leasecheck.servers.postgres import find_bin_dir

#: what the pages' stale writes are: the kinds sherlock's pause finding names
STALE = {"stale-effect", "stale-commit", "duplicate-commit", "lost-commit"}


def replace_method(source: str, method: str, new: str) -> str:
    """``source`` with the method ``method`` (up to the next method or the class's end) replaced by ``new``."""
    found = re.search(rf"\n    def {method}\(.*?(?=\n    def |\n\S|\Z)", source, re.S)
    assert found, f"no method {method} in the adapter"
    return source[:found.start()] + "\n" + new.rstrip("\n") + source[found.end():]


def own_database(server: LocalServer) -> str:
    """A role ``acme`` and a database of its own on ``server``: the team's database, as ACME_URL names it."""
    name = f"acme_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'acme'").fetchone():
            conn.execute("CREATE ROLE acme LOGIN")
        conn.execute(f"CREATE DATABASE {name} OWNER acme")
    return server.url.replace("postgres@", "acme@").rsplit("/", 1)[0] + f"/{name}"


def unchanged(plan: str) -> list[str]:
    """An AuditPlan's code lines but the pause fault's and the fix (what the finding changes), comments left out."""
    code = [re.sub(r"\s+#.*$", "", line) for line in plan.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [line for line in code if 'FaultAudit("pause"' not in line and "fix=" not in line]


# -- (a) a team's own Postgres lease, gated in pytest against its own database ------------------------------

#: the blocks of docs/journeys/postgres-lease-in-pytest.md each of its two tests uses
POSTGRES_GREEN = {
    "scaffold", "output scaffold", "adapter-test", "output adapter-test-unwritten", "acme_lease.py",
    "output adapter-test", "adapter-test-url", "output adapter-test-url", "run", "output run", "refused",
    "output refused", "test_acme_under_faults.py", "gate", "output gate", "history-header",
    "output history-header", "rows", "output rows",
}
POSTGRES_RED = {"scaffold", "output scaffold", "acme_lease.py", "the-bug", "test_acme_under_faults.py", "gate-red",
                "output gate-red"}


def postgres_journey(tmp_path: Path, server: LocalServer) -> tuple[Page, Path, dict[str, str]]:
    """The page's first steps: the scaffold, its test failing once per method, the adapter written."""
    page = Page.read("postgres-lease-in-pytest.md")
    env = environment(tmp_path, ACME_URL=own_database(server))
    out = run(page, "scaffold", tmp_path, env)
    same_shape(page, "scaffold", out)
    folder = tmp_path / "acme-jobs"
    assert (folder / "acme_lease.py").is_file() and (folder / "test_acme_lease.py").is_file(), out
    assert 'store = "postgres"' in (folder / "acme_lease.py").read_text()
    return page, folder, env


def test_a_teams_postgres_lease_is_gated_in_pytest_on_its_own_database_run_after_run(
        tmp_path: Path, postgres_server: LocalServer) -> None:
    page, folder, env = postgres_journey(tmp_path, postgres_server)

    out = run(page, "adapter-test", folder, env, expect=1)  # before the adapter is written
    same_shape(page, "adapter-test-unwritten", out)
    assert "test_method_is_written[renew]" in failed_tests(out), out

    (folder / "acme_lease.py").write_text(page.block("acme_lease.py", "python"))
    out = run(page, "adapter-test", folder, env)
    same_shape(page, "adapter-test", out)
    assert passed_count(out) == 21 and not failed_tests(out), out  # 9 methods written, 12 scenarios held
    assert re.search(r"adapter tests used a postgres server of their own \(postgresql://[^)]*127\.0\.0\.1", out), out
    out = run(page, "adapter-test-url", folder, env)
    same_shape(page, "adapter-test-url", out)
    assert f"adapter tests used LEASECHECK_URL ({env['ACME_URL']}; no server started)" in out and passed_count(out) == 21, out

    out = run(page, "run", folder, env)
    same_shape(page, "run", out)
    assert re.search(r"^verdict\s+valid\s*$", out, re.M), out
    out = run(page, "refused", folder, env, expect=3)
    same_shape(page, "refused", out)

    (folder / "test_acme_under_faults.py").write_text(page.block("test_acme_under_faults.py", "python"))
    out = run(page, "gate", folder, env)  # on the database the run above left its rows in: valid every time
    same_shape(page, "gate", out)
    assert "1 passed" in out and "3 runs (3 valid)" in out, out

    out = run(page, "history-header", folder, env)
    same_shape(page, "history-header", out)
    header = json.loads(out)
    assert re.fullmatch(r"[0-9a-f]{12}", header["run_id"]), header
    env["PATH"] = f"{find_bin_dir()}{os.pathsep}{env['PATH']}"  # psql, beside the server's programs
    out = run(page, "rows", folder, env)
    same_shape(page, "rows", out)

    # four runs shared one database (the run, then seeds 1-3): each its own run id, its own nodes
    folders = run_folders(folder / "store")
    assert len(folders) == 4, folders
    run_ids = [json.loads((d / "test.json").read_text())["run_id"] for d in folders]
    assert len(set(run_ids)) == 4, run_ids
    for run_id, run_dir in zip(run_ids, folders):
        assert json.loads((run_dir / "results.json").read_text())["valid"] is True, run_dir
        assert all(node.startswith(f"{run_id}/run-") for node in nodes_of(run_dir)), run_dir
        assert re.search(rf"^ {run_id}\s+\|", out, re.M), f"no rows of run {run_id} in the table:\n{out}"
    page.all_used(POSTGRES_GREEN)


def test_a_teams_postgres_lease_with_a_commit_bug_fails_the_gate_with_the_proof(
        tmp_path: Path, postgres_server: LocalServer) -> None:
    page, folder, env = postgres_journey(tmp_path, postgres_server)
    adapter = replace_method(page.block("acme_lease.py", "python"), "commit", page.block("the-bug", "python"))
    assert "AND epoch = %s" in page.blocks["acme_lease.py"][1] and "the bug" in adapter
    (folder / "acme_lease.py").write_text(adapter)
    (folder / "test_acme_under_faults.py").write_text(page.block("test_acme_under_faults.py", "python"))
    out = run(page, "gate-red", folder, env, expect=1)
    same_shape(page, "gate-red", out, loose=True)
    assert "FAILED test_acme_under_faults.py::test_acme_lease_under_pauses_and_kills" in out, out
    # the bug's proof: a stale commit the store accepted, or (a commit sent late in its lease and held across the new
    # holder's claim, as the workload steers some) a commit no order of the ops explains
    assert ("stale-commit on node" in out or "non-linearizable on node" in out) and "replay:     cd " in out, out
    # each seed's proof: its ops are in the history of the run folder it names, on the node it names
    for seed in re.split(r"\n(?=seed \d+: )", out)[1:]:
        proof = re.search(r"^  (\S+) on node (\S+), ops \[([\d, ]+)\]:", seed, re.M)
        folder_line = re.search(r"^  run folder: (\S+)$", seed, re.M)
        assert proof and folder_line, seed
        ops = ops_of(Path(folder_line.group(1)))
        for index in map(int, proof.group(3).split(", ")):
            assert ops[index]["node"] == proof.group(2), (index, ops.get(index))
    page.all_used(POSTGRES_RED)


# -- (b) a lock library nobody audited yet: sherlock, through new-target --lock to audit module:Class -------


def test_a_lock_library_is_audited_from_new_target_to_its_published_finding(tmp_path: Path) -> None:
    page = Page.read("audit-a-lock-library.md")
    installed = importlib.metadata.version("sherlock")
    assert installed == "0.4.1", f"the page audits sherlock 0.4.1, {installed} is installed: pip install sherlock==0.4.1"
    env = environment(tmp_path)

    out = run(page, "scaffold", tmp_path, env)
    same_shape(page, "scaffold", out)
    folder = tmp_path / "sherlock-audit"
    adapter, test = folder / "sherlock_lock.py", "test_sherlock_lock.py"
    assert adapter.is_file() and (folder / test).is_file(), out

    out = run(page, "adapter-test", folder, env, expect=1)
    same_shape(page, "adapter-test-unwritten", out)
    assert failed_tests(out, test) == {f"test_method_is_written[{m}]" for m in LOCK_DUTIES} | {
        f"test_scenario[{s}]" for s in LOCK_SCENARIOS}, out
    assert "leasecheck: adapter tests used a redis server of their own (" in out, out

    # the page's edits: the import, then the three methods in place of the scaffold's
    text = adapter.read_text()
    comment = re.search(r"^# import sherlock\b.*$", text, re.M)
    assert comment, "the scaffold has no `# import sherlock` line to replace"
    text = text[:comment.start()] + page.block("import", "python").strip("\n") + text[comment.end():]
    text = text[:text.index("    def acquire(")] + page.block("methods", "python")
    assert "expire=self.ttl_ms // 1000" in text
    adapter.write_text(text.replace("expire=self.ttl_ms // 1000", "expire=self.ttl_ms / 1000"))  # the page's float
    out = run(page, "adapter-test", folder, env, expect=1)
    same_shape(page, "adapter-test-float", out, loose=True)
    assert "redis.exceptions.ResponseError: value is not an integer or out of range" in out, out
    assert "test_method_is_written[acquire]" in failed_tests(out, test), out
    adapter.write_text(text)
    out = run(page, "adapter-test", folder, env)
    same_shape(page, "adapter-test", out)
    assert passed_count(out) == 1 + len(LOCK_DUTIES) + len(LOCK_SCENARIOS) and not failed_tests(out, test), out

    def pause_invalid(out: str) -> bool:
        return re.search(r"\] pause seed \d+: invalid ", out) is not None

    out, seed = run_until_proven(page, "audit", folder, env, pause_invalid, expect=1)  # the plan says "valid": sherlock is not
    same_shape(page, "audit", out)
    pause = re.search(rf"^sherlock 0\.4\.1 \[documented\] pause seed {seed}: invalid \(([^)]*)\); first anomaly after [\d.]+ s: "
                      r"(\S+) on (\S+), ops \[([\d, ]+)\];.*NOT as published \(valid\)\n  (\S+)$", out, re.M)
    assert pause and set(pause.group(1).split(", ")) <= STALE, out
    ops = ops_of(Path(pause.group(5)))  # the proof printed is in the history of the run folder printed under it
    assert all(ops[int(i)]["node"] == pause.group(3) for i in pause.group(4).split(", ")), pause.group(0)
    # valid under kill, as published; the workload's own late writes (steered into the window a rival's grant opens) may
    # also show an unfenced lock's stale writes, said apart as no fault's
    assert re.search(rf"^sherlock 0\.4\.1 \[documented\] kill seed {seed}: valid; (invalid without the fault \(the workload's own "
                     r"stall\): [^;]*\(\d+ anomal[^)]*\); )?as published$", out, re.M), out

    # the finding written into the plan: the library now behaves as published
    text = adapter.read_text()
    plan = re.search(r"^    audit: ClassVar\[AuditPlan \| None\] = AuditPlan\(\n.*?^    \)\n", text, re.M | re.S)
    assert plan, "the scaffold has no `audit = AuditPlan(...)` to replace"
    written = page.block("plan", "python")
    assert unchanged(written) == unchanged(plan.group(0)), "the page's plan differs from the scaffold's beyond the finding"
    adapter.write_text(text[:plan.start()] + written + text[plan.end():])
    out, seed = run_until_proven(page, "as-published", folder, env, pause_invalid, expect=0)
    same_shape(page, "as-published", out)
    assert f"| sherlock | 0.4.1 | documented | pause | {seed} | invalid" in out, out

    # a run's replay command, from --json: it is the page's, and its proof is in the run's history
    replay = page.block("replay", "bash").strip()

    def proven_row(out: str) -> bool:
        return out.startswith("{") and json.loads(out.splitlines()[0]).get("verdict") == "invalid"

    out, seed = run_until_proven(page, "replay", folder, env, proven_row, expect=1, extra=" --json")
    row = json.loads(out.splitlines()[0])
    assert row["command"] == re.sub(r"--seeds \d+", f"--seeds {seed}", replay), row["command"]
    assert row["library"] == "sherlock" and row["version"] == "0.4.1" and row["target"] == "sherlock_lock:SherlockLock", row
    assert row["matches"] is True and row["published"]["verdict"] == "invalid", row
    assert row["verdict"] == "invalid" and set(row["kinds"]) & {"stale-effect", "stale-commit"}, row
    ops = ops_of(Path(row["run_dir"]))
    assert row["proof"]["ops"] and all(ops[i]["node"] == row["proof"]["node"] for i in row["proof"]["ops"]), row["proof"]

    # a class without a plan: the Postgres lease of the other journey
    (folder / "acme_lease.py").write_text(Page.read("postgres-lease-in-pytest.md").block("acme_lease.py", "python"))
    out = run(page, "no-plan", folder, env, expect=3)
    same_shape(page, "no-plan", out)
    assert len(out.strip().splitlines()) == 1, out
    page.all_used()


def test_every_marked_block_of_the_postgres_page_is_used_by_a_test() -> None:
    page = Page.read("postgres-lease-in-pytest.md")
    assert page.marked == POSTGRES_GREEN | POSTGRES_RED, page.marked ^ (POSTGRES_GREEN | POSTGRES_RED)


def test_a_page_that_drifts_fails_its_journey(tmp_path: Path) -> None:
    """The markers hold: an output line the tool does not print, a block renamed or left unused, is named."""
    page = Page(tmp_path / "page.md", outputs={"x": "wrote acme_lease.py\nwrote acme.toml\n"})
    with pytest.raises(AssertionError, match=r"wrote acme\.toml"):
        same_shape(page, "x", "wrote acme_lease.py\nwrote test_acme_lease.py\n")
    page.blocks["left"] = ("bash", "true\n")
    with pytest.raises(AssertionError, match="left"):
        page.all_used()
    with pytest.raises(AssertionError, match="no block marked"):
        page.block("renamed", "bash")
    assert shortened("leasecheck run --target x\nleasecheck audit m:C\nleasecheck audit m:C --seeds 2") == (
        f"leasecheck run --target x --time-limit {SHORT_RUN_S} --evidence-wait {EVIDENCE_WAIT_S}\nleasecheck audit m:C --seeds 1\nleasecheck audit m:C --seeds 2")
