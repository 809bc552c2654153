"""Output for people and for CI logs, through the real ``leasecheck`` command with stdout piped.

What a CI log needs (issue 9, item 7): a bounded verdict (at most five
anomalies of a kind, then where the rest are), lines never broken inside a
number, times in milliseconds, the seed before anything can go wrong, plain
progress lines while the run goes, and one ``ops`` count.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from leasecheck.histories.format import Header
from leasecheck.histories.writer import HistoryWriter
from leasecheck.report.figures import ops_text, seconds_text
from leasecheck.report.live import LINE_MAX, NODES_PER_KIND, LiveAnomalies
from leasecheck.report.terminal import SHOWN_PER_KIND

#: the refusals one node gets (the checker lists at most 100 per node and kind)
REFUSALS = 80
NODES = 50


def leasecheck(*args: str) -> list[str]:
    return [sys.executable, "-m", "leasecheck", *args]


def piped_env() -> dict[str, str]:
    """The environment of a CI job: no terminal, and a COLUMNS that must not make us wrap."""
    return {**os.environ, "COLUMNS": "80", "TERM": "dumb"}


def always_refused(path: Path, nodes: int = NODES, refusals: int = REFUSALS) -> Path:
    """What an adapter that always refuses records: per node one grant, then refusals long after it expired.

    Every refusal is a ``stuck-lease`` (ttl 10 ms, uncertainty 1 ms): 4,000 of one kind.
    Times are off the millisecond grid, so the explanations need every digit they print.
    """
    t = 1_000_003
    with HistoryWriter(path, Header(10, 1, {"target": "always-refuses"})) as w:
        for n in range(nodes):
            node = f"run-1/node-{n}"
            w.invoke(0, "claim", node, {"owner": "w0"}, at=t)
            t += 1_234_567
            w.complete(0, "ok", {"epoch": 1}, at=t)
            for _ in range(refusals):
                t += 20_000_000 + 7_777
                w.invoke(0, "claim", node, {"owner": "w0"}, at=t)
                t += 3_333
                w.complete(0, "fail", {"reason": "held"}, at=t)
    return path


def test_check_prints_five_anomalies_per_kind_then_says_where_the_rest_are(tmp_path: Path) -> None:
    history = always_refused(tmp_path / "history.jsonl")
    total = NODES * REFUSALS
    done = subprocess.run(leasecheck("check", str(history)), capture_output=True, text=True, env=piped_env(), timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    shown = [line for line in lines if re.match(r"stuck-lease on \S+, ops \[", line)]
    assert len(shown) == SHOWN_PER_KIND
    assert f"… and {total - SHOWN_PER_KIND:,} more stuck-lease: --json or --explain for all" in lines
    assert len(lines) < 40  # not 4,000 explanations: printing them took longer than finding them
    assert re.search(rf"^stuck-lease\s+{total:,}\s*$", done.stdout, re.M), done.stdout[:600]

    as_json = subprocess.run(leasecheck("check", "--json", str(history)), capture_output=True, text=True, timeout=120)
    verdict = json.loads(as_json.stdout)
    assert len(verdict["anomalies"]) == total and verdict["stats"]["anomalies"] == {"stuck-lease": total}


def test_piped_output_never_breaks_a_line_and_prints_times_in_ms(tmp_path: Path) -> None:
    history = always_refused(tmp_path / "history.jsonl")
    done = subprocess.run(leasecheck("check", str(history)), capture_output=True, text=True, env=piped_env(), timeout=120)
    as_json = subprocess.run(leasecheck("check", "--json", str(history)), capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    explanations = [a["explanation"] for a in json.loads(as_json.stdout)["anomalies"][:SHOWN_PER_KIND]]
    assert all(len(e) > 80 for e in explanations)  # long enough that an 80-column console would wrap them
    for explanation in explanations:
        assert explanation in lines  # whole, on one line
        times = re.findall(r"at (\d+\.\d+ m?s)", explanation)
        assert times and all(re.fullmatch(r"\d+\.\d{3} ms", t) for t in times), explanation
    assert "invoked at 22.242 ms" in explanations[0]  # the first refusal, invoked at 22,242,347 ns


def test_run_with_stdout_piped_prints_the_seed_first_and_progress_while_it_runs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = leasecheck("run", "--target", "sqlite", "--nemesis", "pause", "--nemesis-interval", "0.5",
                      "--time-limit", "3", "--concurrency", "3", "--store", str(store))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=piped_env(), cwd=tmp_path)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    seed = re.search(r"\bseed (\d+)\b", first)
    assert seed, f"the first line does not give the seed: {first!r}"
    progress = None
    lines = [first]
    for line in proc.stdout:  # synchronised on the output itself: each line as it arrives
        lines.append(line)
        if "ops so far" in line:
            progress = line
            # the run is still going: its results are written only after the workload and the check
            assert not list(store.glob("*/*/results.json")), "the progress line came only at the end"
            break
    rest, err = proc.communicate(timeout=120)
    lines += rest.splitlines(keepends=True)
    assert progress is not None, "".join(lines) + err
    assert re.search(r"ops so far [\d,]+ \(ok [\d,]+, fail [\d,]+, info [\d,]+\).*faults: ", progress)
    assert proc.returncode in (0, 1, 2), err

    results = json.loads(next(store.glob("*/*/results.json")).read_text())
    assert results["seed"] == int(seed.group(1))
    ops_lines = [line.split(None, 1) for line in lines if line.split()[:1] == ["ops"]]
    assert [[k, v.strip()] for k, v in ops_lines] == [["ops", ops_text(results["stats"], results["run"])]], \
        "one ops count, the verdict's"


def test_explain_prints_every_anomaly(tmp_path: Path) -> None:
    history = always_refused(tmp_path / "history.jsonl", nodes=2, refusals=4)
    done = subprocess.run(leasecheck("check", "--explain", str(history)), capture_output=True, text=True, env=piped_env(), timeout=120)
    assert done.returncode == 1, done.stderr
    assert sum(re.match(r"stuck-lease on \S+, ops \[", line) is not None for line in done.stdout.splitlines()) == 8
    assert "more stuck-lease" not in done.stdout


def test_a_run_ends_with_its_coverage_and_records_it_in_results_json(tmp_path: Path) -> None:
    """Issue 10: the summary says how many of the situations that apply the run reached, and which never happened."""
    from leasecheck.histories.vocabulary import SITUATIONS, WORKLOAD_SITUATIONS

    done = subprocess.run(
        leasecheck("run", "--nemesis", "none", "--time-limit", "1", "--ttl", "100", "--seed", "2", "--coverage",
                   "--store", str(tmp_path / "store")),
        capture_output=True, text=True, env=piped_env(), timeout=180,
    )
    assert done.returncode in (0, 2), done.stderr[-2000:]
    results = json.loads(next((tmp_path / "store").glob("*/*/results.json")).read_text())
    coverage = results["coverage"]
    assert list(coverage["counts"]) == list(SITUATIONS) and coverage["applicable"] == list(WORKLOAD_SITUATIONS)
    assert coverage["missing"] == [s for s in WORKLOAD_SITUATIONS if not coverage["counts"][s]] and coverage["required"] == {}
    reached = len(WORKLOAD_SITUATIONS) - len(coverage["missing"])
    lines = done.stdout.splitlines()
    summary = [line for line in lines if line.startswith("coverage: ")]
    assert summary == [f"coverage: {reached}/18 situations reached" + (f"; never: {', '.join(coverage['missing'])}" if coverage["missing"] else "")]
    for situation in WORKLOAD_SITUATIONS:  # --coverage: one line per situation with its count
        assert any(line.split()[:2] == [situation, f"{coverage['counts'][situation]:,}"] for line in lines), situation


def test_live_anomaly_lines_say_each_kind_and_node_once_then_count() -> None:
    """A zombie's every later effect is another proof: one line for the first, the count at 10, 100, …; past ten
    nodes of a kind, one line saying the rest are counted; the summary counts every proof."""
    live = LiveAnomalies()
    node = "7341e3efe651/run-12/node-15"
    said = [live.line("stale-effect", node, [57, 91], 4.6931)]
    said += [live.line("stale-effect", node, [100 + i, 200 + i, 300, 400], 5.0 + i) for i in range(2, 101)]
    assert [s for s in said if s is not None] == [
        f"anomaly stale-effect {node} (ops 57, 91) at 4.693 s",
        f"anomaly stale-effect {node}: 10 proofs so far (latest ops 110, 210, 300, …) at 15.000 s",
        f"anomaly stale-effect {node}: 100 proofs so far (latest ops 200, 300, 300, …) at 105.000 s",
    ]
    assert all(len(s) < LINE_MAX for s in said if s is not None)
    more = [live.line("lost-commit", f"run-1/node-{i}", [i], 1.0, provisional=False) for i in range(NODES_PER_KIND + 5)]
    assert more[:NODES_PER_KIND] == [f"anomaly lost-commit run-1/node-{i} (ops {i}) at 1.000 s" for i in range(NODES_PER_KIND)]
    assert more[NODES_PER_KIND:] == [f"anomaly lost-commit on more than {NODES_PER_KIND} nodes: the next are counted in the summary",
                                     None, None, None, None]
    assert live.line("lost-commit", f"run-1/node-{NODES_PER_KIND + 1}", [1], 1.0) is None  # a counted node's count is never said
    assert live.line("non-linearizable", "run-1/node-3", [1, 2], 2.5, provisional=True) == \
        "anomaly non-linearizable run-1/node-3 (ops 1, 2) at 2.500 s, provisional"
    assert live.summary() == ("anomalies while running: 117 proofs of 17 (kind, node) pairs (stale-effect 100, lost-commit 16, "
                              "non-linearizable 1) in 15 lines; all in anomalies.jsonl")
    alone = LiveAnomalies()
    alone.line("stale-commit", "n", [1, 2], 0.5)
    assert alone.summary() is None  # every proof had a line of its own: nothing to add


def _rows(text: str) -> dict[str, str]:
    """A rich table's rows as printed off a terminal: first word → the rest of the line."""
    rows = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and value.strip():
            rows.setdefault(key, value.strip())
    return rows


