"""Checking while the run goes, from the harness's side: anomalies said as proven, ``--fail-fast``, nodes closed
mid-run, a paused worker that no longer holds the history back, snapshots, and the fallback to the file.

Every run here (as every run of the suite: tests/conftest.py sets LEASECHECK_CROSSCHECK) also checks its history
after the end and fails if that verdict differs from the online checker's.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from leasecheck.histories import Header, HistoryWriter, read_history
from leasecheck.report.live import NODES_PER_KIND, is_resaid
from leasecheck.run.following import Following
from leasecheck.run.merge import Merge
from leasecheck.run.options import RunOptions
from leasecheck.run.runner import run
from leasecheck.run.workload_options import Workload
from leasecheck.rundir.runfolder import RunFolder


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leasecheck", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def _said(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in RunFolder(run_dir).anomalies.read_text().splitlines()]


def test_fail_fast_stops_a_broken_variant_at_its_first_anomaly_with_the_proof_on_record(tmp_path: Path) -> None:
    """Red (exit 1) long before the time limit; what was said is in the verdict, as proven, with its ops."""
    r = _cli("run", "--target", "sqlite-fence-at-commit", "--seed", "2", "--time-limit", "120", "--fail-fast", "--json",
             "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    results = json.loads(r.stdout)
    run_dir = Path(results["run_dir"])
    assert results["valid"] is False and results["run"]["stopped_at_first_anomaly"] is True
    assert results["run"]["seconds"] < 60  # the time limit was 120 s: it stopped at the proof
    said = _said(run_dir)
    assert said, "nothing said"
    first = said[0]
    listed = {(a["kind"], a["node"], tuple(a["ops"]), a["explanation"]) for a in results["anomalies"]}
    assert (first["kind"], first["node"], tuple(first["ops"]), first["explanation"]) in listed
    assert first["kind"] in {"stale-effect", "stale-commit", "fence-regression"} and first["said_s"] >= first["proof_s"]
    # the proof's ops are in the history, completed by the time it was said
    _, ops, _ = read_history(run_dir / "history.jsonl")
    cited = [op for op in ops if op.index in first["ops"]]
    assert len(cited) == len(first["ops"]) and all(op.complete_time is not None for op in cited)
    assert abs(max(op.complete_time for op in cited if op.complete_time is not None) - first["proof_s"] * 1e9) < 1000  # µs
    ops = ", ".join(map(str, first["ops"][:3])) + (", …" if len(first["ops"]) > 3 else "")
    assert f"anomaly {first['kind']} {first['node']} (ops {ops}) at {first['proof_s']:.3f} s\n" in r.stderr
    assert (run_dir / "report.html").is_file()  # the report is finished all the same


def test_a_full_run_says_each_anomaly_when_proven_and_goes_on(tmp_path: Path) -> None:
    r = _cli("run", "--target", "sqlite-fence-at-commit", "--seed", "3", "--time-limit", "8", "--json",
             "--store", str(tmp_path / "store"), cwd=tmp_path)
    assert r.returncode == 1
    results = json.loads(r.stdout)
    said = _said(Path(results["run_dir"]))
    assert "stopped_at_first_anomaly" not in results["run"] and results["run"]["seconds"] >= 8
    # every anomaly the verdict lists was said while the run went or when its node was judged, once
    listed = [(a["kind"], a["node"], tuple(a["ops"])) for a in results["anomalies"]]
    told = [(s["kind"], s["node"], tuple(s["ops"])) for s in said if not s.get("provisional")]
    # a node said provisionally to have no linearization is invalid in the verdict
    assert all(any(a["node"] == s["node"] for a in results["anomalies"]) for s in said if s.get("provisional"))
    assert sorted(told) == sorted(listed) and len(set(told)) == len(told)
    assert any(s["early"] for s in said)  # found while the run went, not only at the end
    # on stderr, in short: the first proof of each (kind, node) on one line under 120 characters, at most ten nodes
    # of a kind listed (then one line that says the rest are counted), and a summary that counts every proof
    lines = [line for line in r.stderr.splitlines() if line.startswith("anomaly ")]
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for s in said:
        first.setdefault((s["kind"], s["node"]), s)
    kinds = list(dict.fromkeys(k for k, _ in first))
    listed = [key for kind in kinds for key in [k for k in first if k[0] == kind][:NODES_PER_KIND]]
    assert len(said) > len(first) > NODES_PER_KIND  # the case the lines exist for: many proofs, many nodes of a kind
    proofs = Counter((s["kind"], s["node"]) for s in said)
    resaid = [f"anomaly {k} {n}: {c:,} proofs so far" for (k, n), m in proofs.items() if (k, n) in listed
              for c in range(2, m + 1) if is_resaid(c)]  # a listed (kind, node)'s count at its 10th, 100th, ... proof
    assert len(lines) == len(listed) + len(resaid) + sum(sum(k[0] == kind for k in first) > NODES_PER_KIND for kind in kinds), lines
    assert all(any(line.startswith(r + " (latest ops ") for line in lines) for r in resaid)
    for kind, node in listed:
        s = first[kind, node]
        ops = ", ".join(map(str, s["ops"][:3])) + (", …" if len(s["ops"]) > 3 else "")
        assert f"anomaly {kind} {node} (ops {ops}) at {s['proof_s']:.3f} s" + (", provisional" if s.get("provisional") else "") in lines
    assert all(len(line) < 120 for line in lines)
    by_kind = Counter(s["kind"] for s in said)
    assert (f"anomalies while running: {len(said)} proofs of {len(first)} (kind, node) pairs "
            f"({', '.join(f'{k} {n}' for k, n in by_kind.most_common())}) in {len(lines)} lines; "
            f"all in anomalies.jsonl of the run folder") in r.stderr.splitlines()


def test_nodes_nobody_can_touch_are_closed_while_the_run_goes(tmp_path: Path) -> None:
    """With a short list of nodes a worker may read again, done nodes are read, judged and forgotten mid-run; the
    verdict is still leasecheck check's (LEASECHECK_CROSSCHECK), and no closed node is read again at the end."""
    result = run(RunOptions(target="sqlite", seed=5, time_limit=10, store=str(tmp_path / "store"), workload=Workload(seen_nodes=2)))
    assert result.verdict.valid is True
    closed = result.stats["nodes_closed_while_running"]
    assert closed >= 3  # a dozen on a quiet machine; 3 beside two CPU-bound jobs and a full suite
    _, ops, _ = read_history(result.run_dir / "history.jsonl")
    workers = {op.process for op in ops if op.f == "claim"}
    harness_reads = [op for op in ops if op.f == "read" and op.process not in workers]
    by_node: dict[str, int] = {}
    for op in harness_reads:
        by_node[op.node] = by_node.get(op.node, 0) + 1
    assert set(by_node.values()) == {1}  # every node read by the harness once: mid-run or in the final phase
    # a closed node's read is its last op
    last = {op.node: op for op in sorted(ops, key=lambda o: o.invoke_time)}
    assert all(last[op.node] is op for op in harness_reads)


