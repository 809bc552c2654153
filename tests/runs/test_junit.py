"""JUnit XML from ``leasecheck run --junit`` and ``leasecheck check --junit``, read back and validated.

Every file is validated against the JUnit schema CI systems read (junit-10.xsd,
tests/data/junit/) and then read for content: a test case per run or history,
the anomaly kinds in a failure's message, each anomaly's ops and explanation in
its text, ``unknown`` and interrupted runs as errors with their reason.
Real runs (short, SQLite) and the example corpus; no mocks.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from junit_schema import properties, read
from paths import EXAMPLES

from leasecheck.cli import main
from leasecheck.report.junit import MAX_LISTED, Suite, write
from leasecheck.verdict.outcomes import Expectation, Row

EXPECTED = json.loads((EXAMPLES / "expected.json").read_text())
#: short runs that still exercise the protocol: leases of 300 ms, a fault every 0.8 s
QUICK = ["--time-limit", "4", "--ttl", "300", "--nemesis-interval", "0.8", "--nodes", "10"]


def leasecheck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leasecheck", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


# ------------------------------------------------------------------ check --junit


def test_check_junit_has_a_case_per_history_with_kinds_and_ops(tmp_path: Path) -> None:
    """Every corpus file: valid ones pass, invalid ones fail naming each kind and citing each op, bad input errs."""
    names = sorted(EXPECTED)
    out = tmp_path / "check.xml"
    code, _, _ = cli("check", *(str(EXAMPLES / n) for n in names), "--junit", str(out))
    assert code == 3  # the corpus holds bad input, which beats anomalies
    root, cases = read(out)
    assert [c.name for c in cases] == [str(EXAMPLES / n) for n in names]
    assert root.get("tests") == str(len(names))
    by_name = {Path(c.name).name: c for c in cases}
    for name, exp in EXPECTED.items():
        case = by_name[name]
        if exp["valid"] is True:
            assert case.outcome == "pass", (name, case.message)
        elif exp["valid"] == "bad-input":
            assert case.outcome == "error" and "bad input" in case.message and f":{exp['line']}:" in case.message, case.message
        elif exp["valid"] == "unknown":  # a cut history: never valid, no verdict on the backend either
            assert case.outcome == "error" and "unknown" in case.message, (name, case.message)
        else:
            assert case.outcome == "failure", name
            assert case.type == "leasecheck.invalid"
            for kind in exp["kinds"]:
                assert kind in case.message, (name, case.message)
            for anomaly in exp["anomalies"]:
                assert f"{anomaly['kind']} on " in case.text
                if "ops" in anomaly:  # non-linearizable examples name no ops of their own: any search witness will do
                    assert f"ops {anomaly['ops']}" in case.text, (name, case.text)
    failures = sum(1 for e in EXPECTED.values() if e["valid"] is False)
    errors = sum(1 for e in EXPECTED.values() if e["valid"] in ("bad-input", "unknown"))
    assert (root.get("failures"), root.get("errors")) == (str(failures), str(errors))


def test_check_junit_classes_cases_by_the_headers_target(tmp_path: Path) -> None:
    out = tmp_path / "one.xml"
    path = EXAMPLES / "stale-commit-after-takeover.jsonl"
    code, _, _ = cli("check", str(path), "--junit", str(out))
    assert code == 1
    _, [case] = read(out)
    header = json.loads(path.read_text().splitlines()[0])
    assert case.classname == f"leasecheck.{header.get('target', 'check')}"
    assert case.message == "invalid: stale-commit (1 anomaly)"
    assert "op 8 (commit with epoch 1" in case.text  # the checker's explanation, whole


@pytest.mark.parametrize("where", ["missing-dir/out.xml", "."], ids=["no-such-folder", "a-directory"])
def test_bad_junit_path_is_exit_3_with_one_line(tmp_path: Path, where: str) -> None:
    target = tmp_path / where
    code, _, err = cli("check", str(EXAMPLES / "clean-run-three-nodes-four-workers.jsonl"), "--junit", str(target))
    assert code == 3
    assert len(err.strip().splitlines()) == 1 and "--junit" in err, err
    assert "Traceback" not in err


# ------------------------------------------------------------------ run --junit


def test_run_junit_failure_lists_the_runs_anomalies(tmp_path: Path) -> None:
    """A caught bug: one failing test case whose message names every kind found and whose text cites the ops."""
    out = tmp_path / "run.xml"
    r = leasecheck("run", "--target", "sqlite-ttl-only", "--seed", "1", *QUICK, "--evidence-wait", "20",
                   "--store", "store", "--junit", str(out), "--json", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    results = json.loads(r.stdout)
    root, [case] = read(out)
    assert case.outcome == "failure" and case.classname == "leasecheck.sqlite-ttl-only"
    assert case.name == "sqlite-ttl-only / pause / seed 1"
    kinds = set(results["stats"]["anomalies"])
    assert {"stale-commit"} <= kinds
    for kind in kinds:
        assert kind in case.message
    for a in results["anomalies"][:MAX_LISTED]:
        assert f"{a['kind']} on {a['node']}, ops {a['ops']}: " in case.text
    assert case.time == pytest.approx(results["run"]["seconds"], abs=0.001)
    props = properties(root)
    run_dir = results["run_dir"]
    assert props["seed"] == "1" and props["target"] == "sqlite-ttl-only" and props["nemesis"] == "pause"
    assert props["run_dir"] == run_dir and props["report"] == str(Path(run_dir) / "report.html")
    assert "--junit" not in props["command"] and "--seed 1" in props["command"]
    suite = root.find("testsuite")
    assert suite is not None and suite.get("timestamp") and suite.get("hostname")


def test_run_junit_unknown_is_an_error_with_its_reason(tmp_path: Path) -> None:
    """One worker and no duplicate deliveries never contend: the run is unknown, and says why."""
    out = tmp_path / "run.xml"
    r = leasecheck("run", "--seed", "5", "--time-limit", "2", "--nemesis", "none", "--concurrency", "1", "--dup-rate", "0",
                   "--store", "store", "--junit", str(out), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    _, [case] = read(out)
    assert case.outcome == "error" and case.type == "leasecheck.unknown"
    assert case.message.startswith("unknown: the run did not test enough") and "no contended claim" in case.message


def test_run_junit_is_written_when_interrupted(tmp_path: Path) -> None:
    out = tmp_path / "run.xml"
    proc = subprocess.Popen([sys.executable, "-m", "leasecheck", "run", "--seed", "7", "--time-limit", "60", "--store", "store",
                             "--junit", str(out)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "store").glob("sqlite/*/history.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # some ops recorded
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode in (1, 130), err  # 1 only if what it recorded proves an anomaly: never on the reference
    assert proc.returncode == 130
    _, [case] = read(out)
    assert case.outcome == "error" and case.type == "leasecheck.interrupted"
    assert "interrupted by SIGINT" in case.message


def test_run_junit_bad_path_refused_before_the_run(tmp_path: Path) -> None:
    code, _, err = cli("run", "--time-limit", "3", "--store", str(tmp_path / "store"), "--junit", str(tmp_path / "no" / "x.xml"))
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "store").exists()


def test_run_junit_environment_failure_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "run.xml"
    r = leasecheck("run", "--target", "postgres", "--url", "postgresql://leasecheck@127.0.0.1:1/none", "--seed", "3",
                   "--time-limit", "3", "--store", "store", "--junit", str(out), cwd=tmp_path)
    assert r.returncode == 4, r.stderr
    root, [case] = read(out)
    assert case.outcome == "error" and "the environment failed" in case.message and "127.0.0.1" in case.message
    assert properties(root)["seed"] == "3"


# ------------------------------------------------------------------ the writer


def test_failure_text_is_capped_and_survives_characters_xml_cannot_hold(tmp_path: Path) -> None:
    """Thousands of anomalies: the first MAX_LISTED are listed, the rest counted; control characters never break the file."""
    anomalies = [{"kind": "stuck-lease", "node": f"run-1/node-{i}", "ops": [i, i + 1], "explanation": f"held\x00 {i}\x1b"}
                 for i in range(250)]
    verdict = {"valid": False, "anomalies": anomalies, "stats": {"anomalies": {"stuck-lease": 3000}}}
    row = Row.from_verdict(verdict, target="exec:./my lease", nemesis=("pause",), seed=9, run_dir=tmp_path / "run")
    mismatch = Row.from_verdict({"valid": True, "anomalies": [], "stats": {}}, target="sqlite-ttl-only", nemesis=("pause",),
                                seed=1, expected=Expectation("invalid", ("stale-commit",), "spec"))
    out = tmp_path / "w.xml"
    write(out, [Suite("writer", [row, mismatch])])
    root, [big, valid_but_broken] = read(out)
    assert big.outcome == "failure" and big.message == "invalid: stuck-lease (3,000 anomalies)"
    assert big.classname == "leasecheck.exec_my_lease"
    listed = [ln for ln in big.text.splitlines() if ln.startswith("stuck-lease on ")]
    assert len(listed) == MAX_LISTED and listed[0].startswith("stuck-lease on run-1/node-0, ops [0, 1]: held")
    assert f"... and {3000 - MAX_LISTED:,} more anomalies" in big.text
    # a broken variant expected invalid that comes out valid fails
    assert valid_but_broken.outcome == "failure"
    assert valid_but_broken.message == "expected invalid (stale-commit), got valid: the expected anomalies were not found"
    assert root.get("failures") == "2"
