"""leasecheck against Porcupine on the same histories, in one table.

Porcupine (Go; WGL search with P-compositionality and a state cache) is the
reference linearizability checker; ``bench/porcupine/`` checks a v1 history
with it under docs/contracts/lease-model.md's lease model, partitioned per node, with the protected
resource under the header's ``effect_fence`` rule as leasecheck judges it (the
generator's store lifts the fence at every claim: ``"lease"``). Both tools get the
same generated file and run as subprocesses with a deadline and an
address-space cap, so a search that explodes reads "timeout" or "OOM" here
rather than taking the machine down. Whole process against whole process:
``leasecheck check --json`` in a fresh interpreter (start-up, reading,
checking, printing) against the Go binary (reading and parsing included).

Valid rows: ``bench.gen``'s default shape (100 nodes per run) at 1k-1M ops; one
hot node contended by 5-50 workers; and histories shaped like real ``leasecheck
run`` output (``--shape real``) at 10k-1M ops. Resource rows: the same shapes
with ``read-resource`` ops (``bench.gen --resource-reads 0.15``, the workload's
rate), so both tools check the observable resource register too, and the three
resource kinds planted in them. Invalid rows: one planted anomaly of each kind
(``bench.plant``) in a hot-node and in real-shaped histories; there
leasecheck must report the planted kind and Porcupine must say ``illegal``,
except for the three time bounds (``overlapping-lease``, ``stuck-lease``,
``premature-expiry``), which are no linearizability violations: the lease model
has no clock, so Porcupine rightly says ``ok``.

Porcupine is run with two encodings of a crashed (info) op, both following its
documented advice (return at time infinity, output unknown, result unchecked):
``porcupine`` uses a NondeterministicModel whose crashed op has two next states
(took effect / did not); ``porcupine-det`` uses a plain Model that applies a
crashed op when legal (not taking effect = being linearized at the end); the
invalid rows run ``porcupine`` alone.

Usage: python -m bench.bench_porcupine [--rows size,contention,real,resource,invalid] [--timeout 120] [--mem-gb 16]
       [--repeat 3] [--no-det] [--max-ops N] [--hot-invalid-ops 10000] [--real-invalid-ops 10000,100000,1000000]
       [--hot-resource-ops 2000,5000] [--resource-ops 10000,100000,1000000] [--kinds K1,K2] [--lc-args "--jobs 2"]
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bench.gen import Config, GenStats
from bench.harness import (
    BENCH_DIR,
    OUT,
    Measured,
    cached_history,
    cached_planted,
    compile_bytecode,
    leasecheck_check_cmd,
    machine_note,
    run_measured,
    seconds,
    table,
)
from bench.plant import KINDS, RESOURCE_KINDS, TIMING_KINDS, Planted

GO_DIR = BENCH_DIR / "porcupine"
GO_BIN = GO_DIR / "bin" / "porcupine-lease"

#: rows: sizes over 100 nodes per run, then contention on ONE node that never
#: finishes (commit rate 0: leases end in release), a few % crashed ops
SIZE_ROWS = [Config(n, 16, 100, 0.01, 1) for n in (1_000, 10_000, 100_000, 1_000_000)]
CONTENTION_ROWS = [
    Config(n, w, 1, 0.05, 1, commit_rate=0.0) for w in (5, 10, 20, 50) for n in (1_000, 10_000)
] + [Config(100_000, 20, 1, 0.05, 1, commit_rate=0.0)]


def real_config(ops: int) -> Config:
    """A history shaped like ``leasecheck run`` output: 16 workers, 20 nodes per run, ~1 % info."""
    return Config(ops, 16, 20, 0.01, 1, clock_uncertainty_ms=10, shape="real")


def hot_config(ops: int) -> Config:
    """One hot node, 20 workers, 5 % crashed ops (the contention rows' shape)."""
    return Config(ops, 20, 1, 0.05, 1, commit_rate=0.0)


REAL_ROWS = [real_config(n) for n in (10_000, 100_000, 1_000_000)]
GROUPS = ("size", "contention", "real", "resource", "invalid")

#: how often the resource rows' workers read a node's protected resource (leasecheck run's workload's rate)
RESOURCE_READ_RATE = 0.15


def with_resource_reads(cfg: Config) -> Config:
    """``cfg`` with ``read-resource`` ops (after a claim, and before a worker's next node)."""
    return replace(cfg, resource_read_rate=RESOURCE_READ_RATE)


def history_dir(cfg: Config) -> Path:
    """Where ``cfg``'s history is cached: the harness's names predate the resource reads,
    so histories with them get a folder of their own per rate."""
    return OUT / f"resource-reads-{cfg.resource_read_rate:g}" if cfg.resource_read_rate else OUT


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
    gen: GenStats
    lc: Measured
    porc: Measured
    det: Measured | None
    planted: Planted | None = None  # invalid rows: what was planted where

    @property
    def shape(self) -> str:
        if self.cfg.shape == "real":
            shape = "real"
        else:
            shape = "hot node" if self.cfg.nodes == 1 else f"{self.cfg.nodes}/run"
        return shape + (" +rr" if self.cfg.resource_read_rate else "")


def lc_verdict(m: Measured) -> str:
    if m.status != "done":
        return m.status
    return {True: "valid", False: "invalid", "unknown": "unknown"}.get(m.output.get("valid"), "error")


def lc_found(m: Measured, planted: Planted) -> bool:
    """leasecheck reported the planted kind on the planted node, citing the planted op
    (a ``non-linearizable`` anomaly cites the node's ops it could not order)."""
    return any(
        a.get("kind") == planted.kind
        and a.get("node") == planted.node
        and (planted.kind == "non-linearizable" or planted.op in a.get("ops", []))
        for a in m.output.get("anomalies", [])
    )


def lc_kinds(m: Measured) -> list[str]:
    return sorted({a.get("kind", "?") for a in m.output.get("anomalies", [])})


def porc_verdict(m: Measured | None) -> str:
    if m is None:
        return "-"
    if m.status != "done":
        return m.status
    return str(m.output.get("result", "error"))


def porc_expected(planted: Planted | None) -> str:
    """What a linearizability checker must answer: "ok" on valid rows and on the time bounds."""
    return "ok" if planted is None or planted.kind in TIMING_KINDS else "illegal"


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
    """Every definite verdict is the known answer: a valid history valid (Porcupine
    "ok"); a planted one invalid with the planted kind (Porcupine "illegal", or "ok"
    for a time bound)."""
    lc = lc_verdict(row.lc)
    if row.planted is None:
        lc_ok = lc in ("valid", "unknown", "timeout", "OOM")
    else:
        lc_ok = lc in ("unknown", "timeout", "OOM") or (lc == "invalid" and lc_found(row.lc, row.planted))
    want = porc_expected(row.planted)
    porc_ok = all(porc_verdict(m) not in ("ok", "illegal") or porc_verdict(m) == want for m in (row.porc, row.det))
    return lc_ok and porc_ok


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


@dataclass(frozen=True, slots=True)
class Limits:
    """What every tool gets per row."""

    timeout: float
    mem: int
    repeat: int
    lc_args: tuple[str, ...] = ()


def run_row(cfg: Config, lim: Limits, det: bool, kind: str | None = None) -> Row:
    """Both tools on the history of ``cfg`` (with one ``kind`` planted, if given)."""
    planted = None
    if kind is None:
        path, gen = cached_history(cfg, history_dir(cfg))
    else:
        path, gen, planted = cached_planted(cfg, kind, history_dir(cfg))
    # a margin over the tools' own deadlines, for start-up and parsing
    deadline = lim.timeout + 60
    lc = median_run(leasecheck_check_cmd(path, lim.timeout, lim.lc_args), lim.repeat, deadline, lim.mem)
    porc_cmd = [str(GO_BIN), "-timeout", f"{lim.timeout:g}s"]
    porc = median_run([*porc_cmd, "-nondet", str(path)], lim.repeat, deadline, lim.mem)
    d = median_run([*porc_cmd, str(path)], lim.repeat, deadline, lim.mem) if det else None
    return Row(cfg, gen, lc, porc, d, planted)


def ratio(row: Row) -> str:
    """How many times faster leasecheck was (Porcupine's wall over leasecheck's); a
    Porcupine that ran out of time gives a lower bound."""
    if not finished(row.lc) or row.porc.status != "done":
        return "-"
    r = row.porc.wall / row.lc.wall
    text = f"{r:.2f}x" if r < 0.1 else f"{r:.1f}x"
    return text if finished(row.porc) else f">{text}"


def _mb(*ms: Measured | None) -> str:
    return f"{max(m.maxrss_mb for m in ms if m is not None):.0f}"


def render(rows: list[Row], timeout: float) -> str:
    headers = [
        "shape", "ops", "workers", "nodes", "crashed", "leasecheck s", "porcupine s (check)", "ratio",
        "porcupine-det s (check)", "leasecheck", "porcupine", "porcupine-det", "lc MB", "porc MB",
    ]  # fmt: skip
    body = []
    for r in rows:
        mark = "" if agree(r) else " DISAGREE"
        body.append(
            [
                r.shape,
                f"{r.gen.ops:,}",
                r.cfg.workers,
                f"{r.cfg.nodes}" + (f" ({r.gen.nodes:,})" if r.gen.nodes != r.cfg.nodes else ""),
                f"{r.gen.crashed / max(r.gen.ops, 1):.1%}",
                seconds(r.lc.wall) if r.lc.status == "done" else r.lc.status,
                porc_time(r.porc, timeout),
                ratio(r),
                porc_time(r.det, timeout),
                lc_verdict(r.lc) + mark,
                porc_verdict(r.porc),
                porc_verdict(r.det),
                _mb(r.lc),
                _mb(r.porc, r.det),
            ]
        )
    return table(headers, body)


def render_invalid(rows: list[Row], timeout: float) -> str:
    headers = [
        "shape", "ops", "planted", "leasecheck s", "porcupine s (check)", "ratio",
        "leasecheck", "porcupine", "expected", "lc MB", "porc MB",
    ]  # fmt: skip
    body = []
    for r in rows:
        assert r.planted is not None
        lc = lc_verdict(r.lc)
        if lc == "invalid":
            others = [k for k in lc_kinds(r.lc) if k != r.planted.kind]
            lc = ("invalid: found" if lc_found(r.lc, r.planted) else "invalid: MISSED") + (
                f" (+{', '.join(others)})" if others else ""
            )
        body.append(
            [
                r.shape,
                f"{r.gen.ops + r.planted.appended_ops:,}",
                r.planted.kind + ("" if r.planted.node.startswith("run-") else " (own node)"),
                seconds(r.lc.wall) if r.lc.status == "done" else r.lc.status,
                porc_time(r.porc, timeout),
                ratio(r),
                lc + ("" if agree(r) else " DISAGREE"),
                porc_verdict(r.porc),
                porc_expected(r.planted),
                _mb(r.lc),
                _mb(r.porc),
            ]
        )
    return table(headers, body)


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def plan(a: argparse.Namespace) -> list[tuple[Config, str | None]]:
    """The rows to run, (config, planted kind or None), in table order."""
    groups = set(a.rows.split(","))
    if unknown := groups - set(GROUPS):
        raise SystemExit(f"--rows: unknown group(s) {sorted(unknown)}; choose from {', '.join(GROUPS)}")
    kinds = a.kinds.split(",") if a.kinds else list(KINDS)
    if unknown := set(kinds) - set(KINDS):
        raise SystemExit(f"--kinds: unknown kind(s) {sorted(unknown)}; choose from {', '.join(KINDS)}")
    rows: list[tuple[Config, str | None]] = []
    rows += [(c, None) for c in SIZE_ROWS if "size" in groups]
    rows += [(c, None) for c in CONTENTION_ROWS if "contention" in groups]
    rows += [(c, None) for c in REAL_ROWS if "real" in groups]
    if "resource" in groups:
        bases = [with_resource_reads(real_config(n)) for n in _sizes(a.resource_ops)]
        rows += [(c, None) for c in [with_resource_reads(hot_config(n)) for n in _sizes(a.hot_resource_ops)] + bases]
        rows += [(c, k) for c in bases for k in kinds if k in RESOURCE_KINDS]
    if "invalid" in groups:
        bases = [hot_config(n) for n in _sizes(a.hot_invalid_ops)] + [real_config(n) for n in _sizes(a.real_invalid_ops)]
        rows += [(c, k) for c in bases for k in kinds]
    return [(c, k) for c, k in rows if a.max_ops is None or c.ops <= a.max_ops]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_porcupine", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=",".join(GROUPS), help=f"groups of rows, comma-separated: {', '.join(GROUPS)}")
    p.add_argument("--timeout", type=float, default=120, help="seconds per tool per row")
    p.add_argument("--mem-gb", type=float, default=16, help="address-space cap per tool")
    p.add_argument("--no-det", action="store_true", help="skip the deterministic Porcupine encoding")
    p.add_argument("--max-ops", type=int, default=None, help="skip rows with more ops")
    p.add_argument("--repeat", type=int, default=3, help="runs per tool per row; the median is shown")
    p.add_argument("--hot-invalid-ops", default="10000", help="sizes of the hot-node histories anomalies are planted in")
    p.add_argument("--real-invalid-ops", default="10000,100000,1000000",
                   help="sizes of the real-shaped histories anomalies are planted in")
    p.add_argument("--hot-resource-ops", default="2000,5000",
                   help="sizes of the hot-node histories with resource reads (each read lists the node's whole log)")
    p.add_argument("--resource-ops", default="10000,100000,1000000",
                   help="sizes of the real-shaped histories with resource reads (valid, and the resource kinds planted)")
    p.add_argument("--kinds", default=None, help="planted kinds, comma-separated (default: every kind)")
    p.add_argument("--lc-args", default="", help='more options for `leasecheck check`, e.g. "--jobs 2"')
    a = p.parse_args(argv)

    build()
    compile_bytecode()
    lim = Limits(a.timeout, int(a.mem_gb * 2**30), a.repeat, tuple(shlex.split(a.lc_args)))
    print(f"machine: {machine_note()}")
    print(f"limits: {a.timeout:g} s and {a.mem_gb:g} GiB address space per tool per row", flush=True)
    print(f"leasecheck: {shlex.join(leasecheck_check_cmd(Path('HISTORY'), a.timeout, lim.lc_args))}", flush=True)
    valid: list[Row] = []
    invalid: list[Row] = []
    for cfg, kind in plan(a):
        row = run_row(cfg, lim, det=not a.no_det and kind is None, kind=kind)
        (valid if kind is None else invalid).append(row)
        print(
            f"  {row.shape:>8} {row.gen.ops:>9,} ops {cfg.workers:>2} workers {kind or 'valid':>18}: "
            f"leasecheck {lc_verdict(row.lc)} {row.lc.wall:.2f} s, porcupine {porc_verdict(row.porc)} "
            f"{row.porc.wall:.2f} s, porcupine-det {porc_verdict(row.det)}",
            file=sys.stderr,
            flush=True,
        )
    if valid:
        print("\nValid histories:\n")
        print(render(valid, a.timeout))
    if invalid:
        print("\nOne planted anomaly each (bench.plant):\n")
        print(render_invalid(invalid, a.timeout))
    print(
        f"\nseconds: median of {a.repeat} runs (one if it did not finish) of a fresh subprocess, wall time "
        "with start-up and parsing; (check) is Porcupine's CheckOperationsTimeout alone; "
        "ratio = porcupine / leasecheck wall (>: Porcupine ran out of time); MB = peak RSS; "
        "ops = ops in the file (real: the workload's and the final reads)."
    )
    bad = [r for r in valid + invalid if not agree(r)]
    for r in bad:
        print(
            f"DISAGREEMENT on {r.cfg} {r.planted}: {r.lc.output} vs {r.porc.output} / {r.det and r.det.output}",
            file=sys.stderr,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
