"""What every benchmark here shares: cached histories, measured subprocesses, tables.

Each tool runs in a fresh subprocess so that its wall time includes start-up and
parsing, its peak memory (``ru_maxrss`` from ``wait4``) is its own, and a
runaway search can be killed at a deadline or stopped by an address-space cap
instead of taking the machine down.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.gen import GEN_VERSION, Config, GenStats, generate_config
from bench.plant import PLANT_VERSION, Planted, plant

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
OUT = BENCH_DIR / "out"  # gitignored


# -- histories ---------------------------------------------------------------


def history_name(cfg: Config) -> str:
    """A file name that changes whenever the bytes would (GEN_VERSION included)."""
    shape = "" if cfg.shape == "runs" else f"-{cfg.shape}"
    return (
        f"g{GEN_VERSION}{shape}-ops{cfg.ops}-w{cfg.workers}-k{cfg.nodes}-c{cfg.crash_rate:g}"
        f"-cr{cfg.commit_rate:g}-ttl{cfg.ttl_ms}-u{cfg.clock_uncertainty_ms}-s{cfg.seed}.jsonl"
    )


def cached_history(cfg: Config, out_dir: Path = OUT) -> tuple[Path, GenStats]:
    """The history for ``cfg``, generated once and then reused (with its stats beside it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / history_name(cfg)
    meta = path.with_suffix(".stats.json")
    if path.exists() and meta.exists():
        return path, GenStats(**json.loads(meta.read_text()))
    tmp = path.with_suffix(".tmp")
    stats = generate_config(tmp, cfg)
    tmp.replace(path)
    meta.write_text(json.dumps(asdict(stats)))
    return path, stats


def cached_planted(cfg: Config, kind: str, out_dir: Path = OUT) -> tuple[Path, GenStats, Planted]:
    """The history for ``cfg`` with one anomaly of ``kind`` planted (``bench.plant``), made once."""
    source, stats = cached_history(cfg, out_dir)
    path = source.with_name(f"{source.stem}-p{PLANT_VERSION}-{kind}.jsonl")
    meta = path.with_suffix(".planted.json")
    if path.exists() and meta.exists():
        return path, stats, Planted(**json.loads(meta.read_text()))
    tmp = path.with_suffix(".tmp")
    planted = plant(source, tmp, kind, cfg.seed)
    tmp.replace(path)
    meta.write_text(json.dumps(asdict(planted)))
    return path, stats, planted


# -- measured subprocesses ---------------------------------------------------


@dataclass(slots=True)
class Measured:
    """One subprocess run: how it ended, how long, how much memory, what it printed."""

    status: str  # "done", "timeout", "OOM" or "error"
    wall: float
    maxrss_mb: float
    returncode: int | None
    output: dict[str, Any] = field(default_factory=dict)  # its last stdout line, as JSON
    stderr_tail: str = ""


def run_measured(
    cmd: Sequence[str],
    *,
    timeout: float,
    mem_limit_bytes: int | None = None,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
) -> Measured:
    """Run ``cmd``; kill it (its own process group) at ``timeout`` seconds.

    ``mem_limit_bytes`` caps its address space (``prlimit --as``), so a search
    that explodes fails with "out of memory" instead of exhausting the machine.
    stdout and stderr go to temporary files, so a chatty child never blocks on
    a full pipe while we wait for it.
    """
    if mem_limit_bytes:
        cmd = ["prlimit", f"--as={mem_limit_bytes}", "--", *cmd]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as rss:
        if GNU_TIME.exists():
            cmd = [str(GNU_TIME), "-f", "%M", "-o", rss.name, "--", *cmd]
        start = time.perf_counter()
        pid = _spawn(cmd, out.fileno(), err.fileno(), env, cwd)
        timed_out, status, usage = _wait(pid, start + timeout)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        peak_kb = _peak_kb(rss.read(), usage)
    rc = os.waitstatus_to_exitcode(status)
    return Measured(
        status=_classify(timed_out, rc, stderr),
        wall=wall,
        maxrss_mb=peak_kb / 1024,
        returncode=None if timed_out else rc,
        output=_last_json_line(stdout),
        stderr_tail=stderr[-2000:],
    )


#: GNU time: it forks the measured command from its own small process and reports that child's peak RSS
GNU_TIME = Path("/usr/bin/time")


def _peak_kb(time_output: str, usage: resource.struct_rusage) -> float:
    """The measured command's peak RSS in KB, as GNU time wrote it; else our child's ``ru_maxrss``.

    The fallback is an upper bound: Linux starts a spawned child's peak at
    this (benchmark) process's RSS, since the child shares its memory until it
    execs, so a small run would show the benchmark's own size.
    """
    lines = [ln for ln in time_output.splitlines() if ln.strip()]
    if lines and lines[-1].strip().isdigit():
        return float(lines[-1])
    return float(usage.ru_maxrss)


def _spawn(cmd: Sequence[str], out_fd: int, err_fd: int, env: dict[str, str] | None, cwd: Path) -> int:
    """Start ``cmd`` in a new session (so a kill of its group reaches only what we
    started); we reap it ourselves with ``wait4`` to get its own rusage."""
    exe = shutil.which(cmd[0])
    if exe is None:
        raise FileNotFoundError(f"{cmd[0]}: not found")
    here = os.getcwd()
    os.chdir(cwd)  # posix_spawn has no cwd argument
    try:
        return os.posix_spawn(
            exe,
            list(cmd),
            dict(os.environ) if env is None else env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_fd, 1),
                (os.POSIX_SPAWN_DUP2, err_fd, 2),
            ],
            setsid=True,
        )
    finally:
        os.chdir(here)


