"""What the power-loss layer costs a store: ops per second on a plain folder and on the layer, side by side.

Each row is one store and durability profile (:mod:`leasecheck.targets.durability`), run twice in this one process,
interleaved (plain, layer, plain, layer ... ``--repeat`` times, the best of each kept, so a drifting machine hurts
both alike):

- redis: ``--ops`` SETs from one client, each waiting for its reply, on a redis-server started by
  :class:`~leasecheck.servers.redis.RedisServer` in a plain folder, or on :func:`~leasecheck.servers.powerfs_layer.on_powerfs`;
- sqlite: ``--ops`` one-row transactions, each committed, on a file in a plain folder or in the layer's mount.

The plain folder is on the same disk as the layer's backing folder, and the layer passes a program's fsync through
to it (``PageCache(sync_backing=True)``): the difference is the cost of FUSE and of a Python file system.

``--runs``: what the layer costs a whole default run instead: ``leasecheck run --target redis --nemesis kill-store``
(durable, ``--time-limit`` seconds, one seed), once on a plain folder and once with the same server on the layer
(the run's own :func:`~leasecheck.run.environment.prepare` told to mount it, as a ``power-loss`` run's is), interleaved
``--repeat`` times; the ops each run recorded (``stats.ops`` of its results.json) side by side. The issue's bar: the
layer costs a default run at most 15 % of its ops.

Usage: python -m bench.bench_powerfs [--ops 5000] [--repeat 3] [--stores redis,sqlite]
       python -m bench.bench_powerfs --runs [--time-limit 20] [--repeat 3] [--seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench.harness import machine_note, table
from leasecheck.servers.powerfs_layer import PowerLayer, on_powerfs
from leasecheck.servers.redis import RedisServer
from leasecheck.targets.durability import SQLITE

PROFILES = ("durable", "fast")


def redis_sets(folder: Path, profile: str, ops: int, layer: bool) -> float:
    """Ops per second of ``ops`` SETs on a fresh redis-server in ``folder`` (on the layer if ``layer``)."""
    server = RedisServer(folder / "redis", profile=profile)
    if layer:
        on_powerfs(server)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        start = time.perf_counter()
        for i in range(ops):
            client.set(f"k{i}", i)
        elapsed = time.perf_counter() - start
        client.close()
    finally:
        server.stop()
        server.cleanup()
    return ops / elapsed


def sqlite_inserts(folder: Path, profile: str, ops: int, layer: bool) -> float:
    """Ops per second of ``ops`` committed one-row inserts on a fresh SQLite file in ``folder`` (in a layer's mount)."""
    mount = PowerLayer(folder / "disk", folder / "mnt", folder / "ctl.sock", folder / "powerfs.log") if layer else None
    where = mount.mount().mount_point if mount is not None else folder
    try:
        db = sqlite3.connect(where / "bench.db", isolation_level=None)
        for pragma in SQLITE[profile]:
            db.execute(pragma)
        db.execute("CREATE TABLE t (i INTEGER)")
        start = time.perf_counter()
        for i in range(ops):
            db.execute("INSERT INTO t VALUES (?)", (i,))
        elapsed = time.perf_counter() - start
        db.close()
    finally:
        if mount is not None:
            mount.discard()
    return ops / elapsed


BENCHES: dict[str, Callable[[Path, str, int, bool], float]] = {"redis": redis_sets, "sqlite": sqlite_inserts}


def default_run(folder: Path, time_limit: float, seed: int, layer: bool) -> tuple[int, int, object]:
    """(ops, ok ops, verdict) of ``leasecheck run --target redis --nemesis kill-store`` in ``folder``, its server on
    the layer if ``layer``."""
    from unittest import mock

    from leasecheck.run import environment
    from leasecheck.run.options import RunOptions
    from leasecheck.run.runner import run

    prepare = environment.prepare

    def on_the_layer(*args: Any, **kwargs: Any) -> environment.Environment:
        return prepare(*args, **{**kwargs, "power_layer": True})

    opts = RunOptions(target="redis", nemesis=("kill-store",), time_limit=time_limit, seed=seed, store=str(folder))
    with mock.patch.object(environment, "prepare", on_the_layer) if layer else contextlib.nullcontext():
        result = run(opts)
    return int(result.stats["ops"]), int(result.stats["ok"]), result.verdict.valid


def runs(time_limit: float, repeat: int, seed: int) -> None:
    """Whole default runs, plain and on the layer, interleaved: their ops (and ok ops: a refused op is an op too, and a
    store that is down a little longer refuses more of them) side by side, and the layer's share of each."""
    ops: dict[bool, list[int]] = {False: [], True: []}
    oks: dict[bool, list[int]] = {False: [], True: []}
    verdicts: dict[bool, list[object]] = {False: [], True: []}
    for _ in range(repeat):
        for layer in (False, True):
            with tempfile.TemporaryDirectory(prefix="bench-powerfs-run-") as tmp:
                done, ok, valid = default_run(Path(tmp), time_limit, seed, layer)
            ops[layer].append(done)
            oks[layer].append(ok)
            verdicts[layer].append(valid)
    rows = [("plain folder" if not layer else "power-loss layer", time_limit, ", ".join(f"{n:,}" for n in ops[layer]),
             f"{statistics.mean(ops[layer]):,.0f}", ", ".join(f"{n:,}" for n in oks[layer]),
             f"{statistics.mean(oks[layer]):,.0f}", ", ".join(map(str, verdicts[layer]))) for layer in (False, True)]
    print(table(("redis server's folder", "time limit s", "ops of each run", "mean ops", "ok ops of each run",
                 "mean ok ops", "verdicts"), rows))
    for what, counts in (("ops", ops), ("ok ops", oks)):
        share = statistics.mean(counts[True]) / statistics.mean(counts[False])
        print(f"the layer keeps {share:.2f} of a default run's {what} (costs {1 - share:.0%}; the bar: at most 15 %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="redis,sqlite")
    parser.add_argument("--runs", action="store_true", help="whole default runs (kill-store) instead of single ops")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(machine_note())
    if args.runs:
        runs(args.time_limit, args.repeat, args.seed)
        return
    rows = []
    for store in args.stores.split(","):
        for profile in PROFILES:
            best = {False: 0.0, True: 0.0}
            for _ in range(args.repeat):
                for layer in (False, True):
                    with tempfile.TemporaryDirectory(prefix="bench-powerfs-") as tmp:
                        best[layer] = max(best[layer], BENCHES[store](Path(tmp), profile, args.ops, layer))
            rows.append((store, profile, args.ops, f"{best[False]:,.0f}", f"{best[True]:,.0f}",
                         f"{best[True] / best[False]:.2f}"))
    print(table(("store", "profile", "ops", "plain ops/s", "powerfs ops/s", "powerfs / plain"), rows))


if __name__ == "__main__":
    main()
