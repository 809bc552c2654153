"""The run report (report.html) read as a file, without a browser: what it holds and what it must never hold.

A real run of a broken backend (sqlite-ttl-only under pauses, seed 3: the
zombie's stale commit) must leave a report that lists every anomaly its
results.json names, with op data that decodes back to exactly the history's
columns. The page must name no URL (it opens offline), and text from the
history (node names, a target) must not become markup. ``leasecheck report``
rebuilds a report, checks a history that has no results.json, and refuses a
bad history with exit 3 and one line. The page in a real browser (clicks,
zoom, first paint) is tests/runs/test_report_browser.py's business.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from paths import REPO
from report_page import Page, decoded, read_page

from leasecheck.histories import Header
from leasecheck.report.columns import Columns, read_columns
from leasecheck.report.inputs import replay_command
from leasecheck.run.flags import replay_flags

HOSTILE = "</script><img src=x onerror=alert(1)>"


def leasecheck(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leasecheck", *args], cwd=cwd or REPO, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def caught(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of a real run that catches sqlite-ttl-only's bug (exit 1)."""
    store = tmp_path_factory.mktemp("store")
    done = leasecheck("run", "--target", "sqlite-ttl-only", "--nemesis", "pause", "--time-limit", "6", "--seed", "3", "--store", str(store))
    assert done.returncode == 1, done.stdout + done.stderr
    return (store / "latest").resolve()


def assert_columns_match(page: Page, meta: dict[str, Any], cols: Columns) -> None:
    """Every column of the page decodes to exactly the history's: times to the nanosecond, names through the tables."""
    assert meta["n"] == cols.n
    assert list(decoded(page, "index")) == list(cols.index)
    assert list(decoded(page, "process")) == list(cols.process)
    assert [round(ms * 1e6) for ms in decoded(page, "start")] == list(cols.start_ns)
    assert [-1 if ms < 0 else round(ms * 1e6) for ms in decoded(page, "end")] == list(cols.end_ns)
    assert list(decoded(page, "f")) == list(cols.f)
    assert list(decoded(page, "outcome")) == list(cols.outcome)
    assert list(decoded(page, "reason")) == list(cols.reason)
    assert [meta["nodes"][c] for c in decoded(page, "node")] == [cols.nodes[c] for c in cols.node]
    assert [int(e) for e in decoded(page, "epoch")] == list(cols.epoch)


def assert_lanes_hold_one_op_at_a_time(page: Page, meta: dict[str, Any], cols: Columns) -> None:
    """Each process stays in one lane, and a lane's ops never overlap (an op that never completed ends at the lane's next op)."""
    lane = decoded(page, "lane")
    assert len(lane) == cols.n and (max(lane) + 1 if cols.n else 0) == meta["laneCount"]
    lane_of: dict[int, int] = {}
    by_lane: dict[int, list[int]] = {}
    for i in range(cols.n):
        assert lane_of.setdefault(cols.process[i], lane[i]) == lane[i], f"process {cols.process[i]} in two lanes"
        by_lane.setdefault(lane[i], []).append(i)
    for ops in by_lane.values():
        for a, b in pairwise(ops):
            assert cols.end_ns[a] == -1 or cols.end_ns[a] <= cols.start_ns[b], f"ops {cols.index[a]} and {cols.index[b]} overlap in a lane"


# ---------------------------------------------------------------------------- the caught bug


def test_report_of_a_caught_bug_lists_every_anomaly_of_its_results(caught: Path) -> None:
    results = json.loads((caught / "results.json").read_text())
    assert results["valid"] is False and results["anomalies"]
    _, page, meta = read_page(caught / "report.html")
    assert page.text_of["verdict"].strip() == "INVALID"
    assert meta["valid"] is False
    listed = Counter((a["kind"], a["node"], tuple(a["ops"]), a["explanation"]) for a in meta["anomalies"])
    wanted = Counter((a["kind"], a["node"], tuple(a["ops"]), a["explanation"]) for a in results["anomalies"])
    assert listed == wanted
    kinds = [a["kind"] for a in meta["anomalies"]]
    assert kinds == sorted(kinds, key=kinds.index), "anomalies are grouped by kind"
    # every cited op is an op of the page's data, so a click can find it
    index = set(decoded(page, "index"))
    assert all(i in index for a in results["anomalies"] for i in a["ops"])
    assert "--seed 3" in page.text_of["replay"] and "--target sqlite-ttl-only" in page.text_of["replay"]
    settings = page.text_of["settings"]
    assert "seed3" in settings.replace(" ", "") and "sqlite-ttl-only" in settings and "pause" in settings
    # the fault the run suffered is a band, with its victim
    # (a pause aimed inside ops may stop up to three workers, one per kind of op it landed in)
    assert [b["kind"] for b in meta["faults"]] == ["pause"] and 1 <= len(meta["faults"][0]["victims"]) <= 3


