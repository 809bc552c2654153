"""The run report (``report.html``) in a real browser: headless Chromium from Debian.

A reviewer opens the report from a CI artifact and starts from the anomalies, so
the tests do what the reviewer does, on real runs: load the report of a run that
caught a bug, read the anomaly list against ``results.json``, click an anomaly
and check that the timeline moved to its cited ops and highlights exactly them;
load a valid run's report; load a run with kills and read the canvas's pixels
where each kill happened; load a report of a million ops and check that it
draws them all; and load ``leasecheck summary``'s page in a 1280 px window and
check that nothing is wider than the window. What the page shows is read through the DOM and through the
page's own ``window.lcReport`` (the contract between the page and these tests:
``view()``, ``highlighted()``, ``opAt()``, ``kills()``, ``pixel()``...), never through timings: how fast
the report paints is measured by ``bench/bench_report.py``.

Each test keeps a screenshot in its tmp dir; with ``LEASECHECK_SCREENSHOT_DIR``
set, a copy goes there too (that is how ``docs/report-caught-bug.png``, the
picture of docs/report.md, is made).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import BrowserMissing, chromium, console_errors, full_page_png, window_width
from paths import REPO
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from leasecheck.report.inputs import sorted_anomalies
from leasecheck.verdict.outcomes import Expectation, write_expected

#: how long a page may take to say it is ready: CI machines are busy, and this is no budget
READY_TIMEOUT_S = 120
RUN_TIMEOUT_S = 180


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """A fresh headless Chromium per test; a missing one fails the test, it is never skipped."""
    try:
        driver = chromium()
    except BrowserMissing as e:
        pytest.fail(f"the run report's browser tests need Chromium: {e}", pytrace=False)
    try:
        yield driver
    finally:
        driver.quit()


def leasecheck(*args: str, cwd: Path, expect: int) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh interpreter; its exit code must be ``expect``."""
    proc = subprocess.run(
        [sys.executable, "-m", "leasecheck", *args], cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert proc.returncode == expect, (
        f"leasecheck {' '.join(args)}: exit {proc.returncode}, expected {expect}\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return proc


def run_folder(where: Path, *args: str, expect: int) -> Path:
    """``leasecheck run ARGS --store store`` in ``where``; the run folder it left (which must hold its report).

    The store is named relatively, as a user would, so the replay command the report shows
    (and the screenshot of docs/report.md) reads ``--store store``, not a temporary path."""
    leasecheck("run", *args, "--store", "store", cwd=where, expect=expect)
    run_dir = (where / "store" / "latest").resolve()
    assert (run_dir / "results.json").is_file(), f"no results.json in {run_dir}"
    assert (run_dir / "report.html").is_file(), f"`leasecheck run` left no report.html in {run_dir}"
    return run_dir


def open_report(driver: WebDriver, report: Path) -> None:
    """Load ``report`` from disk (file://, as from a CI artifact) and wait until its first frame is drawn
    or the page reports an error."""
    driver.get(report.as_uri())
    WebDriverWait(driver, READY_TIMEOUT_S, poll_frequency=0.2).until(
        lambda d: d.execute_script(
            "const r = window.lcReport; return !!r && (r.ready === true || (r.errors || []).length > 0);"
        ),
        message=f"{report}: window.lcReport.ready never became true",
    )
    assert js(driver, "lcReport.errors") == [], f"the page caught errors while loading {report}"
    assert js(driver, "lcReport.ready") is True


def js(driver: WebDriver, expression: str) -> Any:
    """The value of a JavaScript expression in the page (``window.`` is implied)."""
    return driver.execute_script(f"return {expression};")


def assert_clean(driver: WebDriver) -> None:
    """Nothing went wrong in the page: no error it caught, no SEVERE line on the console."""
    assert js(driver, "lcReport.errors") == []
    assert console_errors(driver) == []


def keep_screenshot(driver: WebDriver, path: Path) -> Path:
    """Save a screenshot of the whole page to ``path`` (the test's output) and copy it to
    ``$LEASECHECK_SCREENSHOT_DIR`` if set."""
    png = full_page_png(driver)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000, f"not a screenshot of a page: {len(png)} bytes"
    path.write_bytes(png)
    shots = os.environ.get("LEASECHECK_SCREENSHOT_DIR")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(shots) / path.name)
    return path


def canvas_pixels(driver: WebDriver) -> str:
    """What the timeline's canvas shows now, as a PNG data URL (equal strings: the same picture)."""
    return str(js(driver, "document.getElementById('timeline').toDataURL('image/png')"))


def mentions(text: str, number: int) -> bool:
    """``number`` appears in ``text`` as a whole number (255 in "op 255," but not in "2550")."""
    return re.search(rf"(?<!\d){number}(?!\d)", text) is not None


# ---------------------------------------------------------------- a run that caught a bug


def test_caught_bug_report_leads_from_the_anomaly_to_its_ops(browser: WebDriver, tmp_path: Path) -> None:
    """sqlite-ttl-only under pauses: the anomalies come first and each one takes the timeline to its proof."""
    run_dir = run_folder(
        tmp_path,
        "--target", "sqlite-ttl-only", "--time-limit", "6", "--seed", "3", "--nemesis", "pause",
        expect=1,
    )  # fmt: skip
    results = json.loads((run_dir / "results.json").read_text())
    expected = [(a["kind"], a["node"], a["ops"]) for a in results["anomalies"]]
    assert expected, "an invalid run lists its anomalies"

    open_report(browser, run_dir / "report.html")
    assert "INVALID" in browser.find_element(By.ID, "verdict").text

    # the anomaly list is results.json's (grouped by kind on the page), each with its explanation
    items = browser.find_elements(By.CSS_SELECTOR, "#anomalies .anomaly")
    shown = [
        (el.get_attribute("data-kind") or "", el.get_attribute("data-node") or "", [int(x) for x in (el.get_attribute("data-ops") or "").split(",") if x])
        for el in items
    ]
    assert sorted(shown) == sorted(expected)
    explanations = {(a["kind"], a["node"], tuple(a["ops"])): a["explanation"] for a in results["anomalies"]}
    for el, (kind, node, ops) in zip(items, shown):
        assert explanations[kind, node, tuple(ops)] in el.text

    # ...and it comes before the timeline on the page
    timeline = browser.find_element(By.CSS_SELECTOR, "canvas#timeline")
    assert items[0].rect["y"] < timeline.rect["y"], "the anomalies are shown above the timeline"

    # a click takes the timeline to the anomaly's ops, highlighted, with the chain that proves it
    _, node, ops = shown[0]
    before = js(browser, "lcReport.view()")
    items[0].click()
    cited = sorted(set(ops))
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return lcReport.highlighted();") == cited)
    view = js(browser, "lcReport.view()")
    assert view != before, "the click moved the timeline"
    for index in cited:
        op = js(browser, f"lcReport.opAt({index})")
        assert op is not None and op["index"] == index, f"opAt({index}) is {op}"
        end = op["end"] if op["end"] is not None else op["start"]
        assert view["t0"] <= op["start"] <= end <= view["t1"], f"op {index} [{op['start']}, {op['end']}] outside {view}"
    chain = browser.find_element(By.ID, "chain").text
    for index in cited:
        assert mentions(chain, index), f"#chain does not list op {index}: {chain!r}"
    assert_clean(browser)
    keep_screenshot(browser, tmp_path / "report-caught-bug.png")

    # the node filter: only the anomaly's node's ops stay drawn. Seen from the whole run (the
    # zoomed view may hold that node's ops alone), other nodes' ops disappear from the canvas.
    on_node = sum(1 for ev in client_events(run_dir / "history.jsonl") if ev["type"] == "invoke" and ev["node"] == node)
    assert on_node < js(browser, "lcReport.opCount"), "the run has other nodes' ops to filter out"
    js(browser, "lcReport.fit()")  # draws at once
    drawn = canvas_pixels(browser)
    browser.find_element(By.ID, "filter-node").send_keys(node)
    status = f"showing {on_node:,} of {js(browser, 'lcReport.opCount'):,} ops"
    WebDriverWait(browser, 10).until(lambda d: status in d.find_element(By.ID, "filter-status").text)
    WebDriverWait(browser, 10).until(lambda d: canvas_pixels(d) != drawn, "the node filter changed nothing on the timeline")
    assert js(browser, "lcReport.highlighted()") == cited, "filtering keeps the selection"
    assert_clean(browser)


def test_the_anomaly_band_shows_each_proof_as_its_own_mark(browser: WebDriver, tmp_path: Path) -> None:
    """Issue 34: proofs that overlap in time were drawn as one red block (a kind's many proofs on a node, or
    several kinds at once, read as one); now each anomaly is a mark of its own, a tick at each op it cites, and
    proofs that overlap go to different rows of the band."""
    run_dir = run_folder(tmp_path, "--target", "sqlite-fence-at-commit", "--time-limit", "8", "--seed", "3", expect=1)
    results = json.loads((run_dir / "results.json").read_text())
    listed = sorted_anomalies(results)  # in the page's order (grouped by kind)
    open_report(browser, run_dir / "report.html")
    js(browser, "lcReport.fit()")
    marks = js(browser, "lcReport.anomalyMarks()")
    assert sorted(m["i"] for m in marks) == list(range(len(listed))), "one mark per anomaly listed"
    for m in marks:
        a = listed[m["i"]]
        starts = sorted({js(browser, f"lcReport.opAt({i})")["start"] for i in a["ops"]})
        assert 1 <= len(m["ticks"]) <= len(starts), (a, m)
        x = m["ticks"][0]
        r, g, b = js(browser, f"lcReport.pixel({x}, {m['y'] + 2})")[:3]
        assert r > 150 and r - g > 100 and r - b > 100, f"no red tick drawn for {a}: {(r, g, b)}"  # #c62f2f, smoothed
    # overlapping proofs are drawn apart: the band packs them in its rows (three), reusing one only when all are taken
    overlapping = [(a, b) for a in marks for b in marks if a["i"] < b["i"] and a["x0"] <= b["x1"] and b["x0"] <= a["x1"]]
    assert overlapping, "this run has proofs that overlap in time: the case the rows exist for"
    for a, b in overlapping:
        later = b if b["x0"] >= a["x0"] else a
        open_at_start = [m for m in marks if m["x0"] <= later["x0"] <= m["x1"] and m is not later]
        assert a["slot"] != b["slot"] or len(open_at_start) >= 3, (a, b)
    assert_clean(browser)


# ---------------------------------------------------------------- a valid run


def test_valid_run_report_shows_verdict_settings_and_plots(browser: WebDriver, tmp_path: Path) -> None:
    """The sqlite reference: valid, no anomaly, the settings and replay command, both plots loaded."""
    # the evidence waited for, not the machine's speed: a loaded machine reaches claim-after-expiry later than 6 s
    run_dir = run_folder(tmp_path, "--time-limit", "6", "--seed", "3", "--evidence-wait", "60", expect=0)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is True

    open_report(browser, run_dir / "report.html")
    verdict = browser.find_element(By.ID, "verdict").text
    assert "valid" in verdict and "INVALID" not in verdict, verdict
    assert browser.find_elements(By.CSS_SELECTOR, "#anomalies .anomaly") == []
    assert js(browser, "lcReport.opCount") == results["stats"]["ops"]

    settings = browser.find_element(By.ID, "settings").text
    assert "sqlite" in settings and mentions(settings, 3), settings
    replay = browser.find_element(By.ID, "replay").text
    assert "leasecheck run" in replay and "--seed 3" in replay, replay

    images = browser.find_elements(By.CSS_SELECTOR, "#plots img")
    assert len(images) == 2
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return [...document.querySelectorAll('#plots img')].every(i => i.complete);")
    )
    for img in images:
        assert (img.get_attribute("src") or "").startswith("data:image/png;base64,")
        assert js(browser, f"document.querySelectorAll('#plots img')[{images.index(img)}].naturalWidth") > 0
    # one self-contained file: the page fetched nothing (a data: URI is no fetch)
    fetched = js(browser, "performance.getEntriesByType('resource').map(e => e.name)")
    assert [u for u in fetched if not u.startswith("data:")] == []
    assert_clean(browser)
    keep_screenshot(browser, tmp_path / "report-valid.png")


