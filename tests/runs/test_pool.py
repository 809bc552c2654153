"""Workers forked from the run's zygote (leasecheck.run.zygote, leasecheck.run.pool): fast, and nothing else changed.

What a forked worker must keep from the spawned one it replaced: it is its own
process and the recorded pid is its own; it starts with SIGINT and SIGTERM
blocked, so a Ctrl-C (or a CI cancel) sent to the whole process group ends the
run the usual way — heal, wind down, check, exit 130 / 143 — and kills no
worker before that; it dies with the harness, even with ``kill -9``; and the
run leaves no process behind, the forkserver included. A zygote that cannot
serve (an import started a thread) leaves the run to ``spawn``.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from paths import REPO

from leasecheck.run import zygote
from leasecheck.run.pool import ResolvedSpec
from leasecheck.run.runner import Run, RunOptions, run
from leasecheck.targets.base import TargetConfig
from leasecheck.targets.registry import TargetSpec
from leasecheck.targets.sqlite_lease import SqliteLease

FORKSERVER = "multiprocessing.forkserver import main"


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs: list[psutil.Process], deadline_s: float) -> list[psutil.Process]:
    end = time.monotonic() + deadline_s
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < end:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive


def _tree(root: psutil.Process) -> list[psutil.Process]:
    """``root``'s descendants but multiprocessing's resource tracker (one per interpreter, by design)."""
    out = []
    try:
        kids = root.children(recursive=True)
    except psutil.Error:
        return out
    for p in kids:
        try:
            if "resource_tracker" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _is_forkserver(p: psutil.Process, harness: psutil.Process) -> bool:
    """The harness's forkserver (its workers, forked from it, show the same command line: they are its children)."""
    try:
        return p.ppid() == harness.pid and FORKSERVER in " ".join(p.cmdline())
    except psutil.Error:
        return False


