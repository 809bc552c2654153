"""The job queues' audits: each library's own workers, on a broker leasecheck starts, reach what AUDITS.md publishes.

One short audit per library (its published plan's first fault, the plan's first
seed; a published finding may take the plan's next seeds, ``tests/audits.py``),
plus a correct configuration that must stay valid (huey's fenced mode), and the
harness's promises on every exit: every worker process (and what it forked) is
gone, every fault healed, the history whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audits import assert_published

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
