"""A queue run's pause aimed between a task's heartbeat and its write, lasting until the job ran again (issue 37).

The task is leasecheck's own (:mod:`leasecheck.targets.queues.task`), run in a real
child process as a library's worker runs it; the aim is the run's
(:class:`~leasecheck.queue_run.aim_notes.AimNotes`), the pause the catalogue's
factory, the signals real. Temporal's published pause line rests on this
(tests/audits/test_audit_queues.py runs it on Temporal's own workers).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

from leasecheck.nemesis.catalogue import FaultKind
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.faults import PauseProcess, make_kill, make_pause
from leasecheck.nemesis.inside import MIN_RUNNING, aims_inside, choose
from leasecheck.nemesis.schedule import Nemesis
from leasecheck.queue_run.aim_notes import AimNotes
from leasecheck.targets.queues.resource import Resource
from leasecheck.targets.queues.task import BUSY_DIR, ENV_DIR, ENV_SLOT, EVENTS_DIR, PLAN_FILE, RESOURCE_FILE
from leasecheck.waiting import wait_for

JOB = "t1-j0000"
#: one execution of JOB with a heartbeat that always answers (the plan stalls nothing: only the aim holds it)
_TASK = f"""
from leasecheck.targets.queues.task import Identity, execute
execute({JOB!r}, Identity(token="1", epoch=1), heartbeat=lambda: True)
"""


class W:
    def __init__(self, slot: int, pid: int) -> None:
        self.slot, self.process, self.pid = slot, slot, pid


def _queue(tmp_path: Path) -> tuple[Path, AimNotes]:
    queue = tmp_path / "queue"
    for sub in (EVENTS_DIR, BUSY_DIR):
        (queue / sub).mkdir(parents=True)
    notes = AimNotes(queue, "t1", time.monotonic_ns())
    (queue / PLAN_FILE).write_text(json.dumps({"seed": 1, "mode": "documented", "ttl_ms": 1000, "stall_rate": 0.0,
                                               "aim": notes.name}))
    Resource(queue / RESOURCE_FILE).create()
    return queue, notes


def _events(queue: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in (queue / EVENTS_DIR).iterdir() for line in path.read_text().splitlines()]


@pytest.fixture
def idlers() -> Any:
    """Two more worker processes that hold nothing (a pause leaves :data:`MIN_RUNNING` others running)."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(MIN_RUNNING)]
    yield [W(1 + i, p.pid) for i, p in enumerate(procs)]
    for p in procs:
        p.kill()
        p.wait()


def test_a_task_is_paused_between_its_heartbeat_and_its_write_until_its_job_runs_again(tmp_path: Path, idlers: list[W]) -> None:
    """The aimed pause stops the worker while its task holds after a heartbeat, before its second write's invoke; its
    heal waits, past its drawn end, until the job's next execution began; woken, the task writes first thing, so its
    write is invoked after the newer execution began: the stale effect a history proves."""
    queue, notes = _queue(tmp_path)
    env = {**os.environ, ENV_DIR: str(queue), ENV_SLOT: "0", "PYTHONPATH": str(REPO)}
    task = subprocess.Popen([sys.executable, "-c", _TASK], env=env)
    try:
        workers = [W(0, task.pid), *idlers]
        # a ttl of 10 s for the fault: its aim waits one for the task (a child's start-up on a loaded machine)
        ctx = FaultContext(ttl_ms=10_000, workers=lambda: workers, aiming=notes.aimer)
        assert aims_inside(notes.aimer, "pause", random.Random(1))  # every pause aims in a queue run
        assert [(d.f, d.at) for d in choose(notes.aimer, "pause", random.Random(1))] == [("effect", 0)]
        pause = make_pause(ctx, random.Random(1))
        assert isinstance(pause, PauseProcess) and pause.inside is not None
        value = pause.start()
        stopped_ns = time.monotonic_ns()
        assert value["victims"] == [0] and "inside" not in value
        [before] = value["before"]
        assert before["f"] == "effect" and before["process"] == 0 and "heartbeat" in before["how"]
        assert pause.awaiting()  # the job has not run again: the heal waits
        beats = [e for e in _events(queue) if e["f"] == "renew" and e["type"] == "ok"]
        assert beats and not [e for e in _events(queue) if e["f"] == "effect" and e["type"] == "invoke"][1:]
        Resource(queue / RESOURCE_FILE).begin(JOB)  # the library runs the job again elsewhere
        began_ns = time.monotonic_ns()
        assert not pause.awaiting()
        pause.heal()
        assert task.wait(timeout=30) == 0
    finally:
        task.kill()
        notes.close()
    effects = [e for e in _events(queue) if e["f"] == "effect" and e["type"] == "invoke"]
    assert len(effects) == 2 and effects[1]["t"] > began_ns > stopped_ns > beats[-1]["t"]


def test_a_queue_pause_never_falls_back_and_leaves_two_workers_running(tmp_path: Path, idlers: list[W]) -> None:
    """With no task holding before a write in its wait, a queue run's pause (and kill) is not made at all (the
    schedule keeps its turn): stopping a worker anywhere else tests nothing its task's own stalls do not. And it
    never stops a worker unless two others run on, to run the paused job again."""
    _, notes = _queue(tmp_path)
    try:
        lone = W(0, idlers[0].pid)
        ctx = FaultContext(ttl_ms=100, workers=lambda: [lone, *idlers], holders=lambda: {0}, aiming=notes.aimer)
        assert make_pause(ctx, random.Random(1)) is None and make_kill(ctx, random.Random(1)) is None
        # a 10 s ttl: an armed aim would wait a ttl for its op, so a refusal within half of it was never armed
        two = FaultContext(ttl_ms=10_000, workers=lambda: idlers, aiming=notes.aimer)
        began = time.monotonic()
        assert make_pause(two, random.Random(1)) is None and time.monotonic() - began < 5.0  # not even armed
    finally:
        notes.close()


def test_the_schedule_heals_an_outlasting_fault_once_its_evidence_came() -> None:
    """A fault whose heal waits for evidence is healed at its drawn end if it came, else once it does."""
    came = threading.Event()
    healed: list[float] = []
    asked: list[float] = []

    class Waits:
        name = "pause"

        def start(self) -> dict[str, Any]:
            return {"victims": [0]}

        def heal(self) -> dict[str, Any]:
            healed.append(time.monotonic())
            return {"victims": [0]}

        def undo_record(self) -> None:
            return None

        def awaiting(self) -> bool:
            asked.append(time.monotonic())
            return not came.is_set()

    made: list[Waits] = []
    row = FaultKind("pause", "a toy", (0.0, 0.0), ("pause", "resume"), frozenset(),
                    lambda ctx, rng: None if made else made.append(Waits()) or made[0])
    nemesis = Nemesis([row], 0.05, FaultContext(ttl_ms=100), lambda f, v: None, random.Random(1))
    nemesis.start()
    try:
        wait_for(lambda: bool(made), timeout=10.0, what="the fault started")
        wait_for(lambda: len(asked) >= 5, timeout=10.0, what="the heal asked again and again")
        assert not healed  # its drawn duration (0) is long past: only the evidence holds it
        given = time.monotonic()
        came.set()
        wait_for(lambda: bool(healed), timeout=10.0, what="the heal once the evidence came")
        assert healed[0] >= given
    finally:
        nemesis.heal_all()