def _wait(pid: int, deadline: float) -> tuple[bool, int, resource.struct_rusage]:
    """Wait for ``pid`` until ``deadline``; then SIGKILL its process group."""
    delay = 0.002
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid == pid:
            return False, status, usage
        if time.perf_counter() >= deadline:
            os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return True, status, usage
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _classify(timed_out: bool, rc: int, stderr: str) -> str:
    """How a run ended: a SIGKILL we did not send is the kernel's OOM killer."""
    if timed_out:
        return "timeout"
    low = stderr.lower()
    if rc == -signal.SIGKILL or any(s in low for s in ("out of memory", "memoryerror", "cannot allocate memory")):
        return "OOM"
    return "done" if rc in (0, 1, 2) else "error"


def _last_json_line(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    return {}


def leasecheck_cmd(path: Path, budget: float | None) -> list[str]:
    """The command that checks ``path`` with ``check_source`` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "bench.lc_run", str(path)]
    if budget is not None:
        cmd += ["--budget", str(budget)]
    return cmd


def compile_bytecode() -> None:
    """Write the ``.pyc`` files of leasecheck's modules, as ``pip install`` does, before anything is timed.

    An editable install (and a shell with ``PYTHONDONTWRITEBYTECODE`` set, as
    this project's CI machines have) never writes them, so every ``leasecheck``
    process would compile its modules from source: ~0.06 s of start-up that a
    user's installed copy does not pay.
    """
    import compileall
    import importlib

    for name in ("leasecheck", "leasecheck.checker", "leasecheck.histories", "leasecheck.targets", "leasecheck.nemesis"):
        for folder in importlib.import_module(name).__path__:
            compileall.compile_dir(folder, maxlevels=0, quiet=1)


def leasecheck_cli() -> list[str]:
    """The ``leasecheck`` a user runs: the console script of this interpreter's install
    (not a version manager's shim in front of it, which would add its own start-up)."""
    script = Path(sys.executable).parent / "leasecheck"
    if script.exists():
        return [str(script)]
    found = shutil.which("leasecheck")
    return [found] if found else [sys.executable, "-m", "leasecheck"]


def leasecheck_check_cmd(path: Path, budget: float | None, extra: Sequence[str] = ()) -> list[str]:
    """``leasecheck check --json PATH``: the whole process, start-up to verdict (``extra``: more options)."""
    cmd = [*leasecheck_cli(), "check", "--json"]
    if budget is not None:
        cmd += ["--budget", f"{budget:g}"]
    return [*cmd, *extra, str(path)]


# -- reporting ---------------------------------------------------------------


def _cpu_busy(interval: float = 1.0) -> float:
    """Fraction of all cores busy over ``interval`` (from /proc/stat): unlike the
    load average, it does not remember the benchmark's own previous run."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(interval)
    total1, idle1 = sample()
    return 1 - (idle1 - idle0) / max(total1 - total0, 1)


def machine_note() -> str:
    """One line on the machine's state: other work on it makes every figure slower."""
    try:
        busy = _cpu_busy()
    except OSError:
        return f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"
    note = f"{os.cpu_count()} cores, {busy:.0%} busy before the run, Python {sys.version.split()[0]}"
    if busy > 0.1:
        note += "  (WARNING: other work is running; timings are inflated)"
    return note


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table, columns padded so it also reads well in a terminal."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def seconds(x: float) -> str:
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"
