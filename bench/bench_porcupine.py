"""leasecheck against Porcupine on the same histories, in one table.

Porcupine (Go; WGL search with P-compositionality and a state cache) is the
reference linearizability checker; ``bench/porcupine/`` checks a v1 history
with it under DESIGN.md's lease model, partitioned per node, with the protected
resource under the header's ``effect_fence`` rule as leasecheck judges it (the
generator's store lifts the fence at every claim: ``"lease"``). Both tools get the
same generated (valid) file and run as subprocesses with a deadline and an
address-space cap, so a search that explodes reads "timeout" or "OOM" here
rather than taking the machine down.

Porcupine is run with two encodings of a crashed (info) op, both following its
documented advice (return at time infinity, output unknown, result unchecked):
``porcupine`` uses a NondeterministicModel whose crashed op has two next states
(took effect / did not); ``porcupine-det`` uses a plain Model that applies a
crashed op when legal (not taking effect = being linearized at the end).

Usage: python -m bench.bench_porcupine [--timeout 120] [--mem-gb 16] [--repeat 3] [--no-det] [--max-ops N]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.gen import Config
from bench.harness import (
    BENCH_DIR,
    Measured,
    cached_history,
    leasecheck_cmd,
    machine_note,
    run_measured,
    seconds,
    table,
)

GO_DIR = BENCH_DIR / "porcupine"
GO_BIN = GO_DIR / "bin" / "porcupine-lease"

#: rows: sizes over 100 nodes per run, then contention on ONE node that never
#: finishes (commit rate 0: leases end in release), a few % crashed ops
SIZE_ROWS = [Config(n, 16, 100, 0.01, 1) for n in (1_000, 10_000, 100_000, 1_000_000)]
CONTENTION_ROWS = [
    Config(n, w, 1, 0.05, 1, commit_rate=0.0) for w in (5, 10, 20, 50) for n in (1_000, 10_000)
] + [Config(100_000, 20, 1, 0.05, 1, commit_rate=0.0)]


def go_binary() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise SystemExit("the Go toolchain is needed (go not on PATH nor at /usr/local/go/bin/go)")
    return go


def build() -> None:
    """Build the Porcupine program; `go build` fetches the pinned module itself."""
    GO_BIN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([go_binary(), "build", "-o", str(GO_BIN), "."], cwd=GO_DIR, check=True)


@dataclass(slots=True)
class Row:
    cfg: Config
    nodes_total: int
    crashed: int
    lc: Measured
    porc: Measured
    det: Measured | None


def lc_verdict(m: Measured) -> str:
    if m.status != "done":
        return m.status
    return {True: "valid", False: "invalid", "unknown": "unknown"}.get(m.output.get("valid"), "error")


def porc_verdict(m: Measured | None) -> str:
    if m is None:
        return "-"
    if m.status != "done":
        return m.status
    return str(m.output.get("result", "error"))


def porc_time(m: Measured | None, timeout: float) -> str:
    """Wall seconds, with Porcupine's own check time in brackets."""
    if m is None:
        return "-"
    if m.status != "done":
        return m.status
    if m.output.get("result") == "unknown":
        return f">{timeout:.0f}"
    return f"{seconds(m.wall)} ({seconds(m.output['seconds'])})"


def agree(row: Row) -> bool:
    """Both definite verdicts name the same answer (valid = ok, invalid = illegal)."""
    same = {"valid": "ok", "invalid": "illegal"}
    lc = lc_verdict(row.lc)
    for m in (row.porc, row.det):
        pv = porc_verdict(m)
        if lc in same and pv in ("ok", "illegal") and same[lc] != pv:
            return False
    return True


def finished(m: Measured) -> bool:
    """Ran to a definite answer (not killed, not out of its own time budget)."""
    return m.status == "done" and m.output.get("result", m.output.get("valid")) != "unknown"


