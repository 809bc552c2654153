"""A job queue leasecheck does not ship, audited as a lock of one's own is: by ``module:Class`` or the entry point group
``leasecheck.queues``; and without the extras, ``audit --list`` and ``audit NAME`` still say what is published.

The adapter here is a subclass of leasecheck's huey adapter under another name, in a module of the test's own folder
(found from the current directory, as ``run --target`` finds one): what a team writing its own would name.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from click.testing import CliRunner

import leasecheck.targets.queues.registry as queues
import leasecheck.targets.registry as targets
from leasecheck.auditing.audit import audits, select
from leasecheck.cli import main

ADAPTER = textwrap.dedent('''
    """A queue of the team's own (huey under another name), with its published plan."""
    from leasecheck.targets.queues.huey_queue import HueyQueue
    from leasecheck.targets.audits import AuditPlan, FaultAudit


    class TeamQueue(HueyQueue):
        """The team's queue."""

        name = "team-queue"
        audits = (AuditPlan(library="huey", mode="documented", faults=(FaultAudit("none", "valid"),), seeds=(1,),
                            time_limit=6.0, options={"ttl_ms": 2000, "workers": 2}),)
''')


@pytest.fixture()
def no_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without the audit and queue extras: no library module is found."""
    monkeypatch.setattr(queues, "installed", lambda module: False)
    monkeypatch.setattr(targets, "installed", lambda module: module == "msgspec")


def test_without_the_extras_every_queue_keeps_its_published_plans_and_says_what_to_install(no_extras: None) -> None:
    found, broken = audits()
    assert not [a for a in found if a.target.startswith("queue:")]
    rq = [b for b in broken if b.target == "queue:rq@documented"]
    assert rq and rq[0].plan is not None and rq[0].plan.faults, broken
    assert "pip install 'leasecheck[queues]'" in rq[0].error
    assert all(b.plan is not None for b in broken if b.target.startswith("queue:"))  # read from the classes alone


def test_without_the_extras_audit_list_shows_the_published_verdicts(no_extras: None) -> None:
    out = CliRunner().invoke(main, ["audit", "--list"], catch_exceptions=False, terminal_width=400).output
    _, broken = audits()
    rq = next(b for b in broken if b.target == "queue:rq@documented")
    assert rq.plan is not None
    first = rq.plan.faults[0]
    assert f"{first.nemesis}: {first.expected}" in out, out
    assert "queue:rq@documented" in out and "cannot load here" in out and "pip install" in out


def test_without_the_extras_an_unknown_library_names_every_audited_one_and_why_it_cannot_load(no_extras: None) -> None:
    with pytest.raises(LookupError) as e:
        select("no-such-library")
    message = str(e.value)
    assert "none" not in message, message
    for library in ("rq", "huey", "temporalio", "redis", "kazoo"):
        assert f"{library} (" in message, message
    assert "pip install 'leasecheck[queues]'" in message


def test_a_queue_of_ones_own_by_entry_point(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "team_queue.py").write_text(ADAPTER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    ours = EntryPoint("team-queue", "team_queue:TeamQueue", queues.ENTRY_POINT_GROUP)
    monkeypatch.setattr(queues, "entry_points", lambda group: [ours] if group == queues.ENTRY_POINT_GROUP else [])
    assert queues.available()["team-queue"] == "team_queue:TeamQueue"
    assert queues.load("team-queue").name == "team-queue"
    (chosen,) = select("team-queue")
    assert chosen.target == "queue:team-queue@documented"
    found, _ = audits()
    assert "queue:team-queue@documented" in {a.target for a in found}


def test_a_class_that_is_no_queue_library_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "not_a_queue.py").write_text("class Thing:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(queues.QueueNotFound, match=r"subclassing leasecheck\.targets\.queues\.QueueLibrary"):
        queues.load("not_a_queue:Thing")


def test_audit_module_class_runs_a_queue_of_ones_own_with_its_own_workers(tmp_path: Path) -> None:
    (tmp_path / "team_queue.py").write_text(ADAPTER)
    store = tmp_path / "store"
    r = subprocess.run([sys.executable, "-m", "leasecheck", "audit", "team_queue:TeamQueue", "--json", "--store", str(store)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 2), r.stderr[-3000:]  # valid, or unknown if the short run lacked evidence
    (line,) = r.stdout.splitlines()
    row = json.loads(line)
    assert row["target"] == "queue:team_queue:TeamQueue@documented" and row["nemesis"] == "none"
    run_dir = Path(row["run_dir"])
    results = json.loads((run_dir / "results.json").read_text())
    assert results["target"] == "queue:team_queue:TeamQueue" and results["interrupted"] is None
    assert r.returncode == {True: 0, "unknown": 2, False: 1}[results["valid"]]  # the run's exit code, as a lock's audit
    assert (run_dir / "report.html").exists() and (run_dir / "anomalies.jsonl").exists()