# ---------------------------------------------------------------- kills


def kill_colour() -> list[int]:
    """The colour a kill's line is drawn in: its fault colour, darkened (the page's shade(rgb(colour), 0.55))."""
    from leasecheck.report.plot_parts import FAULT_COLOURS

    v = int(FAULT_COLOURS["kill"][1:], 16)
    return [round(((v >> shift) & 255) * 0.55) for shift in (16, 8, 0)]


def test_kill_instants_are_lines_through_the_timeline(browser: WebDriver, tmp_path: Path) -> None:
    """A worker kill's band ends when its replacement starts, milliseconds later: the page draws each kill as an instant
    over the ops, a line from the fault row through every lane and a cross on its victim's lane."""
    run_dir = run_folder(tmp_path, "--time-limit", "6", "--seed", "5", "--nemesis", "kill", "--nemesis-interval", "1",
                         "--evidence-wait", "20", expect=0)
    with (run_dir / "history.jsonl").open() as f:
        f.readline()
        events = [json.loads(line) for line in f]
    kills = [(ev["time"] / 1e6, ev["value"]["victims"]) for ev in events
             if ev["process"] == "nemesis" and ev["f"] == "kill" and ev["value"].get("fault") == "kill"]
    assert len(kills) >= 2, "the run killed workers"

    open_report(browser, run_dir / "report.html")
    drawn = js(browser, "lcReport.kills()")
    # a kill may take several victims (each inside an op of its own): the same set, whatever order each side lists them in
    assert [(k["kind"], k["t"], sorted(k["victims"])) for k in drawn] == [("kill", pytest.approx(t), sorted(v)) for t, v in kills]
    layout, view = js(browser, "lcReport.layout()"), js(browser, "lcReport.view()")
    colour = kill_colour() + [255]
    for k in drawn:
        x = layout["gutter"] + (k["t"] - view["t0"]) * (layout["width"] - layout["gutter"]) / (view["t1"] - view["t0"])
        assert k["x"] == round(x), "drawn where the kill happened"
        # the line, in the fault row (under its marker) and down through every lane but its victim's (a cross there)
        assert len(k["lanes"]) == len(k["victims"]), "each victim's lane is known"
        ys = [layout["axis"] + layout["faultRow"] - 3] + [
            layout["top"] + (lane + 0.5) * layout["laneH"] for lane in range(layout["lanes"]) if lane not in k["lanes"]]
        for y in ys:
            pixel = js(browser, f"lcReport.pixel({k['x'] - 0.5}, {y})")
            assert max(abs(a - b) for a, b in zip(pixel, colour)) <= 2, f"kill at {k['t']:.1f} ms: pixel ({k['x']}, {y}) is {pixel}"
    legend = browser.find_element(By.ID, "legend").text
    assert f"kill \u00d7{len(kills)}" in legend, legend
    assert_clean(browser)
    keep_screenshot(browser, tmp_path / "report-kills.png")


