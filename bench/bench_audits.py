"""How well and how fast the queue audits catch what they publish: per library, mode and fault, 10 seeds.

For every audited job queue (``leasecheck audit queues``) and each fault of each
plan, this runs the plan's run once per seed (``--seeds``, default 1-10) and
prints, side by side: the runs whose verdict was the published one, the runs
caught (invalid), the median seconds from the history's first op to the proof of
the first anomaly, and the median wall seconds per run (the issue's bound: 30 s
each). The last line is the whole sweep's wall time (bound: 15 minutes for the
published seeds of every library). Figures go to the README's audit section and
to AUDITS.md, with this command.

Usage: python -m bench.bench_audits [--libraries rq,celery,...] [--seeds 1-10] [--store DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from leasecheck.auditing.audit import run_audit, select


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--libraries", default="queues", help="comma-separated queue names, or 'queues' for all")
    p.add_argument("--seeds", default="1-10")
    p.add_argument("--store", default=None)
    a = p.parse_args()
    seeds = _seeds(a.seeds)
    store = Path(a.store or tempfile.mkdtemp(prefix="bench-audits-"))
    chosen = [x for lib in a.libraries.split(",") for x in select(lib)]
    print(f"{'library':14} {'mode':11} {'fault':10} {'published':10} {'as published':>12} {'caught':>7} "
          f"{'first proof s':>13} {'run s':>6}")
    began = time.monotonic()
    for audited in chosen:
        for fault in audited.plan.faults:
            matched = caught = 0
            firsts: list[float] = []
            walls: list[float] = []
            for seed in seeds:
                t0 = time.monotonic()
                result = run_audit(audited.target, fault.nemesis, seed, store)
                walls.append(time.monotonic() - t0)
                matched += result.matches
                caught += result.verdict == "invalid"
                if result.first_anomaly_s is not None:
                    firsts.append(result.first_anomaly_s)
            first = f"{statistics.median(firsts):.1f}" if firsts else "-"
            print(f"{audited.plan.library:14} {audited.plan.mode:11} {fault.nemesis:10} {fault.expected:10} "
                  f"{matched:>9}/{len(seeds):<2} {caught:>4}/{len(seeds):<2} {first:>13} {statistics.median(walls):>6.1f}",
                  flush=True)
    print(f"whole sweep: {time.monotonic() - began:.0f} s wall")


if __name__ == "__main__":
    main()
