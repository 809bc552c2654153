"""The job queues' audits: each library's own workers, on a broker leasecheck starts, reach what AUDITS.md publishes.

One short audit per library (its published plan's first fault, the plan's first
seed; a published finding may take the plan's next seeds, ``tests/audits.py``),
plus a correct configuration that must stay valid (huey's fenced mode), and the
harness's promises on every exit: every worker process (and what it forked) is
gone, every fault healed, the history whole.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from audits import assert_published

from leasecheck.nemesis.processes import working_in
from leasecheck.queue_run.runner import QueueOptions, QueueRun
from leasecheck.rundir.storedir import FAULTS_FILE
from leasecheck.targets.queues.registry import QUEUES

#: one (audit target, fault) per library: the first fault of its first plan, and huey's fenced mode (valid)
CASES = [
    ("queue:rq@documented", "none"),
    ("queue:huey@documented", "none"),
    ("queue:celery@documented", "none"),
    ("queue:dramatiq@documented", "pause"),
    ("queue:arq@documented", "none"),
    ("queue:saq@documented", "none"),
    ("queue:huey@fenced", "none"),
    ("queue:procrastinate@documented", "none"),
    ("queue:pgqueuer@documented", "none"),
    ("queue:dbos@documented", "kill"),
    ("queue:chancy@documented", "none"),
    ("queue:temporal@documented", "pause"),
]


def test_every_audited_queue_has_a_case_here() -> None:
    assert {t.removeprefix("queue:").partition("@")[0] for t, _ in CASES} == set(QUEUES)


@pytest.mark.parametrize(("target", "nemesis"), CASES)
def test_audit_is_as_published(target: str, nemesis: str, tmp_path: Path) -> None:
    result = assert_published(target, nemesis, tmp_path)
    if result.verdict == "invalid":  # the proof is a stale execution's op, cited by index in the history
        assert result.proof is not None and all(isinstance(i, int) for i in result.proof["ops"])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_queue_run_under_kills_and_pauses_leaves_nothing_behind(tmp_path: Path) -> None:
    run = QueueRun(QueueOptions("huey", seed=3, nemesis=("pause", "kill"), time_limit=8.0, nemesis_interval=2.0,
                                store=str(tmp_path)))
    result = run.execute()
    assert run.workers is not None
    pids = [w.proc.pid for w in run.workers.workers]
    assert len(pids) > 3, "a kill must have been replaced"
    assert not [p for p in pids if _alive(p)]
    assert json.loads((result.run_dir / FAULTS_FILE).read_text()) == {"active": []}  # nothing left to heal
    history = (result.run_dir / "history.jsonl").read_text().splitlines()
    assert any('"f":"kill"' in line for line in history) and any('"replaces"' in line for line in history)
    assert result.verdict.valid in (True, "unknown"), result.verdict.anomalies[:3]  # huey: published valid


def _wait_for(path_glob: Callable[[], list[Path]], timeout: float = 120.0) -> list[Path]:
    """The paths ``path_glob`` finds, once it finds any (an event of the run, not a sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path_glob()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("the run never got there")


def _started_queue_run(store: Path) -> tuple[subprocess.Popen[str], Path]:
    """A queue run under pauses in a child, once its first job has run (its clock has started)."""
    proc = subprocess.Popen([sys.executable, "-m", "leasecheck.queue_run", "huey", "--nemesis", "pause", "--seed", "4",
                             "--time-limit", "60", "--store", str(store)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    (events,) = _wait_for(lambda: [p for p in store.glob("queue-huey/*/queue/events") if any(p.iterdir())])
    return proc, events.parent.parent


def test_sigterm_heals_stops_every_worker_records_and_exits_143(tmp_path: Path) -> None:
    proc, run_dir = _started_queue_run(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (143, 1), err[-2000:]  # 1 only with a proven anomaly (huey: none published)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["interrupted"] == "SIGTERM"
    assert json.loads((run_dir / FAULTS_FILE).read_text()) == {"active": []}
    assert not working_in(str(run_dir / "queue"))  # no worker, no child of one, is left
    assert (run_dir / "history.jsonl").read_text().count("\n") > 1


def test_a_harness_killed_with_sigkill_leaves_no_worker_behind(tmp_path: Path) -> None:
    proc, run_dir = _started_queue_run(tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while working_in(str(run_dir / "queue")) and time.monotonic() < deadline:  # the guards take them down
        time.sleep(0.1)
    assert not working_in(str(run_dir / "queue"))
