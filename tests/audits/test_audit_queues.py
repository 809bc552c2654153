"""The job queues' audits: each library's own workers, on a broker leasecheck starts, reach what AUDITS.md publishes.

One short audit per library (its published plan's first fault, the plan's first
seed; a published finding may take the plan's next seeds, ``tests/support/audits.py``),
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

from leasecheck.machine.processes import working_in
from leasecheck.queue_run.runner import QueueOptions, QueueRun
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.servers.base import LocalServer
from leasecheck.targets.queues.base import QueueConfig
from leasecheck.targets.queues.registry import QUEUES
from leasecheck.targets.queues.rq import RQ

#: one (audit target, fault) per library: the first fault of its first plan, huey's fenced mode (valid), and one
#: broker fault (RQ's Redis killed: the producer's enqueue and the workers' reconnects across a restart)
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
    ("queue:temporal@documented", "pause"),  # aimed between an attempt's heartbeat and its write (test_queue_aim.py)
    ("queue:rq@documented", "kill-store"),  # a broker killed and started again under the library's own workers
]


def test_every_audited_queue_has_a_case_here() -> None:
    assert {t.removeprefix("queue:").partition("@")[0] for t, _ in CASES} == set(QUEUES)


@pytest.mark.parametrize(("target", "nemesis"), CASES)
def test_audit_is_as_published(target: str, nemesis: str, tmp_path: Path) -> None:
    result = assert_published(target, nemesis, tmp_path)
    if result.verdict == "invalid":  # the proof is a stale execution's op, cited by index in the history
        assert result.proof is not None and all(isinstance(i, int) for i in result.proof["ops"])


#: a job whose first run outlives RQ's job timeout (the horse's alarm ends it, and the horse retries the job);
#: every run leaves a line, so the test counts the runs
_RQ_JOB = """
import os, time
def job(path):
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\\n")
    if sum(1 for _ in open(path)) == 1:
        time.sleep(5)
"""

#: ``python -m rq.cli``, its worker kept off the CPU for 1.5 s each time it has reaped a work-horse (a loaded
#: machine, made certain): RQ's monitor alarm (``job_monitoring_interval``) goes off in that gap if it is shorter
_RQ_PREEMPTED = """
import os, runpy, sys, time
_wait4 = os.wait4
def wait4(pid, options):
    answer = _wait4(pid, options)
    time.sleep(1.5)
    return answer
os.wait4 = wait4
runpy.run_module("rq.cli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(("interval", "runs"), [("1", 3), ("adapter's", 2)])
def test_rq_retries_a_timed_out_job_twice_if_its_worker_loses_the_horse_and_the_audit_keeps_that_out(
        tmp_path: Path, redis_server: LocalServer, interval: str, runs: int) -> None:
    """The flaky ``rq@documented-none`` (invalid beside load: duplicate-commit, lost-commit), made certain.

    A worker that its monitor alarm interrupts after ``os.wait4`` reaped the horse loses the horse's exit status,
    finds the job (which the horse's timeout handling already put back on the queue) neither finished nor failed,
    logs "Work-horse terminated unexpectedly; waitpid returned None" and retries it again: the job runs twice after
    its timeout (``--job-monitoring-interval 1``, which the audit ran with). The adapter's interval (RQ's default,
    30 s) never goes off while a horse of the run ends, so the same worker runs the job once after its timeout."""
    from redis import Redis
    from rq import Queue, Retry

    (tmp_path / "rq_race_job.py").write_text(_RQ_JOB)
    (tmp_path / "rq_preempted.py").write_text(_RQ_PREEMPTED)
    library = RQ(QueueConfig(redis_server.url, 1000, run_id=f"race{interval[0]}"))
    command = library.worker_command(0)
    assert command[1:3] == ["-m", "rq.cli"]
    at = command.index("--job-monitoring-interval") + 1
    if interval == "adapter's":  # far longer than the horse (1 s timeout) and the gap after it (1.5 s)
        assert int(command[at]) >= 30
    else:
        command[at] = interval
    ran = tmp_path / "runs.txt"
    with Redis.from_url(redis_server.url) as redis:
        Queue(library.queue_name, connection=redis).enqueue("rq_race_job.job", str(ran), job_timeout=1,
                                                            retry=Retry(max=5))
    worker = subprocess.run([sys.executable, str(tmp_path / "rq_preempted.py"), *command[3:], "--burst"],
                            cwd=tmp_path, env=_with_path(tmp_path), capture_output=True, text=True, timeout=120)
    log = worker.stdout + worker.stderr
    assert worker.returncode == 0, log[-3000:]
    assert len(ran.read_text().splitlines()) == runs, log[-3000:]
    assert ("waitpid returned None" in log) == (runs == 3), log[-3000:]


def _with_path(folder: Path) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)}


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
    assert json.loads(RunFolder(result.run_dir).faults.read_text()) == {"active": []}  # nothing left to heal
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
    assert json.loads(RunFolder(run_dir).faults.read_text()) == {"active": []}
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


