"""A run's figures as every view says them: the terminal, the report and pytest's line read them from here.

Each figure has one owner that counts it, and it reaches every view through
``results.json``: ``stats.ops`` (the checker: every op of the history, the
harness's reads of every node included), ``run.ops`` (the recorder: the
workers' ops alone), ``run.worker_processes`` (the pool: every worker process
started, a killed worker's replacement counting anew), ``run.seconds`` (the
run's clock). Before, the report counted worker processes from the history's
process numbers (the harness's reads and a worker's new number after an
``info`` op counted as processes), gave the history's length in milliseconds
and the ops once without saying which; now each view words the same numbers
with these functions.
"""

from __future__ import annotations

from typing import Any


def _int(obj: Any, key: str) -> int | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def ops_text(stats: Any, run: Any = None) -> str:
    """``1,000 (600 by the workers, 400 reads by the harness)``: the history's ops, then (for a run) how many the
    workers did and how many the harness read (the final reads, and the reads of nodes closed while the run went)."""
    total = _int(stats, "ops") or 0
    workers = _int(run, "ops")
    if workers is None or workers > total:
        return f"{total:,}"
    return f"{total:,} ({workers:,} by the workers, {total - workers:,} reads by the harness)"


def worker_processes(results: dict[str, Any]) -> int | None:
    """Every worker process the run started (``run.worker_processes``), or None when results.json has no run."""
    return _int(results.get("run"), "worker_processes")


def run_seconds(results: dict[str, Any]) -> float | None:
    """How long the run took by its own clock (``run.seconds``)."""
    value = results.get("run", {}).get("seconds") if isinstance(results.get("run"), dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def seconds_text(seconds: float) -> str:
    """Every length of time a view gives, in one unit: ``6.5 s``."""
    return f"{seconds:,.1f} s"


__all__ = ["ops_text", "run_seconds", "seconds_text", "worker_processes"]