def median_run(cmd: list[str], repeat: int, deadline: float, mem: int) -> Measured:
    """The run of median wall time among ``repeat`` runs; a run that does not
    finish is not repeated (its answer would only be slower)."""
    runs = [run_measured(cmd, timeout=deadline, mem_limit_bytes=mem)]
    while finished(runs[0]) and len(runs) < repeat:
        runs.append(run_measured(cmd, timeout=deadline, mem_limit_bytes=mem))
    return sorted(runs, key=lambda m: m.wall)[len(runs) // 2]


def run_row(cfg: Config, timeout: float, mem: int, det: bool, repeat: int) -> Row:
    path, gen = cached_history(cfg)
    # a margin over the tools' own deadlines, for start-up and parsing
    deadline = timeout + 60
    lc = median_run(leasecheck_cmd(path, timeout), repeat, deadline, mem)
    porc_cmd = [str(GO_BIN), "-timeout", f"{timeout:g}s"]
    porc = median_run([*porc_cmd, "-nondet", str(path)], repeat, deadline, mem)
    d = median_run([*porc_cmd, str(path)], repeat, deadline, mem) if det else None
    return Row(cfg, gen.nodes, gen.crashed, lc, porc, d)


def ratio(row: Row) -> str:
    if not (finished(row.lc) and finished(row.porc)):
        return "-"
    r = row.porc.wall / row.lc.wall
    return f"{r:.2f}x" if r < 0.1 else f"{r:.1f}x"


def render(rows: list[Row], timeout: float) -> str:
    headers = [
        "ops", "workers", "nodes", "crashed", "leasecheck s", "porcupine s (check)", "ratio",
        "porcupine-det s (check)", "leasecheck", "porcupine", "porcupine-det", "lc MB", "porc MB",
    ]  # fmt: skip
    body = []
    for r in rows:
        mark = "" if agree(r) else " DISAGREE"
        body.append(
            [
                f"{r.cfg.ops:,}",
                r.cfg.workers,
                f"{r.cfg.nodes}" + (f" ({r.nodes_total:,})" if r.nodes_total != r.cfg.nodes else ""),
                f"{r.crashed / max(r.cfg.ops, 1):.1%}",
                seconds(r.lc.wall) if r.lc.status == "done" else r.lc.status,
                porc_time(r.porc, timeout),
                ratio(r),
                porc_time(r.det, timeout),
                lc_verdict(r.lc) + mark,
                porc_verdict(r.porc),
                porc_verdict(r.det),
                f"{r.lc.maxrss_mb:.0f}",
                f"{max(r.porc.maxrss_mb, r.det.maxrss_mb if r.det else 0):.0f}",
            ]
        )
    return table(headers, body)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_porcupine", description=__doc__.split("\n\n")[0])
    p.add_argument("--timeout", type=float, default=120, help="seconds per tool per row")
    p.add_argument("--mem-gb", type=float, default=16, help="address-space cap per tool")
    p.add_argument("--no-det", action="store_true", help="skip the deterministic Porcupine encoding")
    p.add_argument("--max-ops", type=int, default=None, help="skip rows with more ops")
    p.add_argument("--repeat", type=int, default=3, help="runs per tool per row; the median is shown")
    a = p.parse_args(argv)

    build()
    mem = int(a.mem_gb * 2**30)
    configs = [c for c in SIZE_ROWS + CONTENTION_ROWS if a.max_ops is None or c.ops <= a.max_ops]
    print(f"machine: {machine_note()}")
    print(f"limits: {a.timeout:g} s and {a.mem_gb:g} GiB address space per tool per row", flush=True)
    rows = []
    for cfg in configs:
        row = run_row(cfg, a.timeout, mem, not a.no_det, a.repeat)
        rows.append(row)
        print(
            f"  {cfg.ops:>9,} ops {cfg.workers:>2} workers {cfg.nodes:>3} nodes: "
            f"leasecheck {lc_verdict(row.lc)} {row.lc.wall:.2f} s, porcupine {porc_verdict(row.porc)} "
            f"{row.porc.wall:.2f} s, porcupine-det {porc_verdict(row.det)}",
            file=sys.stderr,
            flush=True,
        )
    print()
    print(render(rows, a.timeout))
    print(
        f"\nseconds: median of {a.repeat} runs (one if it did not finish) of a fresh subprocess, wall time "
        "with start-up and parsing; (check) is Porcupine's CheckOperationsTimeout alone; "
        "ratio = porcupine / leasecheck wall; MB = peak RSS."
    )
    bad = [r for r in rows if not agree(r)]
    for r in bad:
        print(f"DISAGREEMENT on {r.cfg}: {r.lc.output} vs {r.porc.output} / {r.det and r.det.output}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
