"""AUDITS.md's "Leases under power loss", held: its table has a row for every store and profile under ``power-loss``
and for every cluster kind under ``power-loss-member`` and ``power-loss-all``, and the rows it publishes valid on
``durable`` stay valid, each run once with the command the table prints (its seed), as a reader would run it.

A published ``valid`` gets one seed and no second chance (as tests/support/audits.py holds the libraries' audits): a run that
finds an anomaly there is a finding, never luck. The caught rows are not re-run here: tests/runs/test_power_runs.py holds
Redis ``fast`` caught, and a proof is in each row.

Its "Libraries and queues under power loss" has a row for every library bench/bench_power_libraries.py measures, with
that bench's command, and the fenced lock's row (a fence token handed out twice across a cut) is run as published.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from paths import REPO

from leasecheck.run.clusters import CLUSTERS

SECTION = "## Leases under power loss"
#: the published rows this test runs: durable rows published valid, a single server of each store and a cluster of
#: each kind that has one (redis-sentinel-wait and postgres-standby hold what their siblings do), each under 40 s
HELD = (("redis", "power-loss"), ("postgres", "power-loss"), ("redis-sentinel", "power-loss-all"),
        ("postgres-standby-sync", "power-loss-all"), ("etcd-cluster", "power-loss-all"))


def published(section: str = SECTION) -> list[dict[str, str]]:
    """The section's table, one dict per row (its header's words as keys)."""
    text = (REPO / "AUDITS.md").read_text()
    assert section in text, f"AUDITS.md has no section {section!r}"
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def row(what: str, fault: str, profile: str = "durable") -> dict[str, str]:
    found = [r for r in published() if r["store or cluster"] == f"`{what}`" and r["fault"] == f"`{fault}`"
             and r["profile"] == profile]
    assert len(found) == 1, f"AUDITS.md publishes {len(found)} rows for {what} under {fault} ({profile})"
    return found[0]


def test_the_table_has_every_store_profile_and_cluster_kind() -> None:
    for store in ("redis", "postgres"):
        for profile in ("durable", "default", "fast"):
            assert row(store, "power-loss", profile)["verdict"]
    for kind in CLUSTERS:
        for fault in ("power-loss-member", "power-loss-all"):
            assert row(kind, fault)["verdict"]
    for r in published():
        assert re.fullmatch(r"`leasecheck run [^`]+ --seed \d+`", r["command"]), r["command"]
        assert re.match(r"(\*\*caught\*\*|valid) \d+/\d+", r["verdict"]), r["verdict"]
    assert "SQLite" in (REPO / "AUDITS.md").read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(), reason="FUSE layers, members in namespaces: root")
@pytest.mark.parametrize("what, fault", HELD, ids=[f"{w}-{f}" for w, f in HELD])
def test_a_durable_row_published_valid_stays_valid(tmp_path: Path, what: str, fault: str) -> None:
    r = row(what, fault)
    assert r["verdict"].startswith("valid"), r
    command = shlex.split(r["command"].strip("`"))
    assert command[:2] == ["leasecheck", "run"]
    done = subprocess.run(["python3", "-m", "leasecheck", *command[1:], "--store", str(tmp_path / "store"), "--json"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.startswith("{"), f"{r['command']}: exit {done.returncode}, no result; stderr: {done.stderr[-4000:]}"
    result = json.loads(done.stdout)
    assert done.returncode == 0 and result["valid"] is True, (
        f"{r['command']}: {result['valid']} ({result.get('reason')}); anomalies "
        f"{[(a['kind'], a['node'], a['ops']) for a in result.get('anomalies') or []][:5]}; run folder {result.get('run_dir')}")
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(tmp_path) in line]


LIBRARIES = "## Libraries and queues under power loss"


def test_the_libraries_table_has_every_row_the_bench_measures() -> None:
    from bench.bench_power_libraries import ROWS

    rows = published(LIBRARIES)
    assert [r["target"] for r in rows] == [f"`{row.how}`" for row in ROWS]
    for r, row in zip(rows, ROWS, strict=True):
        assert r["command"] == f"`{row.shown(1)}`", (r["command"], row.shown(1))
        assert re.match(r"(\*\*caught\*\* \d/3|valid \d/3|unknown \d/3)", r["verdict"]), r["verdict"]


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(), reason="a FUSE layer under the store: root")
def test_a_fenced_redis_lock_on_redis_as_shipped_hands_a_token_out_twice_across_a_power_cut(tmp_path: Path) -> None:
    """The table's fenced portalocker row, run as published: the cut takes back the token counter, and a token
    granted before it is granted again after it (duplicate-epoch, each such anomaly citing the power loss)."""
    [r] = [r for r in published(LIBRARIES) if r["target"] == "`portalocker-redis-fenced`"]
    assert r["verdict"].startswith("**caught**") and "duplicate-epoch" in r["kinds (the power cut's)"], r
    command = shlex.split(r["command"].strip("`"))
    out = tmp_path / "result.json"
    with out.open("w") as f:
        done = subprocess.run(["python3", "-m", "leasecheck", *command[1:], "--store", str(tmp_path / "store"), "--json"],
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=600, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    result = json.loads(out.read_text())
    assert done.returncode == 1 and result["valid"] is False, (result.get("reason"), done.stderr[-2000:])
    twice = [a for a in result["anomalies"] if a["kind"] == "duplicate-epoch"]
    assert twice and all(any(f["fault"] == "power-loss" for f in a["faults"]) for a in twice), twice[:2]
    events = [json.loads(line) for line in (Path(result["run_dir"]) / "history.jsonl").read_text().splitlines()[1:]]
    cuts = [e["time"] for e in events if e["process"] == "nemesis" and e["f"] == "kill"]
    done_at = {}
    pending: dict[object, int] = {}
    for e in events:
        if e["process"] != "nemesis":
            if e["type"] == "invoke":
                pending[e["process"]] = e["index"]
            else:
                done_at[pending.pop(e["process"])] = e["time"]
    first, again = twice[0]["ops"][:2]
    assert any(done_at[first] < t < done_at[again] for t in cuts), (twice[0], cuts)  # granted before a cut, again after
