"""The nemesis machinery: seeded schedules, overlapping faults, heal-all, and `leasecheck heal`."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
from click.testing import CliRunner

from leasecheck.cli import main
from leasecheck.nemesis.faults import PauseProcess
from leasecheck.nemesis.schedule import Nemesis
from leasecheck.storedir import load_faults, save_faults


class Toy:
    """A fault that only notes what happened to it."""

    def __init__(self, name: str, id_: int, log: list[tuple[str, str]]) -> None:
        self.name, self.id, self.log = name, f"{name}-{id_}", log

    def start(self) -> dict[str, Any]:
        self.log.append(("start", self.id))
        return {"victims": [self.id]}

    def heal(self) -> dict[str, Any] | None:
        self.log.append(("heal", self.id))
        return {"victims": [self.id]}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "toy", "id": self.id}


def schedule(seed: int, events: list, log: list, states: list, max_active: int = 2) -> Nemesis:
    count = iter(range(10_000))
    return Nemesis(
        kinds=["pause", "kill"], interval_s=0.02, duration_s=lambda kind, rng: 0.1,
        make=lambda kind, rng: Toy(kind, next(count), log),
        record=lambda f, value: events.append((f, value["victims"][0])),
        rng=random.Random(seed), max_active=max_active, on_change=lambda active: states.append(len(active)),
    )


def wait_until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_faults_overlap_up_to_max_active_and_heal_all_undoes_the_rest() -> None:
    events: list = []
    log: list = []
    states: list = []
    n = schedule(1, events, log, states, max_active=2)
    n.start()
    wait_until(lambda: 2 in states and len([e for e in log if e[0] == "heal"]) >= 2)
    n.heal_all()
    started = [name for what, name in log if what == "start"]
    healed = [name for what, name in log if what == "heal"]
    assert sorted(started) == sorted(healed)  # nothing left active
    assert max(states) == 2 and states[-1] == 0
    assert all(f in ("pause", "kill", "resume", "start") for f, _ in events)
    n.heal_all()  # idempotent
    assert len([e for e in log if e[0] == "heal"]) == len(healed)


def test_the_schedule_flows_from_the_seed() -> None:
    def choices(seed: int) -> list[str]:
        log: list = []
        n = schedule(seed, [], log, [], max_active=100)  # never skips a tick
        n.start()
        wait_until(lambda: len([e for e in log if e[0] == "start"]) >= 5)
        n.heal_all()
        return [name.split("-")[0] for what, name in log if what == "start"][:5]

    assert choices(7) == choices(7)
    assert any(choices(s) != choices(7) for s in (1, 2, 3))


def test_pause_fault_stops_and_heal_resumes_a_real_process() -> None:
    p = subprocess.Popen(["sleep", "60"])
    try:
        fault = PauseProcess(process=3, pid=p.pid)
        assert fault.start() == {"victims": [3], "pid": p.pid}
        wait_until(lambda: psutil.Process(p.pid).status() == psutil.STATUS_STOPPED)
        assert fault.undo_record() == {"kind": "sigcont", "pids": [p.pid]}
        fault.heal()
        wait_until(lambda: psutil.Process(p.pid).status() != psutil.STATUS_STOPPED)
        assert fault.undo_record() is None
    finally:
        p.kill()
        p.wait()


def test_leasecheck_heal_resumes_what_a_dead_harness_left_stopped(tmp_path: Path) -> None:
    p = subprocess.Popen(["sleep", "60"])
    try:
        p.send_signal(signal.SIGSTOP)
        wait_until(lambda: psutil.Process(p.pid).status() == psutil.STATUS_STOPPED)
        save_faults(tmp_path, [{"kind": "sigcont", "pids": [p.pid]}])
        r = CliRunner().invoke(main, ["heal", str(tmp_path)], catch_exceptions=False)
        assert r.exit_code == 0 and f"SIGCONT to [{p.pid}]" in r.stdout
        wait_until(lambda: psutil.Process(p.pid).status() != psutil.STATUS_STOPPED)
        assert load_faults(tmp_path) == []
        again = CliRunner().invoke(main, ["heal", str(tmp_path)], catch_exceptions=False)
        assert "nothing to heal" in again.stdout
    finally:
        p.kill()
        p.wait()


def test_leasecheck_nemeses_lists_every_fault() -> None:
    r = CliRunner().invoke(main, ["nemeses"], catch_exceptions=False)
    assert r.exit_code == 0
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == [
        "pause", "kill", "pause-store", "kill-store", "clock-bump", "clock-strobe", "clock-store",
        "partition", "latency", "bandwidth", "docker-pause", "docker-kill", "docker-disconnect",
    ]
