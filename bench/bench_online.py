"""Checking while the run goes: how soon an anomaly is said, how soon ``--fail-fast`` is red, and a soak's memory.

Three tables, each side by side with its peer in one run:

* ``latency``: every broken variant of the registry at the defaults (under its
  ``exposed_by`` faults, as ``bench_detection`` runs it), ``--seeds`` seeds: the
  seconds from the completion of an anomaly's last proving op to the moment the
  harness said it (``anomalies.jsonl``: ``said_s - proof_s``), for the first
  anomaly of each run and for all of them;
* ``fail-fast``: the same runs again with ``--fail-fast``, against the full runs:
  seconds from ``leasecheck run`` to its red exit, and from the first proof to
  that exit (the proof's history time to the moment the first anomaly line
  reached stderr, plus the rest of the run from there);
* ``soak`` (``--soak SECONDS``): a run of that length and a 5-minute run with the
  same settings, side by side and at the same time (the same machine load): the
  harness process's peak RSS, its RSS after 5 minutes, its CPU per second of run,
  the checker thread's share of a core, the nodes closed while running, and
  whether ``leasecheck check`` of the history gives the run's own verdict.

Every run is a ``leasecheck run`` child process (``python -m leasecheck``), so
its start-up, its final phase and its report count.

    python -m bench.bench_online --seeds 10 --jobs 2
    python -m bench.bench_online --soak 3600 --only soak
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_detection import DUPLICATE_DELIVERY
from leasecheck.targets.registry import available, load

#: the soak's peer: five minutes, the same settings
SHORT_SOAK_S = 300.0
#: how often the soak samples each harness's memory and CPU
SAMPLE_EVERY_S = 5.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Variant:
    target: str
    faults: tuple[str, ...]
    dup_rate: float


@dataclass
class Outcome:
    """One run of a variant: its exit, its seconds to exit, and what anomalies.jsonl says."""

    variant: Variant
    seed: int
    fail_fast: bool
    code: int = -1
    wall_s: float = 0.0
    #: wall seconds from the start to the first anomaly line on stderr (None: none came)
    first_line_s: float | None = None
    #: said_s - proof_s of every anomaly said, in the order said
    lags: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def proof_to_exit_s(self) -> float | None:
        """Seconds from the first proof to the red exit (the first said anomaly's lag, plus the rest of the run)."""
        if self.first_line_s is None or not self.lags:
            return None
        return self.lags[0] + (self.wall_s - self.first_line_s)


def variants(only: Sequence[str]) -> list[Variant]:
    """Every broken variant, under what exposes it (as bench_detection runs it at the defaults)."""
    out = []
    for name in sorted(available()):
        cls = load(name)
        if cls.bug and (not only or name in only):
            dup = 0.3 if DUPLICATE_DELIVERY in cls.exposed_by_workload else 0.1
            out.append(Variant(name, tuple(cls.exposed_by or ("pause",)), dup))
    return out


def run_one(v: Variant, seed: int, fail_fast: bool, store: Path) -> Outcome:
    """``leasecheck run`` at the defaults in a child process, its stderr watched for the first anomaly line."""
    out = Outcome(v, seed, fail_fast)
    argv = [sys.executable, "-m", "leasecheck", "run", "--target", v.target, "--nemesis", ",".join(v.faults),
            "--dup-rate", str(v.dup_rate), "--seed", str(seed), "--store", str(store), "--json",
            *(["--fail-fast"] if fail_fast else [])]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    assert proc.stderr is not None and proc.stdout is not None
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    for line in proc.stderr:
        if out.first_line_s is None and line.startswith("anomaly "):
            out.first_line_s = time.monotonic() - start
    out.code = proc.wait()
    out.wall_s = time.monotonic() - start
    reader.join()
    try:
        results = json.loads("".join(stdout))
        said = Path(results["run_dir"]) / "anomalies.jsonl"
        out.lags = [r["said_s"] - r["proof_s"] for r in map(json.loads, said.read_text().splitlines())] if said.exists() else []
    except (ValueError, KeyError) as e:
        out.error = f"exit {out.code}: {type(e).__name__}: {e}"
    return out


def _med(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "-"


def _max(xs: Sequence[float]) -> str:
    return f"{max(xs):.2f}" if xs else "-"


def latency_tables(vs: list[Variant], seeds: int, jobs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-online-") as tmp:
        store = Path(tmp)
        todo = [(v, s, ff) for v in vs for s in range(1, seeds + 1) for ff in (False, True)]
        with ThreadPoolExecutor(jobs) as pool:
            outs = list(pool.map(lambda a: run_one(a[0], a[1], a[2], store), todo))
    print(f"\n## Anomaly said after its proof, and --fail-fast against the full run (defaults, {seeds} seeds, {jobs} at once)\n")
    print("| variant | faults | caught full / fast | first said, median (max) s | all said, median (max) s "
          "| full run to red exit, median s | --fail-fast to red exit, median s | proof to red exit, median (max) s |")
    print("|---|---|---|---|---|---|---|---|")
    firsts_all: list[float] = []
    for v in vs:
        full = [o for o in outs if o.variant == v and not o.fail_fast]
        fast = [o for o in outs if o.variant == v and o.fail_fast]
        firsts = [o.lags[0] for o in full + fast if o.lags]
        firsts_all += firsts
        every = [x for o in full + fast for x in o.lags]
        p2e = [x for o in fast if (x := o.proof_to_exit_s) is not None]
        caught = f"{sum(o.code == 1 for o in full)}/{len(full)} / {sum(o.code == 1 for o in fast)}/{len(fast)}"
        print(f"| {v.target} | {','.join(v.faults)} | {caught} | {_med(firsts)} ({_max(firsts)}) | {_med(every)} ({_max(every)}) "
              f"| {_med([o.wall_s for o in full if o.code == 1])} | {_med([o.wall_s for o in fast if o.code == 1])} "
              f"| {_med(p2e)} ({_max(p2e)}) |")
    print(f"\nfirst anomaly said after its proof, over every run: median {_med(firsts_all)} s, max {_max(firsts_all)} s")
    for o in outs:
        if o.error:
            print(f"  {o.variant.target} seed {o.seed}{' --fail-fast' if o.fail_fast else ''}: {o.error}", file=sys.stderr)


# -- the soak ------------------------------------------------------------------------------------------------


@dataclass
class Soak:
    seconds: float
    samples: list[tuple[float, int, float]] = field(default_factory=list)  # (t, rss KB, cpu s)
    peak_kb: int = 0
    results: dict[str, Any] = field(default_factory=dict)
    offline_agrees: bool | None = None
    code: int = -1

    def rss_at(self, t: float) -> int:
        return next((kb for at, kb, _ in self.samples if at >= t), self.samples[-1][1] if self.samples else 0)


def _proc(pid: int) -> tuple[int, int, float] | None:
    """(VmRSS KB, VmHWM KB, utime+stime s) of ``pid`` alone (not its children), None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    kb = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in status.splitlines() if ln.startswith(("VmRSS", "VmHWM")))}
    return kb.get("VmRSS", 0), kb.get("VmHWM", 0), (int(stat[11]) + int(stat[12])) / CLK_TCK


def soak_one(seconds: float, store: Path, seed: int) -> Soak:
    soak = Soak(seconds)
    argv = [sys.executable, "-m", "leasecheck", "run", "--target", "sqlite", "--seed", str(seed), "--time-limit", f"{seconds:g}",
            "--store", str(store / f"soak-{seconds:g}"), "--json"]
    start = time.monotonic()
    with open(store / f"soak-{seconds:g}.err", "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, stdin=subprocess.DEVNULL)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        while proc.poll() is None:
            got = _proc(proc.pid)
            if got is not None:
                rss, hwm, cpu = got
                soak.samples.append((time.monotonic() - start, rss, cpu))
                soak.peak_kb = max(soak.peak_kb, hwm)
            time.sleep(SAMPLE_EVERY_S)
        soak.code = proc.returncode
        reader.join()
    soak.results = json.loads("".join(out))
    history = Path(soak.results["run_dir"]) / "history.jsonl"
    checked = subprocess.run([sys.executable, "-m", "leasecheck", "check", "--json", str(history)], capture_output=True, text=True)
    offline = json.loads(checked.stdout)
    soak.offline_agrees = all(offline.get(k) == soak.results.get(k) for k in ("valid", "anomalies")) and all(
        offline["stats"].get(k) == soak.results["stats"].get(k) for k in ("ops", "nodes", "ok", "fail", "info", "anomalies"))
    return soak


def soak_table(seconds: float, seed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, ThreadPoolExecutor(2) as pool:
        long_, short = pool.map(lambda s: soak_one(s, Path(tmp), seed), (seconds, SHORT_SOAK_S))
    print(f"\n## A {seconds / 60:g}-minute soak against a 5-minute run (sqlite, defaults, seed {seed}, side by side)\n")
    print("| run | peak RSS MB (VmHWM) | RSS at 5 min MB | RSS at the end MB | harness CPU s per s of run "
          "| checker share of a core | ops | nodes closed while running | verdict | `leasecheck check` agrees |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in (long_, short):
        run = s.results.get("run", {})
        secs = run.get("seconds") or s.seconds
        cpu = s.samples[-1][2] if s.samples else 0.0
        share = (run.get("checker_cpu_s") or 0.0) / secs
        print(f"| {s.seconds / 60:g} min | {s.peak_kb / 1024:.1f} | {s.rss_at(SHORT_SOAK_S - SAMPLE_EVERY_S) / 1024:.1f} "
              f"| {s.samples[-1][1] / 1024 if s.samples else 0:.1f} | {cpu / secs:.3f} | {share:.3%} | {run.get('ops')} "
              f"| {run.get('nodes_closed_while_running')} | {s.results.get('valid')} | {s.offline_agrees} |")
    marks = [t for t in (300, 900, 1800, 2700, 3600, 7200, 14400, 28800) if t <= long_.seconds]
    print(f"\nRSS of the {long_.seconds / 60:g}-minute run over time: "
          + ", ".join(f"{t // 60} min {long_.rss_at(t - SAMPLE_EVERY_S) / 1024:.1f} MB" for t in marks))
    ratio = long_.peak_kb / max(1, short.peak_kb)
    print(f"\npeak RSS, {seconds / 60:g} min / 5 min: {ratio:.3f} (within 10 %: {abs(ratio - 1) <= 0.10})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_online", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--variants", default="", help="comma-separated variants (default: every broken variant)")
    p.add_argument("--only", default="latency,soak", help="latency (with fail-fast), soak")
    p.add_argument("--soak", type=float, default=3600.0, help="seconds of the long soak")
    p.add_argument("--soak-seed", type=int, default=1)
    a = p.parse_args(argv)
    parts = set(a.only.split(","))
    if "latency" in parts:
        latency_tables(variants([v for v in a.variants.split(",") if v]), a.seeds, a.jobs)
    if "soak" in parts:
        soak_table(a.soak, a.soak_seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
