"""Every audited job queue under the broker's faults: what its published plans do when the broker stops, dies or is
cut off from the workers. The measurement behind the queue plans' ``pause-store``, ``kill-store`` and ``partition``
lines (AUDITS.md).

Each queue's every plan (mode) runs as ``leasecheck audit`` runs it (the plan's ttl, workers, interval and time
limit), once per fault and seed, with the fault added to the plan if it has no line for it yet; the table says per
(queue, mode, fault) how many seeds were invalid (the fault's own: anomalies no fault hit are the workload's,
reported apart as the audit does), valid or unknown, the kinds, and the first proof.

    python -m bench.bench_queue_faults --seeds 3 --jobs 2
    python -m bench.bench_queue_faults --seeds 3 --only rq,huey --faults kill-store

Temporal is left out: its server is no Redis or Postgres, and a queue run's broker faults act on those.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from leasecheck.auditing.audited import Audited
from leasecheck.auditing.queue_audit import queue_audits, queue_name, run_queue_audit
from leasecheck.targets.audits import FaultAudit

#: the broker's faults a queue run takes
BROKER_FAULTS = ("pause-store", "kill-store", "partition")


def with_fault(audited: Audited, fault: str) -> Audited:
    """``audited`` with a line for ``fault`` (a placeholder verdict if its plan has none: the bench publishes nothing)."""
    if any(f.key == fault for f in audited.plan.faults):
        return audited
    return replace(audited, plan=replace(audited.plan, faults=(*audited.plan.faults, FaultAudit(fault, "valid"))))


def measure(audited: Audited, fault: str, seed: int, store: Path) -> dict[str, Any]:
    try:
        r = run_queue_audit(with_fault(audited, fault), fault, seed, store, None)
    except Exception as e:  # one run that cannot be had is said, the others go on
        return {"target": audited.target, "fault": fault, "seed": seed, "verdict": "error", "reason": str(e)}
    return {"target": audited.target, "fault": fault, "seed": seed, "verdict": r.verdict, "kinds": r.kinds,
            "reason": r.reason, "proof": r.proof, "without": r.without_fault, "run_dir": str(r.run_dir)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_queue_faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated queue names (default: every audited queue)")
    parser.add_argument("--faults", default=",".join(BROKER_FAULTS))
    a = parser.parse_args()
    found, broken = queue_audits()
    for b in broken:
        print(f"cannot run {b.target}: {b.error}")
    chosen = [q for q in found if (queue_name(q.target) or "") != "temporal"
              and (not a.only or queue_name(q.target) in a.only.split(","))]
    store = Path(tempfile.mkdtemp(prefix="leasecheck-bench-queue-faults-"))
    work = [(q, f, s) for q in chosen for f in a.faults.split(",") for s in range(1, a.seeds + 1)]
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda w: measure(w[0], w[1], w[2], store), work))
    print(f"runs in {store}\n")
    print("| queue | mode | fault | verdicts | kinds | first proof | unknown because |")
    print("|---|---|---|---|---|---|---|")
    for q in chosen:
        for fault in a.faults.split(","):
            mine = [r for r in results if r["target"] == q.target and r["fault"] == fault]
            counts = Counter(r["verdict"] for r in mine)
            kinds = sorted({k for r in mine for k in r.get("kinds", ())})
            caught = [r for r in mine if r["verdict"] == "invalid"]
            proof = caught[0]["proof"] if caught else None
            shown = f"seed {caught[0]['seed']}: {proof['kind']} on {proof['node']}, ops {proof['ops']}" if proof else "-"
            why = "; ".join(f"seed {r['seed']}: {r['reason']}" for r in mine if r["verdict"] in ("unknown", "error"))
            print(f"| {queue_name(q.target)} | {q.plan.mode} | `{fault}` | "
                  f"{', '.join(f'{v} {n}/{len(mine)}' for v, n in sorted(counts.items()))} | {', '.join(kinds) or '-'} | "
                  f"{shown} | {why or '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