def test_a_run_says_each_figure_as_one_number_in_the_terminal_results_json_and_the_report(tmp_path: Path) -> None:
    """Issue 34, item 7: the report counted the harness's reading process as a worker process (6 against the
    terminal's 5), gave the history's length in ms where the terminal gives seconds, and the ops once without saying
    that they include the harness's reads of every node; and the refusals had no breakdown in the verdict."""
    from html import unescape

    from leasecheck.histories import read_history
    from leasecheck.report.refusals import refusals_text

    # 10 s: a 5 s run beside two CPU-bound jobs met no refusal at all (ci), and the breakdown below needs some
    done = subprocess.run(leasecheck("run", "--seed", "1", "--time-limit", "10", "--store", str(tmp_path / "store")),
                          capture_output=True, text=True, env=piped_env(), timeout=300)
    assert done.returncode in (0, 2), done.stderr[-2000:]
    run_dir = next((tmp_path / "store").glob("*/*/results.json")).parent
    results = json.loads((run_dir / "results.json").read_text())
    stats, run = results["stats"], results["run"]
    page = (run_dir / "report.html").read_text()
    facts = {k: unescape(v) for k, v in re.findall(r'<div class="fact"><span>(.*?)</span><b>(.*?)</b></div>', page)}
    terminal = _rows(done.stdout)

    # ops: the history's, then the workers' and the harness's reads, counted from the history itself
    _, ops, reader = read_history(run_dir / "history.jsonl")
    workers = {op.process for op in ops if op.f == "claim"}
    harness = sum(op.process not in workers for op in ops)
    assert harness > 0 and len(ops) == stats["ops"] and run["ops"] == len(ops) - harness
    said = f"{len(ops):,} ({len(ops) - harness:,} by the workers, {harness:,} reads by the harness)"
    assert terminal["ops"] == facts["ops"] == said
    # worker processes: the pool's, not the history's process numbers (the harness reads under one of its own)
    assert terminal["faults"].endswith(f"; worker processes {run['worker_processes']}")
    # the pool: the 5 it started with and one for each worker a kill took (whether a kill landed varies with the load)
    killed = sum(len(e.value.get("victims", [])) for e in reader.nemesis if e.f == "kill" and isinstance(e.value, dict))
    assert facts["worker processes"] == str(run["worker_processes"]) == str(5 + killed)
    assert facts["timeline lanes"] == f"5 for {len({op.process for op in ops})} process numbers"
    # one unit for lengths of time
    assert terminal["seconds"] == facts["seconds"] == seconds_text(run["seconds"])
    assert re.fullmatch(r"\d+\.\d s", facts["history spans"])
    # the refusals, by reason, in the verdict block and the report alike, adding up to the fails
    refusals = run["refusals"]
    assert refusals["total"] == stats["fail"] == sum(refusals["reasons"].values()) > 0
    assert refusals["reasons"] == dict(Counter(op.result["reason"] for op in ops if op.type == "fail"))
    assert terminal["refusals"] == facts["refusals"] == refusals_text(refusals)
    assert terminal["refusals"] == f"{stats['fail']:,}: " + ", ".join(f"{r} {n:,}" for r, n in refusals["reasons"].items())