def test_sigint_keeps_the_verdict_as_a_lease_run_does_and_leaves_the_report_and_anomalies(tmp_path: Path) -> None:
    """The run frame: an interrupted queue run records ``"interrupted": "SIGINT"`` and keeps the verdict its history
    earns (a lease run's rule: only the reason says it was cut short), with report.html and anomalies.jsonl."""
    from leasecheck.checker import check_source
    from leasecheck.queue_run.faults import queue_kinds
    from leasecheck.verdict.attribution import fault_victims
    from leasecheck.verdict.run_verdict import evidence_of, fault_windows, run_verdict

    proc = subprocess.Popen([sys.executable, "-m", "leasecheck.queue_run", "huey", "--seed", "5", "--time-limit", "120",
                             "--store", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = "the first execution started: the clock starts"
    (log,) = _wait_for(lambda: [p for p in tmp_path.glob("queue-huey/*/leasecheck.log") if started in p.read_text()])
    run_dir = log.parent

    def commits() -> int:  # executions that returned: evidence enough for a verdict once their results are read
        return sum(p.read_text().count('"f":"commit"') for p in (run_dir / "queue" / "events").iterdir())

    _wait_for(lambda: [run_dir] if commits() >= 6 else [])
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["interrupted"] == "SIGINT"
    assert results["reason"].startswith("interrupted by SIGINT"), results["reason"]
    history = run_dir / "history.jsonl"
    checked = check_source(history, windows=fault_windows, faults=fault_victims)
    with history.open("rb") as f:
        earned, _ = run_verdict(checked.valid, evidence_of(f), queue_kinds(()), checked.coverage, (),
                                QueueRun.required_ops("huey"))
    assert earned is True and checked.cut is None, results["reason"]  # huey: published valid, and the run had its evidence
    assert results["valid"] is True  # kept: an interrupted run is not made "unknown"
    assert proc.returncode == (1 if results["valid"] is False else 130), err[-2000:]
    assert (run_dir / "report.html").exists() and (run_dir / "anomalies.jsonl").exists()
    assert len((run_dir / "anomalies.jsonl").read_text().splitlines()) == len(results["anomalies"])
    assert json.loads(RunFolder(run_dir).faults.read_text()) == {"active": []}


def test_anomalies_are_said_as_proven_and_fail_fast_stops_the_test_at_the_first(tmp_path: Path) -> None:
    """A queue run checks its history so far as it goes (queue_run/live.py): arq's redelivered job is said on stderr
    before the end, and --fail-fast ends the test there; anomalies.jsonl names each with the whole history's ops."""
    r = subprocess.run([sys.executable, "-m", "leasecheck.queue_run", "arq", "--seed", "1", "--time-limit", "120",
                        "--fail-fast", "--store", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    (run_dir,) = tmp_path.glob("queue-arq/*")
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is False and results["run"]["stopped_at_first_anomaly"] is True
    from leasecheck.verdict.situations import QUEUE_WORKLOAD_SITUATIONS  # what a queue's own workers can bring about

    assert sorted(results["coverage"]["applicable"]) == sorted(QUEUE_WORKLOAD_SITUATIONS)
    said = [line for line in r.stderr.splitlines() if line.startswith("anomaly ")]
    assert said, r.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "anomalies.jsonl").read_text().splitlines()]
    assert len(records) == len(results["anomalies"]) and any(rec["early"] for rec in records)
    assert sorted((rec["kind"], rec["ops"]) for rec in records) == sorted((a["kind"], a["ops"]) for a in results["anomalies"])
    assert (run_dir / "report.html").exists() and not (run_dir / "queue" / "history-so-far.jsonl").exists()
