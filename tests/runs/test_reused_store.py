"""Run after run against one store: a correct lease stays valid, whatever earlier runs left there.

The path teams take (``new-target`` ends with ``--url YOUR_STORE``, the pytest plugin
takes ``url=``) points every run, seed and CI job at one database. Node names were the
same in every run (``run-1/node-0``, ...), so a second run read the first one's
SUCCEEDED rows as its own: ``leasecheck run --target postgres --url ...`` twice was
valid, then ``non-linearizable`` x29 ("op 657 (read) shows SUCCEEDED with epoch 1, but
no commit of epoch 1 could have done that"). Now every run's nodes carry its run id.

Each store leasecheck supports, reference backends and the audited libraries in their
modes published valid, runs twice on one ``--url``: seed 1, then seed 1 again (a second run
on what the first left, and the same seed twice must not collide either); each run must be
valid. Three seeds in a row through the pytest plugin (``seeds=3``), on a team's own database
that a run used before, are the Postgres journey's gate (tests/runs/test_journeys.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stores import Store

#: every store kind's correct backends: the reference leases, and the libraries' modes AUDITS.md publishes valid
CORRECT = [
    "sqlite", "postgres", "redis", "redis-token",
    "portalocker-redis-fenced", "kazoo-lock-zxid", "etcd3-lock-revision", "sqlalchemy-dlock", "filelock",
]
SEEDS = (1, 1)
#: short runs that go on, past their 2 s, until they have the contention a valid verdict needs (a loaded machine's
#: 2 s held no contended claim on kazoo-lock-zxid once: unknown), never a verdict on too little
QUICK = ["--nemesis", "none", "--time-limit", "2", "--evidence-wait", "30"]


def run(target: str, url: str, seed: int, store: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "run", "--target", target, "--url", url, "--seed", str(seed), *QUICK,
         "--store", str(store), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode in (0, 1, 2), f"exit {done.returncode}: {done.stderr[-2000:]}"
    results: dict[str, Any] = json.loads(done.stdout)
    return results


@pytest.mark.parametrize("target", CORRECT)
def test_runs_on_one_store_are_each_valid(target: str, store_for: Callable[[str], Store], tmp_path: Path) -> None:
    url = store_for(target).url
    seen: set[str] = set()
    for i, seed in enumerate(SEEDS):
        results = run(target, url, seed, tmp_path / "store")
        assert results["valid"] is True, (
            f"run {i + 1} of {len(SEEDS)} (seed {seed}) on one store: {results['valid']} {results.get('reason')};"
            f" {[(a['kind'], a['node'], a['ops']) for a in results['anomalies'][:5]]}; {results['run_dir']}"
        )
        history = Path(results["run_dir"]) / "history.jsonl"
        nodes = {json.loads(line)["node"] for line in history.read_text().splitlines()[1:] if '"node"' in line}
        ids = {n.split("/")[0] for n in nodes}
        assert len(ids) == 1 and not ids & {n.split("/")[0] for n in seen}, f"node names shared between runs: {sorted(ids)}"
        seen |= nodes
