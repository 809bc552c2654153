"""How fast does each broken variant get caught? Time from the first fault to the first anomaly.

For each broken variant under the fault that exposes it, run ``leasecheck run``
with several seeds and read, from the history alone, the time of the first
nemesis fault and the time at which the first anomaly's proof was complete (the
latest completion among the ops it cites). Prints, side by side per variant,
the median detection time and the share of runs that caught it.

    python -m bench.bench_detection --seeds 5 --time-limit 60
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from leasecheck.histories import read_history
from leasecheck.runner import RunOptions, run
from leasecheck.targets.registry import load

#: variant -> (faults that expose it, duplicate-delivery rate)
VARIANTS = {
    "sqlite-ttl-only": ("pause", 0.1),
    "sqlite-non-atomic-claim": ("pause", 0.3),
    "postgres-fence-in-memory": ("pause", 0.1),
    "postgres-client-clock": ("clock-bump", 0.1),
    "redis-queue-as-authority": ("partition", 0.3),
    "redis-no-increment": ("pause,kill", 0.1),
}


def detection_seconds(run_dir: Path, verdict) -> float | None:
    """Seconds from the first fault to the completion of the first anomaly's last cited op."""
    _, ops, reader = read_history(run_dir / "history.jsonl")
    faults = [e.time for e in reader.nemesis if e.f not in ("resume", "start", "heal", "clock-reset")]
    if not verdict.anomalies or not faults:
        return None
    done = {op.index: (op.complete_time or op.invoke_time) for op in ops}
    proofs = [max(done[i] for i in a.ops if i in done) for a in verdict.anomalies if any(i in done for i in a.ops)]
    return max(0.0, (min(proofs) - faults[0]) / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--ttl", type=int, default=300)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="leasecheck-bench-") as store:
        for variant, (faults, dup) in VARIANTS.items():
            if args.only and variant not in args.only:
                continue
            expected = set(load(variant).expected)
            times, caught, kinds = [], 0, set()
            for seed in range(1, args.seeds + 1):
                t0 = time.monotonic()
                r = run(RunOptions(target=variant, nemesis=tuple(faults.split(",")), nemesis_interval=1.0,
                                   time_limit=args.time_limit, ttl_ms=args.ttl, nodes=10, dup_rate=dup,
                                   seed=seed, store=store))
                found = {a.kind for a in r.verdict.anomalies}
                kinds |= found
                hit = r.verdict.valid is False and bool(found & expected)
                caught += hit
                t = detection_seconds(r.run_dir, r.verdict) if hit else None
                if t is not None:
                    times.append(t)
                print(f"  {variant} seed {seed}: {'caught' if hit else 'MISSED'} {found or ''} "
                      f"detect {t if t is None else round(t, 2)} s (run {time.monotonic() - t0:.0f} s)", flush=True)
            rows.append((variant, faults, caught, args.seeds, statistics.median(times) if times else None, sorted(kinds)))
    print(f"\nbroken variants, {args.seeds} seeds x {args.time_limit:g} s runs, ttl {args.ttl} ms")
    print(f"{'variant':<26} {'fault':<12} {'caught':>8} {'median s to detect':>19}  kinds found")
    for variant, faults, caught, n, med, kinds in rows:
        m = "-" if med is None else f"{med:.2f}"
        print(f"{variant:<26} {faults:<12} {caught:>3}/{n:<4} {m:>19}  {', '.join(kinds)}")


if __name__ == "__main__":
    main()
