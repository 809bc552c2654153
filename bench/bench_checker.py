"""How fast leasecheck checks a million-operation valid history.

The target (DESIGN.md: the search must be the fallback, not the rule) is a
1,000,000-op history of 16 workers over 100 nodes per run checked in at most
10 s of wall time on this 2-core machine, parsing included. The history comes
from ``bench.gen`` (a correct store, so the verdict must be ``valid``: anything
else is a checker bug, and this script exits 1 and prints the anomalies).

Usage: python -m bench.bench_checker [--ops 1000000] [--workers 16] [--nodes 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench.gen import Config
from bench.harness import Measured, cached_history, leasecheck_cmd, machine_note, run_measured, seconds, table

TARGET_SECONDS = 10.0


def measure(path: Path, budget: float | None, timeout: float, repeat: int) -> list[Measured]:
    """Check ``path`` ``repeat`` times, each in a fresh interpreter."""
    return [run_measured(leasecheck_cmd(path, budget), timeout=timeout) for _ in range(repeat)]


def verdict_of(m: Measured) -> str:
    if m.status != "done":
        return m.status
    v = m.output.get("valid")
    return {True: "valid", False: "invalid"}.get(v, str(v))


def report(path: Path, cfg: Config, nodes_total: int, runs: list[Measured]) -> str:
    walls = [m.wall for m in runs]
    best = min(runs, key=lambda m: m.wall)
    rows = [
        [
            f"{cfg.ops:,}",
            cfg.workers,
            f"{cfg.nodes} ({nodes_total:,})",
            f"{cfg.crash_rate:.0%}",
            f"{path.stat().st_size / 2**20:.0f}",
            verdict_of(best),
            seconds(statistics.median(walls)),
            seconds(min(walls)),
            seconds(best.output.get("seconds", float("nan"))),
            f"{max(m.maxrss_mb for m in runs):.0f}",
            f"<= {TARGET_SECONDS:.0f} s: {'yes' if statistics.median(walls) <= TARGET_SECONDS else 'NO'}",
        ]
    ]
    headers = [
        "ops", "workers", "nodes/run (total)", "crashed", "file MB", "verdict",
        "wall s (median)", "wall s (best)", "check_source s", "peak RSS MB", "target",
    ]  # fmt: skip
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_checker", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=1_000_000)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--crash-rate", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3, help="runs to take the median of")
    p.add_argument("--budget", type=float, default=None, help="check_source budget (default: the checker's)")
    p.add_argument("--timeout", type=float, default=300, help="kill a run after this many seconds")
    a = p.parse_args(argv)

    cfg = Config(a.ops, a.workers, a.nodes, a.crash_rate, a.seed)
    path, gen = cached_history(cfg)
    print(f"history: {path} ({gen.ops:,} ops, {gen.events:,} events, generated in {gen.seconds:.1f} s)")
    print(f"machine: {machine_note()}")
    runs = measure(path, a.budget, a.timeout, a.repeat)
    print()
    print(report(path, cfg, gen.nodes, runs))
    bad = [m for m in runs if verdict_of(m) != "valid"]
    for m in bad:
        print(f"\nBUG: a valid history was not reported valid ({verdict_of(m)}): {path}", file=sys.stderr)
        for an in m.output.get("anomalies", []):
            print(f"  {an}", file=sys.stderr)
        if m.stderr_tail:
            print(m.stderr_tail, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
