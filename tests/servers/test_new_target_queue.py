"""``leasecheck new-target --queue LIBRARY``: a job queue's adapter to fill in, and the queue conformance its test runs.

The written test fails one method at a time with what it must do, and holds its conformance back until they are
written; the conformance itself (leasecheck/kit/queue_conformance.py) passes a queue that keeps its three promises
and names the one a queue breaks (here: huey, and huey without retries, which never runs a stalled job again).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from paths import REPO

from leasecheck.kit.queue_conformance import conform


def test_new_target_queue_writes_an_adapter_whose_test_names_each_method_to_write(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "leasecheck", "new-target", "--queue", "acme-jobs", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "acme_jobs_queue.py").exists() and (tmp_path / "test_acme_jobs_queue.py").exists()
    assert "leasecheck audit acme_jobs_queue:AcmeJobsQueue" in r.stdout
    t = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "test_acme_jobs_queue.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": f"{REPO}{':' + str(tmp_path)}", "PATH": "/usr/bin:/bin"})
    out = t.stdout
    assert t.returncode == 1, out[-3000:]
    for method in ("setup", "worker_command", "enqueue", "state"):
        assert f"test_method_is_written[{method}]" in out, out[-3000:]
        assert f"AcmeJobsQueue.{method} is not written yet" in out, out[-3000:]
    assert "JobState('FAILED'), or None when the library does not know it" in out, out[-3000:]  # the message whole
    assert "4 failed" in out and "3 skipped" in out and "write setup, worker_command, enqueue, state first" in out, out[-3000:]


def test_a_queue_that_keeps_its_promises_conforms(tmp_path: Path) -> None:
    assert conform("huey", tmp_path, time_limit=12.0) == {}


def test_a_queue_that_never_runs_a_stalled_job_again_is_told_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "once_queue.py").write_text(textwrap.dedent('''
        from leasecheck.targets.queues.huey_queue import HueyQueue


        class OnceQueue(HueyQueue):
            """huey with no retries: a timed-out execution is never run again."""

            name = "once"

            def enqueue(self, jobs):
                for job in jobs:
                    self.huey.enqueue(self._task.s(job, id=job, retries=0, timeout=self.config.ttl_s))
    '''))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = conform("once_queue:OnceQueue", tmp_path / "store", time_limit=12.0)
    # every first execution stalls past the timeout: without a retry none is ever run again, and none succeeds
    assert set(broken) == {"stalled-redelivered", "job-executed"}, broken


def test_the_workers_import_an_adapter_found_in_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker command that imports the adapter's own module (its task, as `taskiq worker MODULE:broker` does) finds
    it: the workers start in the run's folder, so the folder the adapter was found in is on their PYTHONPATH."""
    from leasecheck.queue_run.workers import worker_python_path
    from leasecheck.targets.queues.huey_queue import HueyQueue
    from leasecheck.targets.queues.registry import load_class

    adapter = "from leasecheck.targets.queues.huey_queue import HueyQueue\n\n\nclass MineQueue(HueyQueue):\n    name = 'mine'\n"
    (tmp_path / "mine_queue.py").write_text(adapter)
    (tmp_path / "mine_pkg" / "sub").mkdir(parents=True)
    (tmp_path / "mine_pkg" / "__init__.py").write_text(adapter)
    (tmp_path / "mine_pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "mine_pkg" / "sub" / "deep_queue.py").write_text(adapter)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in ("mine_queue:MineQueue", "mine_pkg:MineQueue", "mine_pkg.sub.deep_queue:MineQueue"):
        paths = worker_python_path(load_class(spec))["PYTHONPATH"].split(os.pathsep)
        assert str(tmp_path.resolve()) in paths, (spec, paths)
    shipped = worker_python_path(HueyQueue)["PYTHONPATH"].split(os.pathsep)
    assert shipped[0] == str(REPO) and str(tmp_path.resolve()) not in shipped, shipped