def test_report_columns_decode_to_the_history(caught: Path) -> None:
    _, page, meta = read_page(caught / "report.html")
    cols = read_columns(caught / "history.jsonl")
    assert_columns_match(page, meta, cols)
    assert_lanes_hold_one_op_at_a_time(page, meta, cols)
    # five workers; the final phase's reader comes after they stopped, in a lane one of them freed (a worker that
    # crashed, the workload's own, is replaced under a new process number, in a lane of its own while the crashed one's
    # last op still occupies its lane: ci met 6 lanes for 8 process numbers)
    processes = {int(p) for p in cols.process}
    assert 5 <= meta["laneCount"] < len(processes), (meta["laneCount"], processes)
    assert meta["endMs"] * 1e6 == pytest.approx(cols.end_time_ns)


def test_report_embeds_the_plots_and_leaves_them_next_to_it(caught: Path) -> None:
    _, page, _ = read_page(caught / "report.html")
    images = [a for tag, a in page.tags if tag == "img"]
    assert sorted(str(a.get("data-plot")) for a in images) == ["latency", "rate"]
    for a in images:
        src = str(a["src"])
        assert src.startswith("data:image/png;base64,")
        png = base64.b64decode(src.split(",", 1)[1])
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert png == (caught / f"{a['data-plot']}.png").read_bytes()
    for name in ("latency.svg", "rate.svg"):
        assert (caught / name).read_text().lstrip().startswith(("<?xml", "<svg"))


def test_report_names_no_url(caught: Path) -> None:
    text = (caught / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"(?i)\b(?:https?|ftp|wss?):", text)
    assert not re.search(r"""(?i)\b(?:src|href|action|poster)\s*=\s*["']?\s*//""", text)
    for tag, attrs in Page(text).tags:
        for name in ("src", "href"):
            if attrs.get(name) is not None:
                assert str(attrs[name]).startswith(("data:", "#")), f"<{tag} {name}={attrs[name]!r}>"
    assert all(u.strip(" '\"").startswith("data:") for u in re.findall(r"url\(([^)]*)\)", text))
    assert "@import" not in text


# ---------------------------------------------------------------------------- leasecheck report


