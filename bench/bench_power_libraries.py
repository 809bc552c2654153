"""Lock libraries and job queues on Redis or Postgres under a power cut, the stores as shipped: AUDITS.md's table.

Each row is a library the project audits, run as its users run it, on a store leasecheck starts with the ``default``
durability profile (Redis: snapshots only, no append-only file; Postgres: its own configuration) on the power-loss
layer, under ``power-loss``: the server SIGKILLed, every write it never fsynced dropped, started again on what
survived. A lock library runs as ``leasecheck run --target LIB``; a job queue as ``python -m leasecheck.queue_run
LIB``, its own workers pulling the jobs. Each (row, seed) is the command the table prints, run as a reader would run
it, in a process of its own; the table says per row how many seeds the power cut caught (an anomaly it hit), valid
or unknown, the kinds of the cut's anomalies, and one proof (a second owner let in across a cut first, in the checker's words); apart,
the kinds the workload's own stalls showed with no fault (an unfenced lock does without any); for a queue, how many
jobs its broker lost. ``--store`` of an earlier bench reads the runs it finished and runs the rest.

    python -m bench.bench_power_libraries --seeds 3 --jobs 2

Only the queues that are valid without a fault are here (the others stay invalid whatever the store does: see
AUDITS.md's queue rows), and not Temporal, whose server is no Redis or Postgres leasecheck starts.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the kinds that say one job or lock went to two owners, first among the proofs
TWO_OWNERS = ("duplicate-epoch", "overlapping-lease", "stale-effect", "stale-commit", "duplicate-commit", "stale-renew")


@dataclass(frozen=True)
class Row:
    """One library, as the table names it, and the command that runs it (the seed appended)."""

    library: str
    store: str
    how: str  # the target or queue:LIB@MODE
    command: tuple[str, ...]

    def argv(self, seed: int) -> list[str]:
        return [*self.command, "--seed", str(seed)]

    def shown(self, seed: int) -> str:
        return shlex.join(["leasecheck" if self.command[0] == "leasecheck" else "python", *self.argv(seed)[1:]])


def _lock(target: str, library: str, store: str) -> Row:
    return Row(library, store, target, ("leasecheck", "run", "--target", target, "--nemesis", "power-loss",
                                        "--store-config", "default", "--time-limit", "20", "--evidence-wait", "30"))


def _queue(library: str, mode: str, store: str) -> Row:
    return Row(library, store, f"queue:{library}@{mode}", ("python", "-m", "leasecheck.queue_run", library, "--mode", mode,
                                                            "--nemesis", "power-loss", "--store-config", "default",
                                                            "--time-limit", "20"))


ROWS: tuple[Row, ...] = (
    _lock("redis-py-lock", "redis", "redis"),
    _lock("python-redis-lock", "python-redis-lock", "redis"),
    _lock("portalocker-redis", "portalocker", "redis"),
    _lock("portalocker-redis-fenced", "portalocker", "redis"),
    _lock("sqlalchemy-dlock", "sqlalchemy-dlock", "postgres"),
    _queue("rq", "documented", "redis"),
    _queue("dramatiq", "documented", "redis"),
    _queue("huey", "documented", "redis"),
    _queue("huey", "fenced", "redis"),
    _queue("procrastinate", "fenced", "postgres"),
    _queue("dbos", "documented", "postgres"),
)


def run_one(row: Row, seed: int, store: Path) -> dict[str, Any]:
    """The row's command for ``seed``, its run folder under ``store``; its result (valid, kinds, proof, queue stats)."""
    argv = row.argv(seed) + ["--store", str(store / f"{row.how.replace(':', '-').replace('@', '-')}-{seed}")]
    if argv[0] == "leasecheck":
        argv = [sys.executable, "-m", "leasecheck", *argv[1:], "--json"]
    else:
        argv = [sys.executable, *argv[1:]]
    out = store / f"{row.how.replace(':', '-').replace('@', '-')}-{seed}.json"
    if not out.is_file() or not out.read_text().startswith("{"):  # --store of an earlier bench: its finished runs are read
        with out.open("w") as f:  # --json goes to a file, never an unread pipe
            done = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, text=True, timeout=900)
        if not out.read_text().startswith("{"):
            said = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:]
            return {"row": row, "seed": seed, "valid": "error", "reason": f"exit {done.returncode}: {' '.join(said)}"}
    result = json.loads(out.read_text())
    full = json.loads((Path(result["run_dir"]) / "results.json").read_text())
    anomalies = full.get("anomalies") or []
    # the power cut's own: an anomaly no fault hit is the workload's stall (an unfenced lock shows those without any
    # fault), said apart as the audits do
    cut = [a for a in anomalies if a.get("faults")]
    times = _op_times(Path(result["run_dir"])) if cut else None
    across = [a for a in cut if times is not None and _across_a_cut(a, *times)]
    first = next((a for pool in (across, cut) for kind in TWO_OWNERS for a in pool if a["kind"] == kind),
                 cut[0] if cut else None)
    stats = full.get("run") or full.get("stats") or {}
    return {"row": row, "seed": seed, "valid": False if cut else full["valid"] if full["valid"] is not False else "own",
            "reason": full.get("reason"), "kinds": sorted({a["kind"] for a in cut}), "first": first,
            "own": sorted({a["kind"] for a in anomalies if not a.get("faults")}),
            "lost_jobs": (stats["jobs"] - stats["finished"]) if "finished" in stats else None, "jobs": stats.get("jobs")}


