"""The benchmarks' histories are what their tables say: real-shaped ones valid, planted ones caught.

A benchmark row is only as honest as its input: a generator that produced an
invalid history would make leasecheck look slow on "valid" rows (it would stop
at the first anomaly), and a planter that missed would make the invalid rows
measure nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.gen import generate
from bench.plant import KINDS, plant
from leasecheck.checker import check_source
from leasecheck.histories import read_history


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("real") / "real.jsonl"
    generate(path, 4000, 16, 100, 0.01, 3, shape="real")
    return path


@pytest.mark.parametrize("seed", [1, 2])
def test_real_shaped_histories_are_valid_and_real_shaped(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "h.jsonl"
    generate(path, 5000, 16, 100, 0.01, seed, shape="real")
    verdict = check_source(path)
    assert verdict.valid is True, verdict.anomalies[:3]
    _, ops, _ = read_history(path)
    nodes = {op.node for op in ops}
    assert 5 <= len(ops) / len(nodes) <= 15  # few ops per node, as a run's
    assert any(op.type == "info" for op in ops) and any(op.type == "fail" and op.result.get("reason") == "held" for op in ops)


@pytest.mark.parametrize("kind", KINDS)
def test_every_planted_kind_is_found_where_it_was_planted(real: Path, tmp_path: Path, kind: str) -> None:
    planted = plant(real, tmp_path / "planted.jsonl", kind)
    verdict = check_source(tmp_path / "planted.jsonl")
    assert verdict.valid is False
    found = [a for a in verdict.anomalies if a.kind == kind]
    assert found, f"{kind} not found: {[a.kind for a in verdict.anomalies]}"
    assert any(a.node == planted.node and planted.op in a.ops for a in found), (planted, found[:3])
