"""How reliably, and how fast, is each broken variant caught? And what did the runs reach?

Every broken variant of the registry runs under what exposes it (its
``exposed_by`` faults; a higher duplicate-delivery rate when duplicate
delivery exposes it), with several seeds, at two settings side by side:

* ``defaults``: exactly what ``leasecheck run --target VARIANT`` gives a user
  (5 workers, ttl 1000 ms, a fault every ~5 s, 20 nodes per run, 30 s);
* ``fast``: a fault every second, ttl 300 ms, 10 nodes per run (more takeovers
  per second: what an older table of docs/detection-matrix.md was measured with).

Per variant it prints the runs that caught it (invalid with one of its
documented kinds) and the median seconds from the start of the history to the
completion of the first anomaly's proof (the latest completion among the ops it
cites). The reference backends run too, under every fault their store takes
without extra tools, and must never be invalid. Last, per setting, the coverage
of every situation (results.json ``coverage``): the least and the median count
over the reference runs.

    python -m bench.bench_detection --seeds 10 --settings defaults,fast --jobs 3

``--clusters`` runs the replicated stores instead (:data:`CLUSTER_CASES`, ``--cluster``): each
configuration under the member faults that threaten it, at the defaults, with
``--evidence-wait 60`` so that a run goes on until its faults' situations happened; a
configuration expected valid counts its valid runs, the others the runs that caught it.

    python -m bench.bench_detection --clusters --seeds 10 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from leasecheck.histories import read_history
from leasecheck.run.options import RunOptions
from leasecheck.run.runner import run
from leasecheck.run.workload_options import Workload
from leasecheck.targets.registry import available, load

#: what a user gets, and the quick settings (only what differs from RunOptions' defaults)
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "fast": {"nemesis_interval": 1.0, "ttl_ms": 300, "nodes": 10, "time_limit": 20.0},
}

#: reference backends and the faults they run under here (no Toxiproxy or libfaketime needed)
REFERENCES = {
    "sqlite": ("pause", "kill"), "postgres": ("pause", "kill", "kill-store"), "redis": ("pause", "kill", "pause-store"),
    "redis-token": ("pause", "kill"),
}

DUPLICATE_DELIVERY = "duplicate-delivery"

#: what the clusters' findings are made of: the kinds a lost write or a forgotten lease shows as
LOST = frozenset({"duplicate-epoch", "epoch-regression", "lost-commit", "overlapping-lease", "stale-effect",
                  "stale-commit", "stale-renew", "duplicate-commit", "non-linearizable"})
#: the lock libraries' audit settings on a cluster (their AUDIT_OPTIONS, which the published audits run with)
ETCD_AUDIT = (("clock_uncertainty_ms", 600.0),)
KAZOO_AUDIT = (("clock_uncertainty_ms", 500.0), ("workload", (("stall_rate", 0.0), ("zombie_rate", 1.0))))

#: clusters (``--cluster``): target, cluster, faults, the kinds that catch it (empty: a configuration that must stay
#: valid) and run options besides the defaults. What replication and failover do to a lease: findings, not variants
CLUSTER_CASES: tuple[tuple[str, str, tuple[str, ...], frozenset[str], tuple[tuple[str, Any], ...]], ...] = (
    ("redis", "redis-sentinel", ("failover", "kill-primary"), LOST, ()),
    ("redis", "redis-sentinel", ("isolate-primary",), LOST, ()),
    ("redis", "redis-sentinel-wait", ("failover", "kill-primary"), LOST, ()),
    ("redis", "redis-sentinel-wait", ("isolate-primary",), LOST, ()),
    # Postgres fails over only when told (an HA manager's job): a standby cut off while the primary goes on writing,
    # then promoted, is where an asynchronous standby loses; faults every ~2 s so that the two overlap
    ("postgres", "postgres-standby", ("isolate-primary", "failover"), LOST, (("nemesis_interval", 2.0),)),
    ("postgres", "postgres-standby-sync", ("isolate-primary", "failover"), frozenset(), (("nemesis_interval", 2.0),)),
    ("postgres", "postgres-standby-sync", ("kill-primary", "pause-primary", "partition-halves"), frozenset(), ()),
    ("redis-py-lock", "redis-sentinel", ("failover", "kill-primary"), LOST, (("workload", (("zombie_rate", 1.0),)),)),
    ("etcd3-lock-revision", "etcd-cluster", ("isolate-primary", "partition-halves", "partition-bridge"), frozenset(), ETCD_AUDIT),
    ("kazoo-lock-zxid", "zookeeper-ensemble", ("partition-bridge",), frozenset(), KAZOO_AUDIT),
)


@dataclass(frozen=True)
class Case:
    """One target under one set of faults at one setting: a row of the table."""

    target: str
    faults: tuple[str, ...]
    dup_rate: float
    setting: str
    expected: frozenset[str] = frozenset()  # empty: a reference backend, which must stay valid
    cluster: str | None = None
    #: RunOptions fields besides the setting's, as (field, value) pairs (a workload's as pairs too): hashable
    options: tuple[tuple[str, Any], ...] = ()


@dataclass
class Outcome:
    case: Case
    seed: int
    valid: Any
    kinds: list[str]
    detect_s: float | None
    coverage: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def caught(self) -> bool:
        return self.valid is False and bool(set(self.kinds) & self.case.expected)


def cases(settings: Sequence[str], only: Sequence[str] | None, clusters: bool = False) -> list[Case]:
    """Every variant and reference at every setting; with ``clusters``, the cluster rows (at the defaults) alone."""
    if clusters:
        rows = [Case(t, faults, 0.1, "defaults", expected, cluster, options) for t, cluster, faults, expected, options in CLUSTER_CASES]
        return [c for c in rows if not only or c.target in only or c.cluster in only]
    out = []
    for name in sorted(available()):
        cls = load(name)
        if not cls.bug:
            continue
        dup = 0.3 if DUPLICATE_DELIVERY in cls.exposed_by_workload else 0.1
        for s in settings:
            out.append(Case(name, cls.exposed_by or ("pause",), dup, s, frozenset(cls.expected)))
    for name, faults in REFERENCES.items():
        for s in settings:
            out.append(Case(name, faults, 0.1, s))
    return [c for c in out if not only or c.target in only]


def detection_seconds(run_dir: Path, anomalies: list[Any]) -> float | None:
    """Seconds from the history's start to the completion of the first anomaly's last cited op."""
    _, ops, _ = read_history(run_dir / "history.jsonl")
    done = {op.index: (op.complete_time or op.invoke_time) for op in ops}
    proofs = [max(done[i] for i in a.ops if i in done) for a in anomalies if any(i in done for i in a.ops)]
    return min(proofs) / 1e9 if proofs else None


def one(case: Case, seed: int, store: str, time_limit: float | None) -> Outcome:
    """Run ``case`` with ``seed`` (in a worker process of the pool) and read what it found."""
    opts = replace(RunOptions(), target=case.target, nemesis=case.faults, dup_rate=case.dup_rate, seed=seed, store=store,
                   cluster=case.cluster, evidence_wait_s=60.0 if case.cluster else 0.0, **SETTINGS[case.setting])
    extra = {name: Workload(**dict(value)) if name == "workload" else value for name, value in case.options}
    opts = replace(opts, **extra)
    if time_limit is not None:
        opts = replace(opts, time_limit=time_limit)
    t0 = time.monotonic()
    r = run(opts)
    found = sorted({a.kind for a in r.verdict.anomalies})
    detect = detection_seconds(r.run_dir, r.verdict.anomalies) if r.verdict.valid is False else None
    try:
        coverage = json.loads((r.run_dir / "results.json").read_text()).get("coverage", {}).get("counts", {})
    except (OSError, ValueError):
        coverage = {}
    return Outcome(case, seed, r.verdict.valid, found, detect, coverage, time.monotonic() - t0)


def report(outcomes: list[Outcome], seeds: int, time_limit: float | None) -> None:
    rows: dict[Case, list[Outcome]] = {}
    for o in outcomes:
        rows.setdefault(o.case, []).append(o)
    settings = sorted({c.setting for c in rows}, key=list(SETTINGS).index)
    for s in settings:
        opts = replace(RunOptions(), **SETTINGS[s])
        if time_limit is not None:
            opts = replace(opts, time_limit=time_limit)
        print(f"\n{s}: {seeds} seeds x {opts.time_limit:g} s, ttl {opts.ttl_ms} ms, a fault every ~{opts.nemesis_interval:g} s, "
              f"{opts.nodes} nodes per run, {opts.concurrency} workers")
        print(f"{'target':<40} {'faults':<50} {'caught':>8} {'median s':>9}  kinds found")
        for case, outs in rows.items():
            if case.setting != s:
                continue
            kinds = sorted({k for o in outs for k in o.kinds})
            if case.expected:
                times = [o.detect_s for o in outs if o.caught and o.detect_s is not None]
                med = f"{statistics.median(times):.1f}" if times else "-"
                errors = sum(str(o.valid).startswith("error") for o in outs)
                caught = f"{sum(o.caught for o in outs)}/{len(outs)}" + (f", error {errors}" if errors else "")
            else:
                med = "-"
                invalid = sum(o.valid is False for o in outs)
                errors = sum(str(o.valid).startswith("error") for o in outs)
                unknown = sum(o.valid not in (True, False) for o in outs) - errors
                caught = (f"valid {len(outs) - invalid - unknown - errors}/{len(outs)}" + (f", unknown {unknown}" if unknown else "")
                          + (f", error {errors}" if errors else ""))
            target = f"{case.target}@{case.cluster}" if case.cluster else case.target
            print(f"{target:<40} {','.join(case.faults):<50} {caught:>8} {med:>9}  {', '.join(kinds) or '-'}")
        refs = [o for case, outs in rows.items() if case.setting == s and not case.expected for o in outs]
        names = sorted({k for o in refs for k in o.coverage})
        if names:
            print(f"\ncoverage at {s}, over {len(refs)} reference runs: least / median count per run")
            for name in names:
                counts = [o.coverage.get(name, 0) for o in refs]
                print(f"  {name:<40} {min(counts):>4} / {statistics.median(counts):>5.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--settings", default="defaults,fast", help="comma-separated: " + ", ".join(SETTINGS))
    ap.add_argument("--time-limit", type=float, default=None, help="override every setting's time limit")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each run is its own workers and store)")
    ap.add_argument("--only", nargs="*", default=None, help="targets (or clusters) to run (default: every variant and reference)")
    ap.add_argument("--clusters", action="store_true", help="the cluster rows (CLUSTER_CASES, at the defaults) instead")
    args = ap.parse_args()
    todo = [(c, seed) for c in cases(args.settings.split(","), args.only, args.clusters) for seed in range(1, args.seeds + 1)]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="leasecheck-bench-") as store, ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(one, c, seed, store, args.time_limit) for c, seed in todo]
        for (c, seed), f in zip(todo, futures):
            try:
                o = f.result()
            except Exception as e:  # a run that failed (its environment, the harness) is a row's error, not the end
                o = Outcome(c, seed, f"error: {type(e).__name__}: {e}".splitlines()[0][:300], [], None)
            outcomes.append(o)
            verdict = "caught" if o.caught else ("valid" if o.valid is True else str(o.valid))
            print(f"  {o.case.setting} {o.case.target} seed {o.seed}: {verdict} {o.kinds or ''} "
                  f"detect {o.detect_s if o.detect_s is None else round(o.detect_s, 1)} s (run {o.seconds:.0f} s)", flush=True)
    report(outcomes, args.seeds, args.time_limit)


if __name__ == "__main__":
    main()
