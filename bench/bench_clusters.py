"""How long each cluster kind ``--cluster`` names takes to start, beside one server of the same store.

A cluster's start is its members' namespaces and links, every member's servers, and the wait
until the cluster as a whole answers (a primary with every member following it: the readiness a
run's clients wait for). Its peer is the store's one server that a run without ``--cluster``
starts (:func:`leasecheck.frame.store_server.store_server`), timed the same way: from ``start()``
to ready. Each round starts one of each, interleaved, so a drifting machine hurts both alike;
the stop of each is timed too (a run pays it at its end).

Target (issue 23): every kind up in <= 10 s on 2 cores. A timed test was the wrong gate for it:
beside two CPU-bound jobs a Postgres standby pair once took 11.35 s, and the suite went red for
a figure, not a fault. The figure is this table's.

Usage (root: members run in network namespaces):
    python -m bench.bench_clusters [--kinds etcd-cluster,zookeeper-ensemble] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import machine_note, seconds, table
from leasecheck.frame.store_server import store_server
from leasecheck.run.clusters import CLUSTER_KINDS, CLUSTERS, ClusterKind

#: the start-up target of every cluster kind (issue 23), seconds
TARGET_S = 10.0


def _timed_single(kind: ClusterKind, folder: Path) -> tuple[float, float]:
    """(start, stop) seconds of one server of the kind's store."""
    folder.mkdir(mode=0o755)
    server = store_server(kind.store, folder)
    begun = time.monotonic()
    server.start()
    up = time.monotonic() - begun
    begun = time.monotonic()
    server.stop()
    down = time.monotonic() - begun
    server.cleanup()
    return up, down


def _timed_cluster(kind: ClusterKind, folder: Path) -> tuple[float, float]:
    """(start, stop) seconds of one cluster of the kind."""
    cluster = kind.load()(folder, ttl_ms=1000)
    begun = time.monotonic()
    try:
        cluster.start()
        up = time.monotonic() - begun
    finally:
        begun = time.monotonic()
        cluster.stop()
        down = time.monotonic() - begun
        cluster.cleanup()
    return up, down


def _spread(values: list[float]) -> str:
    return f"{seconds(statistics.median(values))} (max {seconds(max(values))})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(k.name for k in CLUSTER_KINDS), help="cluster kinds, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each starts one server and one cluster per kind")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_clusters: cluster members run in network namespaces: run as root", file=sys.stderr)
        return 2
    kinds = [CLUSTERS[name] for name in args.kinds.split(",") if name]
    print(machine_note())
    single: dict[str, list[tuple[float, float]]] = {k.name: [] for k in kinds}
    clustered: dict[str, list[tuple[float, float]]] = {k.name: [] for k in kinds}
    for _ in range(args.repeat):
        for kind in kinds:
            # under /tmp, not a user's folder: the postgres user a member runs as must enter it
            with tempfile.TemporaryDirectory(prefix="leasecheck-bench-clusters-") as folder:
                os.chmod(folder, 0o755)
                single[kind.name].append(_timed_single(kind, Path(folder) / "single"))
                clustered[kind.name].append(_timed_cluster(kind, Path(folder) / "cluster"))
    rows = []
    for kind in kinds:
        ups = [up for up, _ in clustered[kind.name]]
        rows.append([kind.name, kind.store, _spread([up for up, _ in single[kind.name]]), _spread(ups),
                     _spread([down for _, down in single[kind.name]]), _spread([down for _, down in clustered[kind.name]]),
                     "yes" if max(ups) <= TARGET_S else "NO"])
    print(table(["cluster", "store", "one server up, s", "cluster up, s", "one server down, s", "cluster down, s",
                 f"up <= {TARGET_S:g} s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
