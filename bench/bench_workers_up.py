"""How long ``leasecheck run`` takes to get its workers up: spawned, or forked from the run's zygote.

"Up" is the runner's barrier: from its log line ``starting N workers`` to ``all
N workers up``, i.e. until every worker process has made its backend client
and said hello (the run's clock starts only then). Each row is real runs (no
nemesis, ttl 1000 ms, a 0.5 s workload) against servers this script starts
itself, with the pool's start method switched between runs, interleaved so a
drifting machine hurts both alike:

- ``spawn``: each worker a fresh interpreter importing the workload and the
  backend's client library (psycopg, redis) itself — what the pool did before;
- ``forkserver``: one zygote per run imports them once and forks every worker
  (:mod:`leasecheck.run.zygote`); its own start is inside the measured time.

Next to each wall time, the CPU seconds it took: the harness's (every thread)
and its workers' and forkserver's (from /proc), which a busy machine inflates far
less than the wall time; on two idle cores the wall time is at least half of it.

Target (issue 13): 64 workers up in <= 3 s on 2 cores.

Usage: python -m bench.bench_workers_up [--concurrency 16,64] [--backends sqlite,postgres,redis] [--repeat 3]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_runner import _url_for, start_servers, stop_servers
from bench.harness import machine_note, table
from leasecheck.run.pool import WorkerPool
from leasecheck.run.runner import RunOptions, run
from leasecheck.run.workload_options import Workload
from leasecheck.servers.base import LocalServer

METHODS = ("spawn", "forkserver")
TARGET_S = 3.0  # 64 workers


def _worker_cpu_s() -> float:
    """CPU seconds used so far by this process's multiprocessing descendants (workers, forkserver), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid = int(stat.parent.name)
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
    total_ns = 0
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes()
            if b"multiprocessing" in cmdline and b"resource_tracker" not in cmdline:
                total_ns += int((Path("/proc") / str(pid) / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total_ns / 1e9


class _Marks(logging.Handler):
    """The runner's "starting N workers" and "all N workers up" log lines, timed; CPU spent in between."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("starting ") and text.endswith(" workers"):
            self.marks["starting"] = record.created
            self.marks["cpu_starting"] = time.process_time() + _worker_cpu_s()
        elif text.startswith("all ") and "workers up" in text:
            self.marks["up"] = record.created
            self.marks["cpu_up"] = time.process_time() + _worker_cpu_s()
        elif "zygote failed" in text:
            self.marks["fallback"] = record.created


def workers_up(backend: str, workers: int, method: str, server: LocalServer | None, store: Path, seed: int) -> tuple[float, float]:
    """Seconds from starting ``workers`` workers with ``method`` to the last one's hello, in one real run, and the
    CPU seconds that took (the harness's, every thread, and the workers' and forkserver's)."""
    opts = RunOptions(
        target=backend, url=_url_for(backend, server), nemesis=(), time_limit=0.5, concurrency=workers, ttl_ms=1000,
        seed=seed, store=str(store), workload=Workload(crash_rate=0.0, stall_rate=0.0),
    )
    handler = _Marks()
    logger = logging.getLogger("leasecheck.run")
    logger.addHandler(handler)
    WorkerPool.start_method = method
    try:
        run(opts)
    finally:
        WorkerPool.start_method = "forkserver"
        logger.removeHandler(handler)
    if "fallback" in handler.marks:
        raise RuntimeError(f"{backend} x{workers}: the zygote failed and the pool spawned instead (see leasecheck.log)")
    m = handler.marks
    return m["up"] - m["starting"], m["cpu_up"] - m["cpu_starting"]


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_workers_up", description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", default="16,64", help="worker counts")
    p.add_argument("--backends", default="sqlite,postgres,redis")
    p.add_argument("--repeat", type=int, default=3, help="runs per start method and row (min / median / max shown)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    backends = _csv(a.backends)
    print("leasecheck run: seconds from starting the workers to the last one's hello (spawn vs forked from the zygote)")
    print(machine_note())
    servers = start_servers(backends)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-up-") as work:
        try:
            for b in backends:
                for n in map(int, _csv(a.concurrency)):
                    times: dict[str, list[float]] = {m: [] for m in METHODS}
                    cpu: dict[str, list[float]] = {m: [] for m in METHODS}
                    for i in range(a.repeat):
                        for m in METHODS:
                            t0 = time.monotonic()
                            wall, used = workers_up(b, n, m, servers[b], Path(work), a.seed + i)
                            times[m].append(wall)
                            cpu[m].append(used)
                            print(f"  {b} x{n} {m}: {wall:.2f} s up, {used:.2f} s CPU (run {time.monotonic() - t0:.1f} s)",
                                  file=sys.stderr, flush=True)
                    spawn, fork = (statistics.median(times[m]) for m in METHODS)
                    rows.append([
                        b, n, *(f"{min(times[m]):.2f} / {statistics.median(times[m]):.2f} / {max(times[m]):.2f}" for m in METHODS),
                        f"{spawn / fork:.1f}x", *(f"{statistics.median(cpu[m]):.2f}" for m in METHODS),
                        ("yes" if max(times["forkserver"]) <= TARGET_S else "NO") if n == 64 else "",
                    ])
        finally:
            stop_servers(servers)
    print()
    print(f"Workers up: wall seconds (min / median / max of {a.repeat}), and CPU seconds it took (median)")
    print(table(["backend", "workers", "spawn", "forkserver", "speed-up", "spawn CPU", "forkserver CPU",
                 f"64 in <= {TARGET_S:g} s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