def test_refusals_a_fault_explains_are_counted_under_it() -> None:
    """Unavailable and error refusals whose op a fault hit are said with the fault; the workload's own are not."""
    from leasecheck.checker.attribution import FaultWindow
    from leasecheck.histories import Op
    from leasecheck.report.refusals import Refusals, refusals_text

    def fail(i: int, process: int, f: str, reason: str, start: int, end: int) -> Op:
        return Op(index=i, process=process, f=f, node="n", value={}, type="fail", result={"reason": reason},
                  invoke_time=start, complete_time=end)

    store = FaultWindow("kill-store", 100, 200, frozenset(), True, "killed", "killed the store")
    cut = FaultWindow("partition", 300, None, frozenset({2}), False, "cut off from the store", "cut every worker off")
    r = Refusals()
    for op in [fail(0, 1, "claim", "held", 10, 20), fail(1, 1, "claim", "unavailable", 150, 160),
               fail(2, 3, "renew", "unavailable", 190, 210),  # in flight when the store was killed
               fail(3, 3, "claim", "unavailable", 210, 220),  # after the store was back: no fault explains it
               fail(4, 2, "effect", "unavailable", 400, 401), fail(5, 1, "effect", "unavailable", 400, 401),  # 1 is not cut
               fail(6, 2, "commit", "error", 500, 510), fail(7, 1, "renew", "stale", 500, 510)]:
        r.add(op)
    obj = r.to_json([store, cut])
    assert obj["total"] == 8 and obj["reasons"] == {"held": 1, "stale": 1, "unavailable": 5, "error": 1}
    assert obj["explained"] == [
        {"reason": "unavailable", "fault": "kill-store", "did": "killed the store", "count": 2, "ops": {"claim": 1, "renew": 1}},
        {"reason": "unavailable", "fault": "partition", "did": "had its worker cut off from the store", "count": 1,
         "ops": {"effect": 1}},
        {"reason": "error", "fault": "partition", "did": "had its worker cut off from the store", "count": 1, "ops": {"commit": 1}},
    ]
    assert refusals_text(obj) == ("8: held 1, stale 1, unavailable 5 (2 while kill-store killed the store, 1 while partition "
                                  "had its worker cut off from the store), error 1 (1 while partition had its worker cut off "
                                  "from the store)")
    assert refusals_text(Refusals().to_json([])) == "none"


