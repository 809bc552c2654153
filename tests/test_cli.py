"""The ``leasecheck check`` command: exit codes, JSON, human output, store directories."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from leasecheck.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "histories" / "examples"
VALID = EXAMPLES / "clean-run-three-nodes-four-workers.jsonl"
STALE = EXAMPLES / "stale-commit-after-takeover.jsonl"
BAD = EXAMPLES / "bad-input-index-gap.jsonl"


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["check", *args], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_valid_json_is_one_object() -> None:
    code, out, _ = run(str(VALID), "--json")
    assert code == 0
    obj = json.loads(out)
    assert obj["valid"] is True and obj["anomalies"] == [] and obj["stats"]["nodes"] == 3


def test_invalid_human_output_has_summary_and_each_anomaly() -> None:
    code, out, _ = run(str(STALE))
    assert code == 1
    assert "INVALID" in out and "stale-commit" in out and "ops [3, 8]" in out
    assert "was invoked at" in out


def test_explain_renders_the_cycle() -> None:
    code, out, _ = run(str(STALE), "--explain")
    assert code == 1
    assert "cycle" in out and "op 3 -> op 8" in out and "must take effect before" in out


def test_bad_input_is_one_line_on_stderr_and_exit_3() -> None:
    code, out, err = run(str(BAD), "--json")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"{BAD}:")


def test_store_directory_is_accepted(tmp_path: Path) -> None:
    store = tmp_path / "store" / "sqlite" / "20260101T000000Z"
    store.mkdir(parents=True)
    shutil.copy(STALE, store / "history.jsonl")
    (tmp_path / "store" / "latest").symlink_to(store)
    code, out, _ = run(str(tmp_path / "store" / "latest"), "--json")
    assert code == 1 and json.loads(out)["anomalies"][0]["kind"] == "stale-commit"
    code, _, err = run(str(tmp_path), "--json")
    assert code == 3 and "no history.jsonl" in err


def test_several_paths_give_one_json_line_each_and_the_worst_exit() -> None:
    code, out, _ = run(str(VALID), str(STALE), "--json")
    assert code == 1
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["history"], r["valid"]) for r in rows] == [(str(VALID), True), (str(STALE), False)]
    code, _, _ = run(str(VALID), str(BAD), str(STALE))
    assert code == 3


@pytest.mark.parametrize("args", [[], ["--budget", "-1", str(VALID)], ["--engine", "magic", str(VALID)], ["--nope", str(VALID)]])
def test_usage_errors_exit_3(args: list[str]) -> None:
    code, _, err = run(*args)
    assert code == 3 and "Error" in err


def test_console_script_prints_no_traceback() -> None:
    exe = shutil.which("leasecheck")
    cmd = [exe] if exe else [sys.executable, "-m", "leasecheck"]
    r = subprocess.run([*cmd, "check", str(BAD)], capture_output=True, text=True)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"{BAD}:")
    r = subprocess.run([*cmd, "check", "--budget", "x", str(VALID)], capture_output=True, text=True)
    assert r.returncode == 3 and "Traceback" not in r.stderr
