"""What ``--until-covered`` costs a default gate, side by side with the fixed-time gate it replaces, in one run.

A default gate is what the pytest plugin runs for a test that expects a valid run:
``--nemesis pause,kill --time-limit 10 --evidence-wait 10 --fail-fast``, now with
``--until-covered --max-time 100`` (every applicable situation reached 3 times, up to the
plugin's 10 × the limit: ``leasecheck.ci.plugin_args.GATE_MAX_TIME_LIMITS``).
Its peer is the same gate without ``--until-covered``: it ends at the time limit,
whatever it reached. For each reference backend and seed, both run as
``leasecheck run`` child processes (start-up, final reads and check included), one
after the other; the table gives, per backend:

* the until-covered gate: seconds to covered (``coverage.goal.covered_after_s``; the
  goal met n of N), its test proper (``ran_s``) and its whole process, median and worst;
  the situations still short at the cap, with how many runs each;
* the fixed-time gate: its whole process, and in how many runs every applicable
  situation was reached 3 times, and at least once.

    python -m bench.bench_until_covered --seeds 10 --targets sqlite,postgres,redis
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leasecheck.ci.plugin_args import DEFAULT_NEMESIS, DEFAULT_TIME_LIMIT, GATE_MAX_TIME_LIMITS

#: the pytest plugin's default gate (leasecheck.ci.plugin_args, plugin_runner): its faults, time limit, evidence wait
GATE = ["--nemesis", DEFAULT_NEMESIS, "--time-limit", f"{DEFAULT_TIME_LIMIT:g}", "--evidence-wait", f"{DEFAULT_TIME_LIMIT:g}",
        "--fail-fast"]
#: what the plugin adds to a gate expected valid (plugin_runner: ``until_covered`` and its cap)
UNTIL_COVERED = ["--until-covered", "--max-time", f"{GATE_MAX_TIME_LIMITS * DEFAULT_TIME_LIMIT:g}"]
MIN_COUNT = 3


@dataclass
class Runs:
    """One backend's runs of one gate."""

    wall: list[float] = field(default_factory=list)
    covered_after: list[float] = field(default_factory=list)
    ran: list[float] = field(default_factory=list)
    met: int = 0
    at_least_once: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    short: Counter[str] = field(default_factory=Counter)


def _run(target: str, seed: int, store: Path, until_covered: bool) -> tuple[float, dict[str, Any]]:
    args = [sys.executable, "-m", "leasecheck", "run", "--target", target, "--seed", str(seed), "--store", str(store),
            *GATE, *(UNTIL_COVERED if until_covered else []), "--json"]
    began = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - began
    try:
        return wall, json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"{target} seed {seed}: exit {done.returncode}, no results: {done.stderr[-500:]}") from None


def _note(runs: Runs, wall: float, results: dict[str, Any]) -> None:
    runs.wall.append(wall)
    valid = results.get("valid")
    runs.verdicts["valid" if valid is True else "invalid" if valid is False else "unknown"] += 1
    cov = results.get("coverage") or {}
    counts, applicable = cov.get("counts", {}), cov.get("applicable", [])
    short = {s: counts.get(s, 0) for s in applicable if counts.get(s, 0) < MIN_COUNT}
    runs.met += not short
    runs.at_least_once += all(counts.get(s, 0) for s in applicable)
    goal = cov.get("goal")
    if isinstance(goal, dict):
        if goal.get("covered_after_s") is not None:
            runs.covered_after.append(goal["covered_after_s"])
        runs.ran.append(goal.get("ran_s") or 0.0)
        runs.short.update(list(goal.get("short") or {}))  # how many runs each situation was short in


def _mw(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} / {max(xs):.1f}" if xs else "-"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_until_covered", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds 1..N per backend")
    p.add_argument("--targets", default="sqlite,postgres,redis")
    p.add_argument("--store", type=Path, default=None, help="where the run folders go (default: a temporary folder)")
    a = p.parse_args(argv)
    store = a.store or Path(tempfile.mkdtemp(prefix="bench-until-covered-"))
    print(f"default gate ({' '.join(GATE)}; until covered: {' '.join(UNTIL_COVERED)}), seeds 1-{a.seeds}; figures are median / worst", flush=True)
    print(f"| backend | until-covered: goal met; seconds to covered | every situation {MIN_COUNT}x (1x) | test proper | whole run "
          f"| short at the cap (runs) | fixed-time: whole run | every situation {MIN_COUNT}x (1x) | verdicts (until-covered / fixed) |")
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    for target in a.targets.split(","):
        covered, fixed = Runs(), Runs()
        for seed in range(1, a.seeds + 1):
            for runs, until in ((covered, True), (fixed, False)):
                wall, results = _run(target, seed, store, until)
                _note(runs, wall, results)
                print(f"{target} seed {seed} {'until-covered' if until else 'fixed-time'}: {results.get('valid')} in {wall:.1f} s",
                      file=sys.stderr, flush=True)
        n = a.seeds
        shorts = ", ".join(f"{s} ({k} runs)" for s, k in covered.short.most_common()) or "none"
        print(f"| {target} | {covered.met}/{n}; {_mw(covered.covered_after)} s | {covered.met}/{n} ({covered.at_least_once}/{n}) | "
              f"{_mw(covered.ran)} s | "
              f"{_mw(covered.wall)} s | {shorts} | {_mw(fixed.wall)} s | {fixed.met}/{n} ({fixed.at_least_once}/{n}) | "
              f"{dict(covered.verdicts)} / {dict(fixed.verdicts)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