def test_refusals_of_a_node_whose_record_a_failover_lost_are_said_with_the_failover() -> None:
    """After a failover that lost writes, every claim of a lost node is refused 'no such node' long after the fault's
    window closed; those are said as the failover's doing, the other errors are not."""
    from leasecheck.checker.attribution import FaultWindow
    from leasecheck.histories import Op
    from leasecheck.report.refusals import Refusals, refusals_text

    def error(i: int, message: str, start: int) -> Op:
        return Op(index=i, process=1, f="claim", node="n", value={}, type="fail",
                  result={"reason": "error", "message": message}, invoke_time=start, complete_time=start + 5)

    early = FaultWindow("kill-primary", 50, 80, frozenset(), True, "killed", "killed the primary")
    failover = FaultWindow("failover", 100, 200, frozenset(), True, "failed over", "failed the cluster over")
    r = Refusals()
    for op in [error(0, "no such node 'x' (no key x)", 40),  # before any fault: nothing explains it
               error(1, "no such node 'x' (no key x)", 300), error(2, "no such node 'y'", 900),
               error(3, "syntax error", 400)]:  # an error of another kind: not the failover's
        r.add(op)
    obj = r.to_json([failover, early])
    assert obj["explained"] == [{"reason": "error", "fault": "failover", "did": "lost the node's record", "count": 2,
                                 "ops": {"claim": 2}, "after": True}]
    assert refusals_text(obj) == "4: error 4 (2 after failover lost the node's record)"