def test_report_command_rebuilds_the_report(caught: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(caught, run, ignore=shutil.ignore_patterns("report.html", "*.png", "*.svg"))
    done = leasecheck("report", str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run / "report.html")
    _, page, meta = read_page(run / "report.html")
    results = json.loads((run / "results.json").read_text())
    assert Counter((a["kind"], a["node"], tuple(a["ops"])) for a in meta["anomalies"]) == \
        Counter((a["kind"], a["node"], tuple(a["ops"])) for a in results["anomalies"])
    assert page.text_of["verdict"].strip() == "INVALID"
    assert {p.name for p in run.iterdir()} >= {"report.html", "latency.png", "latency.svg", "rate.png", "rate.svg"}
    elsewhere = tmp_path / "out" / "mine.html"
    done = leasecheck("report", str(run / "history.jsonl"), "-o", str(elsewhere))
    assert done.returncode == 0, done.stderr
    assert read_page(elsewhere)[2]["anomalies"] == meta["anomalies"]
    assert (elsewhere.parent / "rate.png").is_file()


def test_a_run_folder_without_results_gets_a_checked_report(caught: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(caught, run, ignore=shutil.ignore_patterns("report.html", "results.json", "*.png", "*.svg"))
    done = leasecheck("report", str(run))
    assert done.returncode == 0, done.stderr
    text, page, meta = read_page(run / "report.html")
    results = json.loads((caught / "results.json").read_text())
    assert page.text_of["verdict"].strip() == "INVALID"
    assert Counter((a["kind"], a["node"], tuple(a["ops"])) for a in meta["anomalies"]) == \
        Counter((a["kind"], a["node"], tuple(a["ops"])) for a in results["anomalies"])
    assert "no results.json" in text
    assert "--seed 3" in page.text_of["replay"]  # test.json is still there


def test_a_bad_history_is_exit_3_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "run"
    bad.mkdir()
    (bad / "history.jsonl").write_text(
        '{"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 10}\n'
        '{"index": 0, "time": 5, "process": 1, "type": "invoke", "f": "claim", "node": "a", "value": {}}\n'
        '{"index": 1, "time": 6, "process": 1, "type": "ok", "f": "claim"\n'
    )
    done = leasecheck("report", str(bad))
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{bad / 'history.jsonl'}:3:"), done.stderr
    assert not (bad / "report.html").exists()
    missing = leasecheck("report", str(tmp_path / "nowhere"))
    assert missing.returncode == 3 and str(tmp_path / "nowhere") in missing.stderr


# ---------------------------------------------------------------------------- hostile text


def _hostile_history(path: Path) -> None:
    """Two claims granted the same epoch on a node named like markup, with a pause of the first claimer between them."""
    header = {"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 10,
              "target": "<b>bold</b>", "seed": 1}
    events = [
        (1_000_000, 1, "invoke", "claim", HOSTILE, {"owner": "w1"}),
        (2_000_000, 1, "ok", "claim", HOSTILE, {"epoch": 1}),
        (2_500_000, "nemesis", "info", "pause", None, {"fault": "pause", "victims": [1]}),
        (3_000_000, 2, "invoke", "claim", HOSTILE, {"owner": "w2"}),
        (4_000_000, 2, "ok", "claim", HOSTILE, {"epoch": 1}),
        (4_500_000, "nemesis", "info", "resume", None, {"fault": "pause", "victims": [1]}),
        (5_000_000, 3, "invoke", "read", "plain", {}),
    ]
    lines = [json.dumps(header)]
    for i, (t, p, kind, f, node, value) in enumerate(events):
        ev: dict[str, Any] = {"index": i, "time": t, "process": p, "type": kind, "f": f, "value": value}
        if node is not None:
            ev["node"] = node
        lines.append(json.dumps(ev))
    path.write_text("\n".join(lines) + "\n")


def test_text_from_the_history_never_becomes_markup(tmp_path: Path) -> None:
    history = tmp_path / "hostile.jsonl"
    _hostile_history(history)
    done = leasecheck("report", str(history))
    assert done.returncode == 0, done.stderr
    report = tmp_path / "hostile.html"
    text, page, meta = read_page(report)
    assert "<img src=x" not in text and "<b>bold" not in text
    assert text.count("</script>") == sum(1 for tag, _ in page.tags if tag == "script")
    assert [a for tag, a in page.tags if "onerror" in a] == []
    assert all(str(a.get("src", "")).startswith("data:") for tag, a in page.tags if tag == "img")
    assert "<b>bold</b>" in page.text_of["top"]  # shown as text
    assert HOSTILE in meta["nodes"]
    assert [(a["kind"], a["node"], a["ops"]) for a in meta["anomalies"]] == \
        [("duplicate-epoch", HOSTILE, [0, 3]), ("epoch-regression", HOSTILE, [0, 3])]
    cols = read_columns(history)
    assert_columns_match(page, meta, cols)
    # the read that never completed is an open op; the pause is a band on process 1's lane
    assert list(decoded(page, "end"))[-1] == -1
    assert meta["faults"] == [{"kind": "pause", "start": 2.5, "end": 4.5, "victims": [1], "members": ""}]


# ---------------------------------------------------------------------------- lanes at scale


def test_a_crash_heavy_history_packs_thousands_of_processes_into_few_lanes(tmp_path: Path) -> None:
    """Every info op retires its process number: 20,000 ops at 5 % crashes have ~1,000 processes, in about one lane per worker."""
    history = tmp_path / "big.jsonl"
    gen = subprocess.run([sys.executable, "-m", "bench.gen", "--ops", "20000", "--workers", "8", "--crash-rate", "0.05",
                          "--seed", "5", "-o", str(history)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stderr
    done = leasecheck("report", str(history))
    assert done.returncode == 0, done.stderr
    _, page, meta = read_page(tmp_path / "big.html")
    cols = read_columns(history)
    assert len(set(cols.process)) > 500
    assert -1 in cols.end_ns  # ops that never completed, which must not each hold a lane to the end
    assert 8 <= meta["laneCount"] <= 12
    assert_lanes_hold_one_op_at_a_time(page, meta, cols)
    assert_columns_match(page, meta, cols)


# ---------------------------------------------------------------------------- the replay command


def test_replay_command_comes_from_the_command_line_or_the_options() -> None:
    header = Header(1000, 10, {"target": "sqlite", "seed": 9, "nemesis": ["pause"]})
    typed = {"argv": ["/usr/bin/leasecheck", "run", "--target", "redis", "--time-limit", "60"], "seed": 12, "options": {}}
    assert replay_command(typed, header, {}, replay_flags())[0] == "leasecheck run --target redis --time-limit 60 --seed 12"
    from_pytest = {"argv": ["/usr/bin/pytest", "-q"], "seed": 12,
                   "options": {"target": "mypkg:MyLease", "nemesis": ["pause", "kill"], "time_limit": 30.0, "concurrency": 8,
                               "ttl_ms": 1000, "seed": None, "workload": {"rate": 50.0}}}
    assert replay_command(from_pytest, header, {}, replay_flags())[0] == \
        "leasecheck run --target mypkg:MyLease --nemesis pause,kill --concurrency 8 --seed 12 --rate 50"
    # a run that had to reach situations replays waiting on them too: each one its own --require
    requiring = {"argv": ["/usr/bin/pytest"], "seed": 3, "options": {"target": "redis", "evidence_wait_s": 60.0,
                                                                     "require": ["claim-race-ready", "zombie-after-takeover"]}}
    assert replay_command(requiring, header, {}, replay_flags())[0] == (
        "leasecheck run --target redis --evidence-wait 60 --require claim-race-ready --require zombie-after-takeover --seed 3")
    assert replay_command(None, header, {}, replay_flags())[0] == "leasecheck run --target sqlite --nemesis pause --ttl 1000 --seed 9"
    generated = Header(1000, 0, {"target": "bench-sim", "seed": 1, "generator": {"name": "bench.gen"}})
    assert replay_command(None, generated, {}, replay_flags())[0] is None
    # what only says where the verdict went is no part of replaying it (the pytest plugin runs with --json)
    piped = {"argv": ["/x/leasecheck/__main__.py", "run", "--target", "redis", "--json", "--junit", "out.xml", "--store", "s"],
             "seed": 4}
    assert replay_command(piped, header, {}, replay_flags()) == \
        ("leasecheck run --target redis --store s --seed 4", "test.json (the command line of the run)")
    # a command recorded by whoever started the run (the pytest plugin: its cd and PYTHONPATH) is shown as it is
    plugin = {**piped, "replay": "cd /proj && PYTHONPATH=/proj/src leasecheck run --target mypkg:L --seed 4 --store /s"}
    assert replay_command(plugin, header, {}, replay_flags()) == (plugin["replay"], "test.json (as the pytest plugin ran it)")


def test_an_unknown_verdict_shows_its_reason(caught: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(caught, run, ignore=shutil.ignore_patterns("report.html", "*.png", "*.svg"))
    results = json.loads((run / "results.json").read_text())
    reason = "no ok renew: the run never <renewed> a lease"
    (run / "results.json").write_text(json.dumps({**results, "valid": "unknown", "anomalies": [], "reason": reason}))
    assert leasecheck("report", str(run)).returncode == 0
    text, page, meta = read_page(run / "report.html")
    assert page.text_of["verdict"].strip() == "unknown" and meta["valid"] == "unknown"
    assert reason in page.text_of["top"] and "<renewed>" not in text
    assert meta["anomalies"] == []
