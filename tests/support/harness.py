"""The harness as a child process, and the processes it leaves: what the tests that kill a harness mid-run watch.

Shared by the run's own tests (tests/runs/test_run.py) and the recovery of a killed harness's history
(tests/runs/test_merge.py): a ``leasecheck`` child, its descendants seen and reaped whatever the test's end, a
worker stopped by a pause found, and ``leasecheck check`` on what it left.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from click.testing import CliRunner
from paths import REPO

from leasecheck.cli import main


def is_gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def describe(procs: list[psutil.Process]) -> str:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {p.name()} [{p.status()}] {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            out.append(f"{p.pid} (gone)")
    return "; ".join(out)


def stopped_of(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.status() == psutil.STATUS_STOPPED:
                out.append(p)
        except psutil.Error:
            pass
    return out


def wait_gone(procs: list[psutil.Process], deadline_s: float) -> list[psutil.Process]:
    """The processes still alive (zombies count as gone) after waiting up to ``deadline_s``."""
    end = time.monotonic() + deadline_s
    alive = [p for p in procs if not is_gone(p)]
    while alive and time.monotonic() < end:
        time.sleep(0.05)
        alive = [p for p in alive if not is_gone(p)]
    return alive


def descendants_of(root: psutil.Process, skip: set[int] = frozenset()) -> list[psutil.Process]:  # type: ignore[assignment]
    """``root``'s descendants, except subtrees of the children in ``skip`` and multiprocessing's
    resource tracker (one per interpreter, outlives every run by design)."""
    out = []
    try:
        children = root.children()
    except psutil.Error:
        return out
    for child in children:
        if child.pid in skip:
            continue
        try:
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
            out.append(child)
            out.extend(child.children(recursive=True))
        except psutil.Error:
            continue
    return out


class ProcessWatch:
    """Every process a run started (sampled from the runner's progress callback), and its faults.

    Children that existed before (the session servers and their backends) are
    not the run's and are left out.
    """

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.before = {c.pid for c in self.me.children()}
        self.seen: dict[int, psutil.Process] = {}
        self.saw_stopped: set[str] = set()
        self.faults: Counter[str] = Counter()
        self.snapshots = 0

    def sample(self) -> list[psutil.Process]:
        procs = descendants_of(self.me, self.before)
        for p in procs:
            self.seen.setdefault(p.pid, p)
        for p in stopped_of(procs):
            try:
                self.saw_stopped.add(p.name())
            except psutil.Error:
                pass
        return procs

    def __call__(self, snapshot: dict[str, Any]) -> None:
        self.snapshots += 1
        self.faults.update(set(snapshot["faults"]))
        self.sample()

    def assert_clean(self, deadline_s: float = 15.0) -> None:
        """Nothing the run started is stopped now, and all of it is gone within the deadline."""
        procs = list(self.seen.values()) + self.sample()
        stopped = stopped_of(procs)
        assert not stopped, f"left stopped: {describe(stopped)}"
        alive = wait_gone(procs, deadline_s)
        assert not alive, f"left alive after {deadline_s:g} s: {describe(alive)}"


def check_cli(path: Path) -> tuple[int, dict[str, Any], str]:
    """``leasecheck check PATH --json``: (exit code, verdict, stderr)."""
    r = CliRunner().invoke(main, ["check", str(path), "--json"], catch_exceptions=False)
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else {}, r.stderr


def spawn_leasecheck(*args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "leasecheck", *args], cwd=REPO, **kw)


@dataclass
class Harness:
    """A ``leasecheck`` child process and the descendants a test saw under it."""

    proc: subprocess.Popen[bytes]
    kids: list[psutil.Process] = field(default_factory=list)


@contextmanager
def harness_child(*args: str, **kw: Any) -> Iterator[Harness]:
    """``leasecheck ARGS`` as a child; however the test ends, it and the descendants it saw are gone."""
    h = Harness(spawn_leasecheck(*args, **kw))
    try:
        yield h
    finally:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait()
        reap(h.kids)


def history_in(store: Path) -> Path | None:
    found = list(store.glob("*/*/history.jsonl"))
    return found[0] if found else None


def wait_for_paused_worker(
    harness: subprocess.Popen[bytes], store: Path, events: int, store_pause: bool = False, deadline_s: float = 60.0
) -> tuple[Path, list[psutil.Process]]:
    """Poll the history until it has ``events`` events and a pause is active (of the store, if
    ``store_pause``), and a stopped process is really there; return the history and the harness's
    descendants at that moment.

    The active pause is read from faults.json (what the harness keeps true for ``leasecheck heal``), not
    from the history: the history is merged from the workers' stamped streams, and a stopped worker or
    store holds the merge back until it resumes, so the pause event is written only after it ended."""
    end = time.monotonic() + deadline_s
    root = psutil.Process(harness.pid)
    last = "no history yet"
    while time.monotonic() < end:
        assert harness.poll() is None, f"the harness exited early with {harness.returncode}"
        history = history_in(store)
        if history is not None:
            lines = history.read_bytes().split(b"\n")
            try:
                active = json.loads((history.parent / "faults.json").read_text())["active"]
            except (OSError, ValueError, KeyError):
                active = []  # not written yet, or being replaced
            last = f"{len(lines) - 2} events, active faults {active}"
            if len(lines) - 2 >= events and active:
                kids = descendants_of(root)
                if stopped_of(kids):
                    return history, kids
        time.sleep(0.02)
    raise AssertionError(f"no pause while the history grew within {deadline_s:g} s ({last})")


def reap(procs: list[psutil.Process]) -> None:
    """Kill what a failed assertion left behind (by pid: processes this test started)."""
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    for p in procs:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "-D" in cmd:  # a postgres the harness started: its temporary directory is ours to remove
            data = Path(cmd[cmd.index("-D") + 1])
            if data.parent.name.startswith("leasecheck-postgres-"):  # before servers lived in the run directory
                shutil.rmtree(data.parent, ignore_errors=True)
