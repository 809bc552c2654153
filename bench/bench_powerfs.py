"""What the power-loss layer costs a store: ops per second on a plain folder and on the layer, side by side.

Each row is one store and durability profile (:mod:`leasecheck.targets.durability`), run twice in this one process,
interleaved (plain, layer, plain, layer ... ``--repeat`` times, the best of each kept, so a drifting machine hurts
both alike):

- redis: ``--ops`` SETs from one client, each waiting for its reply, on a redis-server started by
  :class:`~leasecheck.servers.redis.RedisServer` in a plain folder, or on :func:`~leasecheck.servers.powerfs_layer.on_powerfs`;
- sqlite: ``--ops`` one-row transactions, each committed, on a file in a plain folder or in the layer's mount.

The plain folder is on the same disk as the layer's backing folder, and the layer passes a program's fsync through
to it (``PageCache(sync_backing=True)``): the difference is the cost of FUSE and of a Python file system.

Usage: python -m bench.bench_powerfs [--ops 5000] [--repeat 3] [--stores redis,sqlite]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="redis,sqlite")
    args = parser.parse_args()
    print(machine_note())
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