def _blocked(pid: int) -> set[signal.Signals]:
    """The signals ``pid`` has blocked, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {s for s in (signal.SIGINT, signal.SIGTERM) if mask & (1 << (s - 1))}
    return set()


# ---------------------------------------------------------------- in-process runs


class Watch:
    """The run's processes as its progress callback sees them: the forkserver and the recorded workers."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.before = {p.pid for p in self.me.children(recursive=True)}
        self.seen: dict[int, psutil.Process] = {}
        self.forkservers: set[int] = set()
        self.run: Run | None = None
        self.checked = False
        #: every worker pid the recorder knew while the run went (it forgets a worker once it is gone)
        self.worker_pids: set[int] = set()

    def __call__(self, snapshot: dict[str, Any]) -> None:
        for p in _tree(self.me):
            if p.pid not in self.before:
                self.seen.setdefault(p.pid, p)
                if _is_forkserver(p, self.me):
                    self.forkservers.add(p.pid)
        if self.run is not None:
            self.worker_pids |= {s.pid for s in self.run.recorder.live() if s.pid is not None}
        if not self.checked and self.run is not None and self.forkservers:
            self.check_workers()

    def check_workers(self) -> None:
        """Every recorded pid is a live worker, a child of the forkserver; both have SIGINT / SIGTERM handled."""
        assert self.run is not None
        (server,) = self.forkservers
        assert _blocked(server) == {signal.SIGINT, signal.SIGTERM}, "the forkserver must never take a Ctrl-C"
        slots = [s for s in self.run.recorder.live() if s.pid is not None]
        assert slots
        for s in slots:
            worker = psutil.Process(s.pid)
            assert worker.ppid() == server, f"worker {s.slot} (pid {s.pid}) is not the forkserver's child"
            ignored = int(next(ln for ln in Path(f"/proc/{s.pid}/status").read_text().splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
            assert ignored & (1 << (signal.SIGINT - 1)) and ignored & (1 << (signal.SIGTERM - 1))
        self.checked = True


@contextmanager
def _up_times() -> Iterator[dict[str, float]]:
    """When the runner started its workers and when the last said hello (from its log)."""
    marks: dict[str, float] = {}

    class Marks(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if text.startswith("starting ") and text.endswith(" workers"):
                marks["starting"] = record.created
            elif text.startswith("all ") and "workers up" in text:
                marks["up"] = record.created
            elif "zygote failed" in text:
                marks["fallback"] = record.created

    handler = Marks()
    logger = logging.getLogger("leasecheck.run")
    logger.addHandler(handler)
    try:
        yield marks
    finally:
        logger.removeHandler(handler)


def test_64_workers_forked_from_the_zygote_all_say_hello_and_leave_nothing(tmp_path: Path) -> None:
    watch = Watch()
    opts = RunOptions(target="sqlite", store=str(tmp_path / "store"), concurrency=64, time_limit=2.0, ttl_ms=1000,
                      nemesis=("pause",), nemesis_interval=0.5, seed=3)
    r = Run(opts, watch)
    watch.run = r
    with _up_times() as marks:
        result = r.execute()
    assert "fallback" not in marks
    assert result.stats["worker_processes"] >= 64 and result.verdict.valid in (True, "unknown")
    assert len(watch.forkservers) == 1 and watch.checked, "no forkserver seen during the run"
    # each worker has its own pid: the recorder saw 64 different ones, none of them the forkserver's
    pids = watch.worker_pids
    assert len(pids) == result.stats["worker_processes"] and not pids & watch.forkservers
    alive = _wait_gone(list(watch.seen.values()), 10.0)
    assert not alive, f"left behind: {[(p.pid, p.cmdline()) for p in alive if _alive(p)]}"
    logging.getLogger(__name__).info("64 workers up in %.2f s", marks["up"] - marks["starting"])


@pytest.mark.parametrize(
    ("module", "code"),
    [
        pytest.param("starts_a_thread", "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
                     id="an-import-starts-a-thread"),
        pytest.param("hangs", "import time\ntime.sleep(3600)\n", id="an-import-hangs"),
    ],
)
def test_a_zygote_that_cannot_serve_leaves_the_run_to_spawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, code: str) -> None:
    """An import that starts a thread makes the forkserver exit (forking it could deadlock a worker); one that
    hangs gets it killed at the fork's deadline: either way the run spawns its workers, and says so."""
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(zygote, "WORKER_MODULES", (*zygote.WORKER_MODULES, module))
    monkeypatch.setattr(zygote, "FORK_TIMEOUT_S", 3.0)
    watch = Watch()
    with _up_times() as marks:
        result = run(RunOptions(target="sqlite", store=str(tmp_path / "store"), concurrency=3, time_limit=1.0, ttl_ms=1000, seed=1), watch)
    assert "fallback" in marks, "the pool did not say it spawned instead"
    assert result.stats["worker_processes"] >= 3 and result.verdict.valid in (True, "unknown")
    assert "spawning workers instead" in (result.run_dir / "leasecheck.log").read_text()
    assert not _wait_gone(list(watch.seen.values()), 10.0)


def test_preloads_are_the_worker_the_backend_and_what_the_main_script_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    names = zygote.preloads("leasecheck.targets.postgres_lease")
    assert names[0] == "leasecheck.run.zygote" and names[1:3] == ["leasecheck.run.workload", "leasecheck.targets.postgres_lease"]
    # the backend's module imports its client library only where it uses it: the zygote imports it after the module
    with_client = zygote.preloads("leasecheck.targets.postgres_lease", ("psycopg",))
    assert with_client[2:4] == ["leasecheck.targets.postgres_lease", "psycopg"]
    # the console script: ``from leasecheck.cli import main`` — a forked child re-runs it, so leasecheck.cli is preloaded
    script = types.ModuleType("__main__")
    script.__file__ = "/usr/bin/leasecheck"
    script.__spec__ = None
    import leasecheck.cli

    script.main = leasecheck.cli.main  # type: ignore[attr-defined]
    script.sys = sys  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert {"leasecheck.cli", "sys"} <= set(zygote.preloads(None))
    # ``python -m leasecheck``: the child runs nothing again
    package_main = types.ModuleType("__main__")
    package_main.__spec__ = types.SimpleNamespace(name="leasecheck.__main__")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", package_main)
    assert zygote.preloads(None) == ["leasecheck.run.zygote", "leasecheck.run.workload"]
    # ``python -m bench.x``: the child runs bench.x again (not preloaded itself: runpy would warn), so what it imports
    package_main.__spec__ = types.SimpleNamespace(name="bench.bench_workers_up")  # type: ignore[assignment]
    package_main.run = run  # type: ignore[attr-defined]
    assert zygote.preloads(None) == ["leasecheck.run.zygote", "leasecheck.run.workload", "leasecheck.run.runner"]


# ---------------------------------------------------------------- a harness as a child, signalled


def _history(store: Path) -> Path | None:
    found = list(store.glob("*/*/history.jsonl"))
    return found[0] if found else None


def _until(what: str, ready: Any, deadline_s: float = 90.0) -> Any:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = ready()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"never: {what}")


@pytest.mark.parametrize(
    ("sig", "when"),
    [
        pytest.param(signal.SIGINT, "starting", id="ctrl-c-while-workers-start"),
        pytest.param(signal.SIGINT, "running", id="ctrl-c-mid-run"),
        pytest.param(signal.SIGTERM, "running", id="sigterm-to-the-group-mid-run"),
        pytest.param(signal.SIGKILL, "running", id="harness-kill-9"),
    ],
)
def test_a_signal_to_the_process_group_ends_the_run_the_usual_way(tmp_path: Path, sig: signal.Signals, when: str) -> None:
    """Ctrl-C / SIGTERM to the whole group (forkserver and workers included): heal, check, exit 128 + n,
    nothing left; ``kill -9`` of the harness alone: nothing left either."""
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasecheck", "run", "--target", "sqlite", "--concurrency", "32", "--nemesis", "pause",
         "--nemesis-interval", "0.3", "--time-limit", "120", "--ttl", "300", "--seed", "4", "--store", str(store)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    root = psutil.Process(proc.pid)
    seen: dict[int, psutil.Process] = {}

    def look() -> list[psutil.Process]:
        for p in _tree(root):
            seen.setdefault(p.pid, p)
        return list(seen.values())

    try:
        def workers() -> int:
            servers = [p for p in look() if _is_forkserver(p, root) and _alive(p)]
            return len(servers[0].children()) if servers else 0

        if when == "starting":  # the forkserver is forking workers: some up, some not yet
            _until("a worker forked", lambda: workers() >= 1)
        else:  # the workload runs and the nemesis has paused a worker
            _until("a paused worker", lambda: (h := _history(store)) is not None and b'"pause"' in h.read_bytes()
                   and any(p.status() == psutil.STATUS_STOPPED for p in look() if _alive(p)))
        (server,) = [p for p in look() if _is_forkserver(p, root)]
        assert _blocked(server.pid) == {signal.SIGINT, signal.SIGTERM}, "the group's signal would reach the forkserver"
        started = time.monotonic()
        if sig == signal.SIGKILL:
            proc.kill()
            proc.wait(10)
        else:
            os.killpg(proc.pid, sig)
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 128 + sig, (proc.returncode, out[-2000:], err[-3000:])
            assert b"interrupted" in err and b"Traceback" not in err, err[-3000:]
            assert time.monotonic() - started < 60
        alive = _wait_gone(list(seen.values()), 10.0)
        assert not alive, f"left behind: {[(p.pid, p.cmdline()) for p in alive if _alive(p)]}"
        if sig == signal.SIGKILL:
            return
        history = _history(store)
        assert history is not None
        results = json.loads((history.parent / "results.json").read_text())
        assert results["interrupted"] == sig.name and results["valid"] in (True, "unknown")
        if when == "running":  # every pause was undone before the workers went
            lines = [json.loads(x) for x in history.read_text().splitlines()[1:] if b'"nemesis"' in x.encode()]
            fs = [e["f"] for e in lines]
            assert fs.count("pause") == fs.count("resume") >= 1, fs
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in seen.values():
            try:
                p.kill()
            except psutil.Error:
                pass


# ---------------------------------------------------------------- what a worker is given


def test_a_worker_gets_its_backend_class_resolved_once_by_the_harness(tmp_path: Path) -> None:
    """A registered name or module:Class becomes the class's import path (no entry-point scan per worker);
    a class made on the fly (exec:) or not importable by its path stays as the user named it."""
    config = TargetConfig(url=str(tmp_path / "store.db"))
    for name in ("sqlite", "leasecheck.targets.sqlite_lease:SqliteLease"):
        spec = ResolvedSpec.of(TargetSpec(name, config))
        assert isinstance(spec, ResolvedSpec) and spec.where == "leasecheck.targets.sqlite_lease:SqliteLease"
        assert spec.target == name
        again = pickle.loads(pickle.dumps(replace(spec, config=replace(config, ttl_ms=2000))))  # what the pool sends
        made = again.make()
        try:
            assert type(made) is SqliteLease and made.config.ttl_ms == 2000
        finally:
            made.close()
    script = tmp_path / "child.py"
    script.write_text("")
    exec_spec = TargetSpec(f"exec:{sys.executable} {script}", config)
    assert ResolvedSpec.of(exec_spec) is exec_spec