def test_a_halted_stream_holds_nothing_back_and_what_it_sends_later_is_stamped_at_its_resume(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "history.jsonl", Header(1000, 10, {}))
    merge = Merge(writer)
    paused, other = merge.stream(), merge.stream()
    paused.blocked = other.blocked = False
    t = merge.now() + 1000
    merge.push(paused, t + 100, 0, "invoke", "claim", "n", {"owner": "w0"})
    merge.push(other, t + 200, 1, "invoke", "claim", "m", {"owner": "w1"})
    assert merge.watermark() == t + 100  # the paused stream holds it
    merge.want_halt(paused)
    merge.halt(paused)
    assert merge.watermark() == t + 200
    assert merge.flush() == 2
    merge.resume(paused)
    floor = paused.floor
    assert floor >= t + 200 and not paused.halted
    merge.push(paused, t + 150, 0, "ok", "claim", "n", {"epoch": 1})  # stamped before the pause, sent after: at the resume
    merge.push(other, floor + 1, 1, "ok", "claim", "m", {"epoch": 1})
    merge.drain()
    writer.close()
    _, ops, _ = read_history(tmp_path / "history.jsonl")
    (n,) = [op for op in ops if op.node == "n"]
    assert n.complete_time == floor  # the interval grew: it still contains the real one


def test_a_halt_asked_for_after_the_resume_is_void(tmp_path: Path) -> None:
    merge = Merge(HistoryWriter(tmp_path / "h.jsonl", Header(1000, 10, {})))
    s = merge.stream()
    s.blocked = False
    merge.want_halt(s)
    merge.resume(s)  # continued before the recorder drained its pipe
    merge.halt(s)
    assert not s.halted and merge.watermark() == s.bound


