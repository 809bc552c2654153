"""Whole runs under ``power-loss`` (issue 36): each store's durability profile decides whether a power cut loses what
it acknowledged, and the run says so.

The store's server runs on the power-loss layer (a FUSE file system that keeps what was never fsynced in its own
memory, tests/test_powerfs.py); ``power-loss`` SIGKILLs it, drops that memory and starts it again on what survived.
On ``durable`` (fsync before every reply) the reference backend stays valid; on ``fast`` (acknowledged before
fsync: Redis' ``appendfsync everysec``) it is caught with the kinds a lost write shows as, each anomaly citing the
power loss; a run that cannot have the layer is refused in one line before anything starts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from leasecheck.histories import read_history
from leasecheck.run.options import RunOptions
from leasecheck.run.runner import run

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(), reason="mounts a FUSE layer: root")

#: what a write a power cut took back shows as
LOST = {"lost-effect", "lost-commit", "non-linearizable", "duplicate-epoch", "epoch-regression", "overlapping-lease",
        "stale-effect", "stale-commit", "stale-renew", "duplicate-commit", "fence-regression", "premature-expiry"}


@pytest.mark.parametrize("profile, valid", [("durable", True), ("fast", False)])
def test_redis_under_power_loss_keeps_what_it_acknowledged_only_when_it_fsyncs_first(
        tmp_path: Path, profile: str, valid: bool) -> None:
    result = run(RunOptions(target="redis", nemesis=("power-loss",), store_config=profile, seed=1, time_limit=15.0,
                            evidence_wait_s=30.0, store=str(tmp_path / "store")))
    header, ops, reader = read_history(result.run_dir / "history.jsonl")
    assert header.meta["durability"]["profile"] == profile
    assert ("appendfsync always" if valid else "appendfsync everysec") in header.meta["durability"]["settings"]
    losses = [e for e in reader.nemesis if isinstance(e.value, dict) and e.value.get("fault") == "power-loss"
              and "dropped" in e.value]
    assert losses, "no power loss ran"
    assert result.verdict.valid is valid, (result.reason, result.run_dir)
    if not valid:
        kinds = {a.kind for a in result.verdict.anomalies}
        assert kinds and kinds <= LOST, kinds
        indices = {op.index for op in ops}
        assert all(a.ops and set(a.ops) <= indices for a in result.verdict.anomalies)
        assert any(f.get("fault") == "power-loss" for a in result.verdict.anomalies for f in (a.faults or ()))
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(result.run_dir) in line]


@pytest.mark.parametrize("args, said", [
    (["--target", "sqlite"], "sqlite has no store server to pause or kill (nemesis power-loss)"),
    (["--target", "redis", "--url", "redis://127.0.0.1:1"], "power-loss acts on a store server that leasecheck started itself"),
    (["--target", "redis", "--env", "docker"], "power-loss needs the store's server on the power-loss layer (powerfs): leasecheck"),
    (["--target", "redis", "--store-config", "fastest"], "--store-config must be one of durable, default, fast, not 'fastest'"),
], ids=["no-server", "a-store-of-yours", "in-a-container", "no-such-profile"])
def test_a_power_loss_run_that_cannot_have_the_layer_is_refused_before_it_starts(tmp_path: Path, args: list[str],
                                                                                   said: str) -> None:
    done = subprocess.run(["python3", "-m", "leasecheck", "run", "--nemesis", "power-loss", "--store", str(tmp_path / "s"),
                           *args], capture_output=True, text=True, timeout=60)
    assert done.returncode in (2, 3) and said in done.stderr, done.stderr  # 2: click's own usage error
    assert not (tmp_path / "s").exists()


def test_the_report_says_the_profile_and_its_settings(tmp_path: Path) -> None:
    result = run(RunOptions(target="sqlite", store_config="fast", seed=2, time_limit=2.0, store=str(tmp_path / "store")))
    header, _, _ = read_history(result.run_dir / "history.jsonl")
    assert header.meta["durability"] == {"profile": "fast", "settings": ["PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL"]}
    page = (result.run_dir / "report.html").read_text()
    assert "durability.settings" in page and "PRAGMA synchronous=NORMAL" in page
    assert json.loads((result.run_dir / "test.json").read_text())["options"]["store_config"] == "fast"
