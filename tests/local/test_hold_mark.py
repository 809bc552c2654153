"""A worker's hold mark (leasecheck/machine/aim_slot.py): set while it holds an aimed op, read by the harness once it
stopped the worker, so that a stop landing after the hold ran out claims no op (ci: a pause said it stopped a release
its worker had completed 41 ms before)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from paths import REPO

from leasecheck.machine.aim_slot import AimSlot
from leasecheck.machine.processes import freeze

#: a worker's aimed op, held after its last reply (an op that ends short of its armed boundary) for 2 s
CHILD = """
import sys
from leasecheck.machine.aim_slot import Arm, HoldMark
from leasecheck.run.holds import Hold
mark = HoldMark(sys.argv[1])
with Hold(Arm(1, "claim", 99, 2.0), lambda k, last: print("held", flush=True), mark):
    pass
print("done", flush=True)
"""


def test_a_worker_stopped_during_its_hold_is_holding_and_one_stopped_after_is_not(tmp_path: Path) -> None:
    slot = AimSlot(tmp_path / "aim", create=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(slot.path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        assert freeze(child.pid) is not None  # stopped during its 2 s hold
        assert slot.holding(child.pid), "stopped while it holds its op"
        os.kill(child.pid, signal.SIGCONT)
        assert child.stdout.readline() == "done\n"
        assert child.wait(30) == 0
        assert not slot.holding(child.pid), "its hold over, the op went on: a stop now is after it, not inside"
    finally:
        child.kill()
        child.wait()
    assert not slot.holding(os.getpid()), "a process that never held an op holds none"
    assert list(tmp_path.glob("aim.holding-*")) == [tmp_path / f"aim.holding-{child.pid}"]
    slot.forget_marks()
    assert not list(tmp_path.glob("aim.holding-*")), "the harness removes the marks at the run's end"
    slot.close()