# ---------------------------------------------------------------- the summary page


def test_summary_page_fits_a_1280_px_window(browser: WebDriver, tmp_path: Path) -> None:
    """``leasecheck summary --html`` over runs downloaded deep into a CI workspace: no horizontal scroll, every cell whole."""
    store = tmp_path / "downloaded-artifacts" / "leasecheck-nightly-matrix-shard-3-of-8-ubuntu-24.04-python3.12-run-11873465" / "store"
    targets = ["leasecheck.targets.broken_sqlite:TtlOnlySqlite", "sqlite", "postgres-advisory-lock-with-fencing-token"]
    runs = []
    for i, target in enumerate(targets):
        run = store / target / f"20261201T20300{i}.307943Z"
        run.mkdir(parents=True)
        invalid = i == 0
        anomalies = [{"kind": "stale-commit", "node": "b7c1e0d2f3a4/run-12/node-15", "ops": list(range(100000, 100012)),
                      "explanation": "a commit of epoch 3 after epoch 4 was granted"}] if invalid else []
        (run / "results.json").write_text(json.dumps({
            "target": target, "nemesis": ["pause", "kill", "clock-bump", "partition", "latency"], "seed": 123456 + i,
            "valid": False if invalid else (True if i == 1 else "unknown"), "run_dir": str(run), "anomalies": anomalies,
            "stats": {"anomalies": {"stale-commit": 12, "stale-effect": 3, "lost-commit": 1}} if invalid else {"anomalies": {}},
            "reason": "the run did not test enough: kill-store never started" if i == 2 else None, "run": {"seconds": 31.25},
        }))
        if invalid:  # as leasecheck matrix leaves it for a known-broken variant
            write_expected(run, Expectation("invalid", ("stale-commit",), "spec"))
        if i == 1:
            (run / "report.html").write_text("<!DOCTYPE html><title>report</title>")
        runs.append(run)
    page = tmp_path / "summary.html"
    leasecheck("summary", str(tmp_path / "downloaded-artifacts"), "--html", str(page), cwd=tmp_path, expect=2)  # one unknown

    assert window_width(browser, 1280) == 1280
    browser.get(page.as_uri())
    overflow = js(browser, "[document.documentElement.scrollWidth, window.innerWidth]")
    assert overflow[0] <= overflow[1], f"the page scrolls sideways: {overflow[0]} px wide in a {overflow[1]} px window"
    cells = js(browser, """[...document.querySelectorAll('th, td')].map(c => {
        const r = c.getBoundingClientRect();
        return {text: c.textContent, left: r.left, right: r.right, width: r.width, height: r.height,
                scroll: c.scrollWidth, client: c.clientWidth};
    })""")
    assert len(cells) == 10 * (1 + len(runs)) + 1  # the header, a row per run, the unknown run's "why" line
    for c in cells:
        assert c["left"] >= 0 and c["right"] <= 1280 and c["width"] > 0 and c["height"] > 0, c
        assert c["scroll"] <= c["client"], f"a cell's text is cut: {c}"
    # each run folder is named from the folder they share, its full path a hover away
    assert browser.find_element(By.ID, "run-folders").text == str(store)
    paths = browser.find_elements(By.CSS_SELECTOR, "td code.path")
    assert sorted((p.text, p.get_attribute("title")) for p in paths) == sorted((str(r.relative_to(store)), str(r)) for r in runs)
    assert console_errors(browser) == []
    keep_screenshot(browser, tmp_path / "summary-1280.png")