def _op_times(run_dir: Path) -> tuple[dict[int, int], dict[int, int], list[int]]:
    """The run's history read once: each op's completion and invoke time by index, and when each power cut began."""
    done: dict[int, int] = {}
    invoked: dict[int, int] = {}
    cuts: list[int] = []
    pending: dict[Any, int] = {}
    for line in (run_dir / "history.jsonl").read_text().splitlines()[1:]:
        e = json.loads(line)
        if e["process"] == "nemesis":
            if e["f"] == "kill" and isinstance(e.get("value"), dict) and e["value"].get("fault") == "power-loss":
                cuts.append(e["time"])
        elif e["type"] == "invoke":
            pending[e["process"]] = e["index"]
            invoked[e["index"]] = e["time"]
        elif e["process"] in pending:
            done[pending.pop(e["process"])] = e["time"]
    return done, invoked, cuts


def _across_a_cut(anomaly: dict[str, Any], done: dict[int, int], invoked: dict[int, int], cuts: list[int]) -> bool:
    """Was the anomaly's first op (the older lease's grant) done before a power cut began and its second (the newer
    grant) invoked after it? Then the cut is what let the second owner in, not the first owner's own lapse (an anomaly
    a store fault "hits" only overlaps its window)."""
    ops = anomaly.get("ops") or []
    if len(ops) < 2:
        return False
    older, newer = ops[0], ops[1]
    return any(done.get(older, 1 << 62) < t < invoked.get(newer, -1) for t in cuts)


def proof(first: dict[str, Any] | None, seed: int) -> str:
    if first is None:
        return "-"
    said = (first.get("explanation") or "").split("; ")[0].split(" (real-time")[0]
    return f"seed {seed}: {first['kind']} on {first['node']}, ops {first['ops']}" + (f": {said}" if said else "")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_power_libraries", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated libraries or targets (default: every row)")
    parser.add_argument("--store", default=None, help="the runs' folder (default: a new one); runs already in it are read")
    a = parser.parse_args()
    rows = [r for r in ROWS if not a.only or r.library in a.only.split(",") or r.how in a.only.split(",")]
    store = Path(a.store) if a.store else Path(tempfile.mkdtemp(prefix="leasecheck-bench-power-"))
    work = [(row, seed) for row in rows for seed in range(1, a.seeds + 1)]
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda rs: run_one(rs[0], rs[1], store), work))
    print(f"runs in {store}\n")
    print("| library | store | target | fault | profile | verdict | kinds | one proof | command |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        mine = [r for r in results if r["row"] is row]
        verdicts = Counter({False: "caught", True: "valid", "own": "invalid without the fault"}.get(r["valid"], "unknown")
                           for r in mine)
        kinds = sorted({k for r in mine for k in r.get("kinds", ())})
        caught = [r for r in mine if r["valid"] is False]
        said = " / ".join(f"{n} {v}" for v, n in verdicts.items())
        lost = [(r["lost_jobs"], r["jobs"]) for r in mine if r.get("lost_jobs") is not None]
        shown = proof(caught[0]["first"], caught[0]["seed"]) if caught else "-"
        own = sorted({k for r in mine for k in r.get("own", ())})
        if own:
            shown += f"; the workload's own stalls, no fault: {', '.join(own)}"
        if lost:
            shown += "; jobs enqueued that never finished (the broker lost them): " + ", ".join(f"{n} of {m}" for n, m in lost)
        unknown = [f"seed {r['seed']}: {r.get('reason')}" for r in mine if r["valid"] not in (True, False)]
        if unknown:
            shown += "; " + "; ".join(unknown)
        print(f"| {row.library} | {row.store} | `{row.how}` | `power-loss` | default | {said} of {len(mine)} | "
              f"{', '.join(kinds) or '-'} | {shown} | `{row.shown(1)}` |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
