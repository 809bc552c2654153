"""``leasecheck audit --latest``: the published audits on each library's newest release, and the drift report.

The real one installs filelock's newest release from PyPI in a throwaway virtualenv and runs its
published pause line there; the report's reading of a run that changed and of a release that no
longer installs is held on data (what the audit in the virtualenv prints, one JSON object per run).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from paths import REPO

from leasecheck.auditing.latest import Drift, canonical, exit_code, libraries_of, published_versions


def run_json(verdict: str, kinds: list[str], matches: bool) -> dict[str, object]:
    return {"target": "portalocker-redis-fenced", "mode": "fencing", "nemesis": "pause", "seed": 1, "verdict": verdict,
            "kinds": kinds, "published": {"verdict": "valid", "kinds": []}, "matches": matches,
            "command": "leasecheck audit portalocker --mode fencing --fault pause --seeds 1"}


def test_the_published_versions_are_the_extras_pins() -> None:
    pins = published_versions()
    text = (REPO / "pyproject.toml").read_text()
    assert pins["filelock"] == re.search(r'"filelock==([^"]+)"', text).group(1)  # type: ignore[union-attr]
    assert pins["python-redis-lock"] == re.search(r'"python-redis-lock==([^"]+)"', text).group(1)  # type: ignore[union-attr]
    assert canonical("Python_Redis.Lock") == "python-redis-lock"


def test_every_published_library_is_found_by_its_name_all_and_queues() -> None:
    everything = libraries_of("all")
    assert {"filelock", "redis", "portalocker", "kazoo", "rq", "huey"} <= set(everything)
    assert len(everything) == len(set(everything))
    assert "filelock" not in libraries_of("queues") and "rq" in libraries_of("queues")
    assert libraries_of("filelock-soft") == ["filelock"]


def test_the_drift_report_says_what_changed_and_exits_1() -> None:
    same = Drift("portalocker", "4.4.2", "4.5.0", runs=[run_json("valid", [], True)])
    assert not same.changed and same.lines() == ["portalocker 4.4.2 -> 4.5.0: 1 of 1 runs as published"]
    assert exit_code([same]) == 0
    changed = Drift("portalocker", "4.4.2", "4.5.0", runs=[run_json("valid", [], True), run_json("invalid", ["stale-effect"], False)])
    assert changed.changed and changed.lines() == [
        "portalocker 4.4.2 -> 4.5.0: 1 of 2 runs as published",
        "  changed: portalocker-redis-fenced [fencing] pause seed 1: published valid, now invalid (stale-effect); "
        "leasecheck audit portalocker --mode fencing --fault pause --seeds 1"]
    gone = Drift("arq", "0.28.0", install_error="ERROR: No matching distribution found for arq")
    assert gone.lines() == ["arq 0.28.0 -> ?: the newest release does not install: ERROR: No matching distribution found for arq"]
    assert exit_code([same, changed]) == 1 and exit_code([same, gone]) == 1
    assert exit_code([Drift("rq", "3.0.0", "3.1.0")]) == 4  # installed, and no run came of it


def test_latest_runs_filelocks_published_line_on_its_newest_release(tmp_path: Path) -> None:
    before = set(Path(tempfile.gettempdir()).glob("leasecheck-latest-*"))
    done = subprocess.run([sys.executable, "-m", "leasecheck", "audit", "--latest", "filelock", "--fault", "pause",
                           "--seeds", "1", "--store", str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout, done.stderr[-3000:])
    [line] = done.stdout.strip().splitlines()
    m = re.fullmatch(r"filelock (\S+) -> (\S+): 2 of 2 runs as published", line)
    assert m and m.group(1) == published_versions()["filelock"], line
    runs = (tmp_path / "store" / "latest-filelock.jsonl").read_text().splitlines()
    assert len(runs) == 2 and all(f'"version": "{m.group(2)}"' in r for r in runs)  # the runs ran on the newest release
    assert set(Path(tempfile.gettempdir()).glob("leasecheck-latest-*")) <= before, "the throwaway virtualenv was left"


def test_latest_of_a_library_nobody_audits_exits_3_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "leasecheck", "audit", "--latest", "leftpad", "--store", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and done.stderr.strip().splitlines() == [
        "leasecheck audit: no audit of 'leftpad' (see leasecheck audit --list)"], done.stderr
    assert not (tmp_path / "s").exists()
