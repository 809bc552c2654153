"""The store directory: one folder per run that anyone can re-analyse.

``store/<target>/<UTC timestamp>/`` holds ``history.jsonl``, ``test.json``
(every option and the seed: enough to replay), ``results.json`` (the verdict
and the run's figures), ``report.html`` (the run report: verdict, anomalies,
timeline, plots; self-contained, :mod:`leasecheck.report.html`), the plots
``latency.png``/``latency.svg`` and ``rate.png``/``rate.svg``,
``leasecheck.log`` and the servers' logs; ``store/latest`` points at the
newest run *that has a history*. ``leasecheck report RUN_DIR`` rebuilds the
report and the plots from the folder alone.

Two rules keep the folder usable by the tools that read it:

* run directories are absolute paths, whatever ``--store`` the user gave: a
  server we start in them (redis-server's ``dir``, Postgres' data directory)
  refuses or misreads a relative one, and a process that changes directory
  must still find them;
* a run that failed before it recorded anything is marked
  (``results.json`` with ``"status": "error"`` and the one-line reason) and
  never becomes ``latest``: ``leasecheck check store/latest`` must check the
  newest history, not stumble on a failed start. The runner calls
  :func:`mark_latest` once the history exists, and :func:`mark_failed` when
  a run dies.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import msgspec

from leasecheck.errors import BadInput, EnvironmentFailure
from leasecheck.rundir.runfolder import RunFolder, write_json


class StoreUnusable(EnvironmentFailure):
    """``--store`` cannot hold run directories (it is a file, or read-only): exit 4; ``str()`` is one line."""


#: the longest target folder name: a file name has at most 255 bytes, and an exec: command can be longer
MAX_FOLDER = 100


def folder_name(target: str) -> str:
    """The folder of ``target``'s runs: its name with path and shell characters replaced, a long one cut and hashed."""
    safe = re.sub(r"[^A-Za-z0-9._=+-]", "_", target).strip(".") or "_"
    if len(safe) <= MAX_FOLDER:
        return safe
    digest = hashlib.sha256(target.encode()).hexdigest()[:12]
    return f"{safe[:MAX_FOLDER - 13]}-{digest}"


def new_run_dir(store: Path, target: str) -> Path:
    """A fresh, absolute ``store/<target>/<stamp>`` directory; ``latest`` is left alone (see :func:`mark_latest`)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    path = store.expanduser().absolute() / folder_name(target) / stamp
    try:
        path.mkdir(parents=True, exist_ok=False)
    except OSError as e:
        raise StoreUnusable(f"--store {store}: cannot create a run directory there ({e.strerror or e})") from None
    return path


def mark_latest(run_dir: Path) -> None:
    """Point ``store/latest`` at ``run_dir`` (atomically: readers never see no ``latest``); best effort."""
    store = run_dir.parent.parent
    tmp = store / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_dir.relative_to(store))
        os.replace(tmp, store / "latest")
    except OSError:
        pass


def mark_failed(run_dir: Path, reason: str) -> None:
    """Record that the run died (``"status": "error"``) unless it already wrote its results; best effort."""
    path = RunFolder(run_dir).results
    if path.exists():
        return
    try:
        write_json(path, {"status": "error", "reason": reason.strip().splitlines()[0] if reason.strip() else "unknown error",
                          "run_dir": str(run_dir), "history": RunFolder(run_dir).history.exists()})
    except OSError:
        pass


def failed_start(run_dir: Path) -> str | None:
    """The reason a run directory holds no history because its run failed (its results.json says so), or None."""
    try:
        results = RunFolder(run_dir).read_results()
    except (OSError, msgspec.DecodeError):
        return None
    if isinstance(results, dict) and results.get("status") == "error" and not RunFolder(run_dir).history.exists():
        return str(results.get("reason") or "unknown error")
    return None


def save_faults(run_dir: Path, records: list[dict[str, Any]]) -> None:
    """Atomically replace the run's record of active faults (see :mod:`leasecheck.nemesis.heal`)."""
    tmp = run_dir / f".{RunFolder.FAULTS}.tmp"
    tmp.write_bytes(msgspec.json.encode({"active": records}))
    os.replace(tmp, RunFolder(run_dir).faults)


class BadFaultsFile(BadInput):
    """faults.json is not what :func:`save_faults` writes; ``str()`` names the file in one line."""


def load_faults(run_dir: Path) -> list[dict[str, Any]]:
    """The active faults recorded in ``run_dir``; raises BadFaultsFile if the file is not ours."""
    path = RunFolder(run_dir).faults
    try:
        data = msgspec.json.decode(path.read_bytes())
    except FileNotFoundError:
        return []
    except msgspec.DecodeError as e:
        raise BadFaultsFile(f"{path}: not a faults record ({e})") from None
    records = data.get("active") if isinstance(data, dict) else None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise BadFaultsFile(f"{path}: not a faults record (expected {{\"active\": [records]}})")
    return records