def test_a_failing_checker_thread_leaves_the_verdict_to_the_file(tmp_path: Path) -> None:
    """The online checker is ours: if it fails, the run checks its history after the end instead (and logs why)."""
    writer = HistoryWriter(tmp_path / "history.jsonl", Header(1000, 10, {}))

    def broken(events: Any) -> Any:
        raise RuntimeError("a bug")

    following = Following(writer, tmp_path, budget=None, windows=broken, say=None)
    following.start()
    writer.invoke(0, "claim", "n", {"owner": "w0"})
    writer.complete(0, "ok", {"epoch": 1})
    writer.close()
    assert following.finish(timeout=30) is None and isinstance(following.error, RuntimeError)


def test_durations_take_units_and_a_bad_one_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from leasecheck.run.flags import parse

    assert parse(["--time-limit", "2m"])["time_limit"] == 120.0
    assert parse(["--time-limit", "8h"])["time_limit"] == 8 * 3600.0
    assert parse(["--time-limit", "90s", "--snapshot-every", "0"])["snapshot_every_s"] == 0.0
    r = _cli("run", "--time-limit", "8x", cwd=tmp_path)
    assert r.returncode == 3 and "8x" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3
    assert not (tmp_path / "store").exists()


def test_snapshots_of_the_verdict_so_far_while_the_run_goes(tmp_path: Path) -> None:
    result = run(RunOptions(target="sqlite", seed=2, time_limit=4, snapshot_every_s=1.0,
                            store=str(tmp_path / "store")))
    log = (result.run_dir / "leasecheck.log").read_text()
    assert "snapshot 1 of results.json written" in log and "snapshot 2 of results.json written" in log
    final = json.loads((result.run_dir / "results.json").read_text())
    assert "snapshot" not in final and final["valid"] in (True, "unknown")  # the last word is the verdict's, not a snapshot
    assert (result.run_dir / "report.html").is_file()
    assert not math.isnan(result.stats["seconds"])


def test_a_pause_tells_the_harness_once_its_victim_is_stopped_and_before_it_is_continued() -> None:
    """What lets the history stop waiting for a paused worker: ``halted`` only once the process is really stopped
    (its pipe holds all it wrote), ``resuming`` before SIGCONT (what it sends next is stamped from then)."""
    from leasecheck.machine.processes import stopped
    from leasecheck.nemesis.faults import PauseProcess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    calls: list[tuple[str, int, bool]] = []
    try:
        fault = PauseProcess(7, child.pid, halted=lambda p: calls.append(("halted", p, stopped(child.pid))),
                             resuming=lambda p: calls.append(("resuming", p, stopped(child.pid))))
        fault.start()
        fault.heal()
        assert calls == [("halted", 7, True), ("resuming", 7, True)]
        assert not stopped(child.pid) or child.poll() is not None
    finally:
        child.kill()
        child.wait()


def test_a_mismatch_between_the_online_and_the_offline_checker_names_each_difference_with_both_values() -> None:
    """What a CI log keeps of a mismatch, when the run folder is gone: the differing counts, cited ops and anomalies."""
    from leasecheck.checker.coverage import SITUATIONS, Coverage
    from leasecheck.checker.verdict import Anomaly, Verdict
    from leasecheck.run.judgement import OnlineMismatch, crosscheck

    def coverage(**counts: int) -> Coverage:
        return Coverage({**dict.fromkeys(SITUATIONS, 0), **{k.replace("_", "-"): n for k, n in counts.items()}})

    offline = Verdict(True, [], {"ops": 754, "nodes": 120}, coverage=coverage(claim_after_power_loss=6))
    online = Verdict(False, [Anomaly("lost-commit", "run-1/node-2", [228, 1043], "gone")], {"ops": 754, "nodes": 119},
                     cited={228: None, 1043: None}, coverage=coverage(claim_after_power_loss=5))
    crosscheck(offline, offline, Path("history.jsonl"))  # the same face: nothing said
    try:
        crosscheck(online, offline, Path("history.jsonl"))
    except OnlineMismatch as e:
        said = str(e)
    else:
        raise AssertionError("no mismatch said")
    assert "coverage.claim-after-power-loss: online 5, offline 6" in said
    assert "verdict.stats.nodes: online 119, offline 120" in said
    assert "cited: online only [228, 1043], offline only []" in said
    assert "verdict.valid: online false, offline true" in said
    assert "verdict.stats.ops" not in said  # what agrees is not said
