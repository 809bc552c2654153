"""The store directory: one folder per run that anyone can re-analyse.

``store/<target>/<UTC timestamp>/`` holds ``history.jsonl``, ``test.json``
(every option and the seed: enough to replay), ``results.json`` (the verdict
and the run's figures), ``leasecheck.log`` and the servers' logs;
``store/latest`` points at the newest run.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import msgspec


def new_run_dir(store: Path, target: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    safe = target.replace("/", "_").replace(":", "_")
    path = store / safe / stamp
    path.mkdir(parents=True, exist_ok=False)
    latest = store / "latest"
    tmp = store / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(path.relative_to(store))
        os.replace(tmp, latest)  # atomic: readers never see no 'latest'
    except OSError:
        pass
    return path


def write_json(path: Path, obj: Any) -> None:
    path.write_bytes(msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")


FAULTS_FILE = "faults.json"


def save_faults(run_dir: Path, records: list[dict[str, Any]]) -> None:
    """Atomically replace the run's record of active faults (see :mod:`leasecheck.nemesis.heal`)."""
    tmp = run_dir / f".{FAULTS_FILE}.tmp"
    tmp.write_bytes(msgspec.json.encode({"active": records}))
    os.replace(tmp, run_dir / FAULTS_FILE)


def load_faults(run_dir: Path) -> list[dict[str, Any]]:
    try:
        return list(msgspec.json.decode((run_dir / FAULTS_FILE).read_bytes()).get("active", []))
    except FileNotFoundError:
        return []
