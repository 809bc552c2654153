"""How fast leasecheck checks a million-operation valid history, and how it scales.

The target (docs/background.md: the search must be the fallback, not the rule) is a
1,000,000-op history of 16 workers over 100 nodes per run checked in at most
10 s of wall time on this 2-core machine, parsing included. The history comes
from ``bench.gen`` (a correct store, so the verdict must be ``valid``: anything
else is a checker bug, and this script exits 1 and prints the anomalies).

``--scale`` checks real-shaped histories (``bench.gen --shape real``) of 1 M,
3 M and 10 M workload ops with ``leasecheck check --json``, the whole process,
and shows wall time and peak RSS per size and per million ops: is the time
linear in ops, and does the memory stay flat (issue 13: 10 M ops in <= 2 GB,
1 M in <= 5 s)?

Usage: python -m bench.bench_checker [--ops 1000000] [--workers 16] [--nodes 100] [--repeat 3]
       python -m bench.bench_checker --scale [--sizes 1000000,3000000,10000000] [--repeat 1] [--lc-args "--jobs 2"]
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.gen import Config, GenStats
from bench.harness import (
    Measured,
    cached_history,
    compile_bytecode,
    leasecheck_check_cmd,
    leasecheck_cmd,
    machine_note,
    run_measured,
    seconds,
    table,
)

TARGET_SECONDS = 10.0
#: issue 13's targets for real-shaped histories, whole process
SCALE_TARGET_1M_SECONDS = 5.0
SCALE_TARGET_10M_RSS_MB = 2048.0
SCALE_SIZES = "1000000,3000000,10000000"


def measure(path: Path, budget: float | None, timeout: float, repeat: int) -> list[Measured]:
    """Check ``path`` ``repeat`` times, each in a fresh interpreter."""
    return [run_measured(leasecheck_cmd(path, budget), timeout=timeout) for _ in range(repeat)]


def verdict_of(m: Measured) -> str:
    if m.status != "done":
        return m.status
    v = m.output.get("valid")
    return "valid" if v is True else "invalid" if v is False else str(v)


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


@dataclass(slots=True)
class ScaleRow:
    """One size of the scaling table: the history and every run of the checker on it."""

    cfg: Config
    gen: GenStats
    path: Path
    runs: list[Measured]

    @property
    def wall(self) -> float:
        return statistics.median(m.wall for m in self.runs)

    @property
    def rss_mb(self) -> float:
        return max(m.maxrss_mb for m in self.runs)

    @property
    def mops(self) -> float:
        return self.gen.ops / 1e6


def scale_rows(sizes: Sequence[int], seed: int, lc_args: Sequence[str], timeout: float, mem: int, repeat: int) -> list[ScaleRow]:
    rows = []
    for n in sizes:
        cfg = Config(n, 16, 20, 0.01, seed, clock_uncertainty_ms=10, shape="real")
        path, gen = cached_history(cfg)
        print(f"history: {path} ({gen.ops:,} ops, {gen.nodes:,} nodes, {gen.events:,} events)", flush=True)
        cmd = leasecheck_check_cmd(path, None, lc_args)
        runs = [run_measured(cmd, timeout=timeout, mem_limit_bytes=mem) for _ in range(repeat)]
        rows.append(ScaleRow(cfg, gen, path, runs))
        print(f"  {seconds(rows[-1].wall)} s, {rows[-1].rss_mb:.0f} MB, {verdict_of(runs[0])}", file=sys.stderr, flush=True)
    return rows


def scale_report(rows: list[ScaleRow]) -> str:
    """The table, with time and memory per million ops against the smallest size's."""
    base = rows[0]
    body = []
    for r in rows:
        per_s = r.wall / r.mops
        per_mb = r.rss_mb / r.mops
        targets = []
        if r.cfg.ops == 1_000_000:
            targets.append(f"1 M <= {SCALE_TARGET_1M_SECONDS:.0f} s: {'yes' if r.wall <= SCALE_TARGET_1M_SECONDS else 'NO'}")
        if r.cfg.ops == 10_000_000:
            targets.append(f"10 M <= 2 GB: {'yes' if r.rss_mb <= SCALE_TARGET_10M_RSS_MB else 'NO'}")
        body.append(
            [
                f"{r.cfg.ops:,}",
                f"{r.gen.ops:,}",
                f"{r.gen.nodes:,}",
                f"{r.path.stat().st_size / 2**20:,.0f}",
                verdict_of(r.runs[0]) if all(verdict_of(m) == verdict_of(r.runs[0]) for m in r.runs) else "MIXED",
                seconds(r.wall),
                f"{per_s:.2f}",
                f"{per_s / (base.wall / base.mops):.2f}x",
                f"{r.rss_mb:,.0f}",
                f"{per_mb:,.0f}",
                ", ".join(targets),
            ]
        )
    headers = [
        "workload ops", "ops in file", "nodes", "file MB", "verdict", "wall s", "s per M ops",
        "vs smallest", "peak RSS MB", "MB per M ops", "targets",
    ]  # fmt: skip
    return table(headers, body)


def scale_main(a: argparse.Namespace) -> int:
    sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
    repeat = a.repeat if a.repeat_given else 1
    print(f"machine: {machine_note()}")
    lc_args = shlex.split(a.lc_args)
    print(f"leasecheck: {shlex.join(leasecheck_check_cmd(Path('HISTORY'), None, lc_args))}", flush=True)
    rows = scale_rows(sizes, a.seed, lc_args, a.timeout, int(a.mem_gb * 2**30), repeat)
    print()
    print(scale_report(rows))
    print(
        f"\nwall s: median of {repeat} run(s) of a fresh `leasecheck check --json`, start-up to verdict; peak RSS: the "
        "largest ru_maxrss; vs smallest: seconds per million ops against the first size's (1.00x: linear)."
    )
    bad = [(r, m) for r in rows for m in r.runs if verdict_of(m) != "valid"]
    for r, m in bad:
        print(f"\nBUG or limit: a valid history was not reported valid ({verdict_of(m)}): {r.path}", file=sys.stderr)
        print(m.stderr_tail, file=sys.stderr)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_checker", description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=1_000_000)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--crash-rate", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=None, help="runs to take the median of (3; --scale: 1)")
    p.add_argument("--budget", type=float, default=None, help="check_source budget (default: the checker's)")
    p.add_argument("--timeout", type=float, default=None, help="kill a run after this many seconds (300; --scale: 1800)")
    p.add_argument("--scale", action="store_true", help="real-shaped histories of --sizes ops, `leasecheck check --json`")
    p.add_argument("--sizes", default=SCALE_SIZES, help="--scale: workload ops per history, comma-separated")
    p.add_argument("--mem-gb", type=float, default=16, help="--scale: address-space cap per run")
    p.add_argument("--lc-args", default="", help='--scale: more options for `leasecheck check`, e.g. "--jobs 2"')
    a = p.parse_args(argv)
    a.repeat_given = a.repeat is not None
    compile_bytecode()
    if a.scale:
        a.timeout = 1800 if a.timeout is None else a.timeout
        return scale_main(a)
    a.repeat = 3 if a.repeat is None else a.repeat
    a.timeout = 300 if a.timeout is None else a.timeout

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
