"""The ``leasecheck check`` command: exit codes, JSON, human output, store directories."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from paths import EXAMPLES, REPO

from leasecheck.cli import main

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


# ---------------------------------------------------------------- exit codes of `run`, crashes, the store folder


def leasecheck(*args: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The console script as a user runs it (a subprocess: real signals, real stderr, no test harness)."""
    return subprocess.run([sys.executable, "-m", "leasecheck", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def one_line(stderr: str) -> str:
    """stderr minus the progress lines a run prints before failing; asserts the failure itself is one line."""
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(("leasecheck run: target ",))]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


README = REPO / "README.md"
QUICK = ("--time-limit", "0.5", "--nemesis", "none", "--concurrency", "2", "--ttl", "100")


@pytest.mark.parametrize("store, words, code", [(str(README), "is a file, not a folder", 3), ("/proc/x", "cannot create a run directory", 4)])
def test_an_unusable_store_folder_is_one_line(store: str, words: str, code: int) -> None:
    """Seen on main: NotADirectoryError / FileNotFoundError exited 1 ("anomalies") with a traceback. A file where
    the folder should be is the user's mistake (exit 3, before anything starts); a folder the machine will not let
    us create is the environment's (exit 4)."""
    r = leasecheck("run", "--store", store, *QUICK)
    assert r.returncode == code
    assert words in one_line(r.stderr)


def test_an_abstract_target_class_is_a_usage_error() -> None:
    """Seen on main: ``--target ...base:Target`` crashed with AttributeError, exit 1."""
    r = leasecheck("run", "--target", "leasecheck.targets.base:Target", *QUICK)
    assert r.returncode == 3
    assert "abstract" in one_line(r.stderr)


@pytest.mark.parametrize("value", ["", " ", ",", " , "])
def test_an_empty_nemesis_is_refused_not_a_fault_free_run(value: str) -> None:
    """Seen on main: ``--nemesis ''`` (an unset CI variable) silently meant no faults."""
    r = CliRunner().invoke(main, ["run", "--nemesis", value, "--store", "/nonexistent/never-made"], catch_exceptions=False)
    assert r.exit_code == 3 and "'none'" in r.stderr and r.stderr.count("\n") == 1


def test_a_crash_inside_a_command_is_exit_4_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("an internal bug\nwith a second line")

    monkeypatch.setattr("leasecheck.cli.checking.check_source", boom)
    monkeypatch.delenv("LEASECHECK_TRACEBACK", raising=False)
    r = CliRunner().invoke(main, ["check", str(VALID)], catch_exceptions=False)
    assert r.exit_code == 4 and r.stderr.count("\n") == 1
    assert "internal error: RuntimeError: an internal bug with a second line" in r.stderr


def test_relative_store_works_for_a_server_backend(tmp_path: Path) -> None:
    """Seen on main: ``run --target redis`` with the default ``--store store`` -> redis-server refused its relative dir, exit 4."""
    r = leasecheck("run", "--target", "redis", *QUICK, "--json", cwd=tmp_path)
    assert r.returncode in (0, 2), r.stderr
    results = json.loads(r.stdout)
    run_dir = Path(results["run_dir"])
    assert run_dir.is_absolute() and run_dir.parent.parent == tmp_path / "store"
    assert (tmp_path / "store" / "latest").resolve() == run_dir.resolve()


def test_a_failed_start_is_marked_and_never_becomes_latest(tmp_path: Path) -> None:
    """Seen on main: a failed start repointed store/latest at a folder with no history; check then exited 3."""
    good = leasecheck("run", *QUICK, "--store", "st", "--json", cwd=tmp_path)
    assert good.returncode in (0, 2), good.stderr
    good_dir = Path(json.loads(good.stdout)["run_dir"])
    bad = leasecheck("run", "--target", "redis", "--url", "redis://127.0.0.1:1", *QUICK, "--store", "st", cwd=tmp_path)
    assert bad.returncode == 4
    line = one_line(bad.stderr)
    assert "cannot reach" in line and "leasecheck.log" in line
    failed = [d for d in (tmp_path / "st" / "redis").iterdir()]
    assert len(failed) == 1
    results = json.loads((failed[0] / "results.json").read_text())
    assert results["status"] == "error" and "cannot reach" in results["reason"]
    assert "Traceback" in (failed[0] / "leasecheck.log").read_text()  # the traceback lives in the run's log
    assert (tmp_path / "st" / "latest").resolve() == good_dir.resolve()
    code, _, _ = run(str(tmp_path / "st" / "latest"))
    assert code in (0, 2)
    code, _, err = run(*(str(d) for d in sorted((tmp_path / "st").glob("*/*/"))))  # `check store/*/*/`
    assert code in (0, 2) and "failed before it recorded a history" in err
    code, _, err = run(str(failed[0]))
    assert code == 3 and err.count("\n") == 1 and "cannot reach" in err


def test_check_of_a_store_glob_skips_folders_inside_a_run(tmp_path: Path) -> None:
    """`check store/*/*/` also matches store/latest/<server data>/: skipped with a note, the runs still judged."""
    example = REPO / "histories" / "examples"
    run = tmp_path / "store" / "sqlite" / "20260101T000000Z"
    (run / "redis").mkdir(parents=True)
    valid = json.loads((example / "expected.json").read_text())
    name = next(k for k, v in valid.items() if isinstance(v, dict) and v.get("valid") is True)
    (run / "history.jsonl").write_bytes((example / name).read_bytes())
    r = subprocess.run([sys.executable, "-m", "leasecheck", "check", str(run), str(run / "redis")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "not a run: skipped" in r.stderr and "Traceback" not in r.stderr
    alone = subprocess.run([sys.executable, "-m", "leasecheck", "check", str(run / "redis")], capture_output=True, text=True, timeout=60)
    assert alone.returncode == 3  # nothing was checked: never a pass


def test_a_run_folder_name_stays_a_valid_file_name_for_any_target() -> None:
    from leasecheck.rundir.storedir import MAX_FOLDER, folder_name

    assert folder_name("sqlite") == "sqlite"
    assert folder_name("acme_lock:AcmeLock") == "acme_lock_AcmeLock"
    assert folder_name("exec:node ./lease.js --flag") == "exec_node_._lease.js_--flag"
    long = "exec:" + " ".join(["/very/long/path/to/a/lease-binary"] * 20)
    name = folder_name(long)
    assert len(name) <= MAX_FOLDER and "/" not in name
    assert name != folder_name(long + " x") and name == folder_name(long)  # cut, but still one folder per command
    assert folder_name("..") == "_"


# ---------------------------------------------------------------- a cut history is never valid

CUT = "the last line is cut (the writer stopped mid-write): a cut history is never valid"
NEVER_FINISHED = ('the history ends without its history-end event (line 1 promises one, "end_marker": true): '
                  "its writer never finished it, and a cut history is never valid")


def test_a_real_runs_history_cut_in_the_middle_is_unknown_naming_the_line(tmp_path: Path) -> None:
    """Seen on main: the first half of a run's history.jsonl checked ``valid``, exit 0 (the cut line was dropped
    with a warning). A cut history is never valid: exit 2 naming the line, whole or from its run folder."""
    store = tmp_path / "store"
    r = leasecheck("run", "--time-limit", "2", "--seed", "5", "--store", str(store), "--json")
    assert r.returncode in (0, 2), r.stderr
    run_dir = Path(json.loads(r.stdout)["run_dir"])
    data = (run_dir / "history.jsonl").read_bytes()
    lines = data.splitlines()
    assert json.loads(lines[0])["end_marker"] is True
    assert json.loads(lines[-1]) | {"time": 0} == {"index": len(lines) - 2, "time": 0, "process": "nemesis", "type": "info",
                                                   "f": "history-end", "value": {}}
    whole = leasecheck("check", str(run_dir), "--json")
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["valid"] is True and "cut" not in json.loads(whole.stdout)

    half = data[: len(data) // 2].rstrip(b"\n")  # a cut inside a line: what a killed writer or a copy cut short leaves
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(half)
    line = half.count(b"\n") + 1
    r = leasecheck("check", str(cut), "--json")
    assert r.returncode == 2, r.stderr
    out = json.loads(r.stdout)
    assert out["valid"] == "unknown" and out["reason"] == out["cut"] == f"{cut}:{line}: {CUT}"
    text = leasecheck("check", str(cut))
    assert text.returncode == 2 and f"{cut}:{line}: {CUT}" in " ".join(text.stdout.split())

    between = data[: data.rfind(b"\n", 0, len(data) // 2) + 1]  # cut between two whole lines: the promised end is missing
    cut.write_bytes(between)
    r = leasecheck("check", str(cut), "--json")
    last = between.count(b"\n")
    assert r.returncode == 2 and json.loads(r.stdout)["cut"] == f"{cut}:{last}: {NEVER_FINISHED}"

    (run_dir / "history.jsonl").write_bytes(half)  # the run folder itself, as `leasecheck check store/latest` reads it
    r = leasecheck("check", str(store / "latest"), "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["cut"].endswith(f"history.jsonl:{line}: {CUT}"), r.stdout