# ---------------------------------------------------------------- a million ops


def test_million_op_report_renders(browser: WebDriver, tmp_path: Path) -> None:
    """A 1,000,000-op history (bench.gen: valid by construction) is drawn whole, with no error."""
    history = tmp_path / "history.jsonl"
    subprocess.run(
        [sys.executable, "-m", "bench.gen", "--ops", "1000000", "--workers", "16", "--nodes", "100",
         "--crash-rate", "0.01", "--seed", "1", "-o", str(history)],
        cwd=REPO, check=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    report = tmp_path / "report.html"
    leasecheck("report", str(history), "-o", str(report), cwd=tmp_path, expect=0)

    open_report(browser, report)
    assert js(browser, "lcReport.opCount") == 1_000_000
    verdict = browser.find_element(By.ID, "verdict").text
    assert "valid" in verdict and "INVALID" not in verdict, verdict
    first = first_op(history)
    op = js(browser, f"lcReport.opAt({first['index']})")
    assert op is not None and (op["index"], op["process"], op["f"], op["node"]) == (
        first["index"], first["process"], first["f"], first["node"],
    ), op  # fmt: skip
    assert_clean(browser)
    keep_screenshot(browser, tmp_path / "report-million.png")


def client_events(history: Path) -> Iterator[dict[str, Any]]:
    """The history's client events (no header, no nemesis), in order."""
    with history.open() as f:
        f.readline()
        for line in f:
            ev = json.loads(line)
            if ev["process"] != "nemesis":
                yield ev


def first_op(history: Path) -> dict[str, Any]:
    """The history's first client invoke (read from the top: a million-op file is never read whole)."""
    return next(ev for ev in client_events(history) if ev["type"] == "invoke")
