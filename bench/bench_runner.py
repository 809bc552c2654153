"""How fast ``leasecheck run`` drives a store, and what recording every op costs.

Two tables, each from real runs (no nemesis, ttl 1000 ms) against servers this
script starts itself with :mod:`leasecheck.servers`:

1. recorded ops/s per backend (sqlite, postgres, redis) at 4, 16 and 64
   worker processes;
2. the recorder's overhead: the same runs at 16 workers with recording on and
   off (``RunOptions(record=False)``: workers neither stamp, log nor send their
   invokes and completions), ops/s side by side. Target: < 10 %.

How ops are counted. The runner's tally counts recorded ops as they complete
and, with recording off, only when each worker reports at exit; both include
the start-up ramp (64 workers forked from the run's forkserver take one to
two seconds on 2 cores) and the wind-down. So the headline
figure is the *steady* rate: each worker process stamps every backend op it
completes (a thin subclass of the backend, identical with recording on and
off); once every worker has made its first op, the bench lets the run go on
for ``--seconds`` and then ends it as Ctrl-C would (heal, wind down, final
reads, check), and the rate is the ops completed in that window divided by
its length. The tally's figure (its ops / seconds from the start of the run to
the end of the window) is printed next to it as a cross-check, and so is the
harness process's own CPU in the window (recorder thread, producer, main
loop), in cores: on 2 cores it competes with the workers and the store.

The workload is the seed's (claim, effects, heartbeats, commit / release,
reads), with ``exec_scale`` 0 by default — claim, effects and commit back to
back, so the figures are the store's and the harness's speed, not the
simulated work's sleeps — and no crashes (``crash_rate`` 0: a crashed worker
could not report its ops with recording off, and its replacement's start-up
would blur the window). ``--exec-scale 1`` measures the seed's pacing instead.

Usage: python -m bench.bench_runner [--seconds 10] [--concurrency 4,16,64]
       [--backends sqlite,postgres,redis] [--overhead-concurrency 16] [--repeat 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import multiprocessing.util
import os
import statistics
import sys
import tempfile
import time
import uuid
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import machine_note, table
from leasecheck.run.runner import RunOptions, run
from leasecheck.run.workload_options import Workload
from leasecheck.servers.base import LocalServer
from leasecheck.targets.postgres_lease import PostgresLease
from leasecheck.targets.redis_lease import RedisLease
from leasecheck.targets.sqlite_lease import SqliteLease

#: the folder each worker writes its op stamps into (set by this script, inherited by spawned workers)
STAMPS_ENV = "LEASECHECK_BENCH_STAMPS"
OVERHEAD_TARGET = 10.0  # %

# -- counting backends ---------------------------------------------------------------------------

_stamps = array("d")
_registered = False


def _dump() -> None:
    folder = os.environ.get(STAMPS_ENV)
    if folder and _stamps:
        with open(Path(folder) / f"{os.getpid()}.stamps", "wb") as f:
            _stamps.tofile(f)


class _Stamping:
    """Stamps the completion of every backend op a *worker* runs (not the producer's, nor the final reads)."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)  # type: ignore[call-arg]
        global _registered
        if not _registered and multiprocessing.current_process().name.startswith("leasecheck-worker"):
            # run by the worker process's normal exit (spawned workers skip atexit)
            multiprocessing.util.Finalize(None, _dump, exitpriority=10)
            _registered = True

    def _stamped(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        finally:
            _stamps.append(time.monotonic())
            if len(_stamps) == 1 and _registered:  # tell the bench this worker is up
                (Path(os.environ[STAMPS_ENV]) / f"{os.getpid()}.ready").touch()

    def try_claim(self, node: str, owner: str) -> Any:
        return self._stamped(super().try_claim, node, owner)  # type: ignore[misc]

    def renew(self, lease: Any) -> Any:
        return self._stamped(super().renew, lease)  # type: ignore[misc]

    def effect(self, lease: Any, payload: str) -> Any:
        return self._stamped(super().effect, lease, payload)  # type: ignore[misc]

    def commit(self, lease: Any, result: str) -> Any:
        return self._stamped(super().commit, lease, result)  # type: ignore[misc]

    def release(self, lease: Any) -> Any:
        return self._stamped(super().release, lease)  # type: ignore[misc]

    def read(self, node: str) -> Any:
        return self._stamped(super().read, node)  # type: ignore[misc]


class StampingSqlite(_Stamping, SqliteLease):
    name = "bench-sqlite"


class StampingPostgres(_Stamping, PostgresLease):
    name = "bench-postgres"


class StampingRedis(_Stamping, RedisLease):
    name = "bench-redis"


TARGETS = {"sqlite": StampingSqlite, "postgres": StampingPostgres, "redis": StampingRedis}

# -- one measured run ----------------------------------------------------------------------------


@dataclass
class Measured:
    backend: str
    workers: int
    record: bool
    steady_ops_s: float
    window_s: float
    stamped_ops: int
    tally_ops: int
    tally_ops_s: float
    verdict: str
    startup_s: float
    #: the harness process's CPU (recorder, producer, main loop) per second of the window, in cores
    harness_cpu: float


def _url_for(backend: str, server: LocalServer | None) -> str | None:
    """A fresh, empty store for one run (runs name their nodes run-N/node-I, so they must not share one)."""
    if server is None:
        return None  # sqlite: the runner makes a fresh file in its run directory
    if backend == "postgres":
        import psycopg

        name = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return server.url.rsplit("/", 1)[0] + "/" + name
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        client.flushall()
    finally:
        client.close()
    return server.url


class RunLost(RuntimeError):
    """A run that cannot be measured: a worker's stamps are missing (it was killed at the wind-down), or it ended early."""


def measure_again(*args: Any, attempts: int = 3) -> Measured:
    """:func:`measure`, again if a run was lost, up to ``attempts`` runs (each loss said on stderr: a lost
    run is an outlier, not a figure: a worker that does not exit within the wind-down's grace is killed
    and its stamps are lost)."""
    for attempt in range(1, attempts + 1):
        try:
            return measure(*args)
        except RunLost as e:
            if attempt == attempts:
                raise
            print(f"  lost, measured again: {e}", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def measure(backend: str, workers: int, record: bool, seconds: float, exec_scale: float, server: LocalServer | None,
            store: Path, seed: int) -> Measured:
    """One run: ``seconds`` of steady load once every worker is up, then wound down like a Ctrl-C."""
    cls = TARGETS[backend]
    opts = RunOptions(
        target=f"{__name__}:{cls.__name__}", url=_url_for(backend, server), nemesis=(), time_limit=600.0,
        concurrency=workers, ttl_ms=1000, seed=seed, store=str(store), record=record, check_budget=30.0,
        workload=Workload(crash_rate=0.0, exec_scale=exec_scale, stall_rate=0.0),  # throughput, not detection: no deliberate stalls
    )
    stamps_dir = Path(tempfile.mkdtemp(prefix="bench-stamps-", dir=store))
    os.environ[STAMPS_ENV] = str(stamps_dir)
    marks: dict[str, float] = {}

    def progress(_: dict[str, Any]) -> None:
        # the runner calls this from its loop every <= 0.2 s; a KeyboardInterrupt there ends the
        # workload exactly as Ctrl-C does (heal, wind down, final reads, check)
        now = time.monotonic()
        if "up" not in marks:
            if sum(1 for _ in stamps_dir.glob("*.ready")) >= workers:
                marks["up"], marks["cpu_up"] = now, _cpu()
        elif now >= marks["up"] + seconds:
            marks["end"], marks["cpu_end"] = now, _cpu()
            raise KeyboardInterrupt

    t0 = time.monotonic()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the runner's "interrupted: ..." line
            result = run(opts, progress)
    finally:
        del os.environ[STAMPS_ENV]
    per_worker = []
    for f in stamps_dir.glob("*.stamps"):
        a = array("d")
        a.frombytes(f.read_bytes())
        per_worker.append(a)
    if "end" not in marks or len(per_worker) < workers:
        log = result.run_dir / "leasecheck.log"
        said = [ln.split(" ", 3)[-1] for ln in log.read_text().splitlines() if "died" in ln or "did not exit" in ln] if log.exists() else []
        raise RunLost(f"{backend} x{workers}: {len(per_worker)} of {workers} workers reported their stamps"
                      f"{'' if 'end' in marks else ', and the run ended before the window'}"
                      f"{': ' + '; '.join(said[:3]) if said else ''}")
    start = max(a[0] for a in per_worker)  # the last worker's first op
    end = marks["end"]
    window = end - start
    in_window = sum(1 for a in per_worker for t in a if start <= t <= end)
    stats = result.stats
    valid = result.verdict.valid
    return Measured(
        backend, workers, record, in_window / window, window,
        sum(len(a) for a in per_worker), stats["ops"], stats["ops"] / (end - t0),
        {True: "valid", False: "INVALID"}.get(valid, str(valid)) if record else "(not recorded)",  # type: ignore[call-overload]
        start - t0, (marks["cpu_end"] - marks["cpu_up"]) / (marks["end"] - marks["up"]),
    )


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


# -- servers -------------------------------------------------------------------------------------


def start_servers(backends: list[str]) -> dict[str, LocalServer | None]:
    servers: dict[str, LocalServer | None] = {}
    for b in backends:
        if b == "postgres":
            from leasecheck.servers.postgres import PostgresServer

            servers[b] = PostgresServer().start()
        elif b == "redis":
            from leasecheck.servers.redis import RedisServer

            servers[b] = RedisServer().start()
        else:
            servers[b] = None
    return servers


def stop_servers(servers: dict[str, LocalServer | None]) -> None:
    for s in servers.values():
        if s is not None:
            s.stop()
            s.cleanup()


# -- main ----------------------------------------------------------------------------------------


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_runner", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="steady seconds per run (after the workers start)")
    p.add_argument("--concurrency", default="4,16,64", help="worker counts for the throughput table")
    p.add_argument("--backends", default="sqlite,postgres,redis")
    p.add_argument("--overhead-concurrency", type=int, default=16)
    p.add_argument("--repeat", type=int, default=1, help="recorded/unrecorded pairs per backend (median is shown)")
    p.add_argument("--exec-scale", type=float, default=0.0, help="Workload.exec_scale (0: no simulated work)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-overhead", action="store_true")
    a = p.parse_args(argv)
    backends = _csv(a.backends)
    unknown = set(backends) - set(TARGETS)
    if unknown:
        p.error(f"unknown backend(s) {', '.join(sorted(unknown))} (known: {', '.join(TARGETS)})")

    print(f"leasecheck run throughput: no nemesis, ttl 1000 ms, exec_scale {a.exec_scale:g}, crash_rate 0, "
          f"{a.seconds:g} s steady per run")
    print(machine_note())
    servers = start_servers(backends)
    work = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    try:
        if not a.skip_throughput:
            rows = []
            for b in backends:
                for n in map(int, _csv(a.concurrency)):
                    m = measure_again(b, n, True, a.seconds, a.exec_scale, servers[b], work, a.seed)
                    print(f"  {b} x{n}: {m.steady_ops_s:,.0f} ops/s steady ({m.verdict})", file=sys.stderr, flush=True)
                    rows.append([
                        b, n, f"{m.steady_ops_s:,.0f}", f"{m.steady_ops_s / n:,.0f}", f"{m.window_s:.1f}",
                        f"{m.tally_ops:,}", f"{m.tally_ops_s:,.0f}", f"{m.startup_s:.1f}", f"{m.harness_cpu:.2f}", m.verdict,
                    ])
            print()
            print("Recorded ops/s (every op through the recorder into history.jsonl)")
            print(table(
                ["backend", "workers", "ops/s steady", "per worker", "window s", "ops (tally)", "ops/s (tally)",
                 "start-up s", "harness cores", "verdict"], rows,
            ))
        if not a.skip_overhead:
            rows = []
            n = a.overhead_concurrency
            for b in backends:
                on: list[Measured] = []
                off: list[Measured] = []
                for _ in range(a.repeat):  # interleaved, so a drifting machine hurts both alike
                    on.append(measure_again(b, n, True, a.seconds, a.exec_scale, servers[b], work, a.seed))
                    off.append(measure_again(b, n, False, a.seconds, a.exec_scale, servers[b], work, a.seed))
                r_on = statistics.median(m.steady_ops_s for m in on)
                r_off = statistics.median(m.steady_ops_s for m in off)
                overhead = 100.0 * (r_off - r_on) / r_off
                t_on = statistics.median(m.tally_ops_s for m in on)
                t_off = statistics.median(m.tally_ops_s for m in off)
                c_on = statistics.median(m.harness_cpu for m in on)
                c_off = statistics.median(m.harness_cpu for m in off)
                print(f"  {b} x{n}: recorded {r_on:,.0f}, unrecorded {r_off:,.0f} ops/s", file=sys.stderr, flush=True)
                rows.append([
                    b, n, f"{r_on:,.0f}", f"{r_off:,.0f}", f"{overhead:+.1f} %",
                    f"{t_on:,.0f}", f"{t_off:,.0f}", f"{100.0 * (t_off - t_on) / t_off:+.1f} %" if t_off else "n/a",
                    f"{c_on:.2f} / {c_off:.2f}",
                    f"{'yes' if overhead < OVERHEAD_TARGET else 'NO'}",
                ])
            print()
            print(f"Recorder overhead at {n} workers (steady ops/s; median of {a.repeat})")
            print(table(
                ["backend", "workers", "recorded", "unrecorded", "overhead", "tally rec.", "tally unrec.",
                 "tally overhead", "harness cores rec./unrec.", f"< {OVERHEAD_TARGET:g} %"], rows,
            ))
    finally:
        stop_servers(servers)
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
