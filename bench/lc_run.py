"""Check one history with ``checker.check_source`` and print one JSON line.

The benchmarks run this in a fresh interpreter, so that the measured wall time
and peak memory are those of a user's ``leasecheck check`` (start-up, parsing
and checking) and nothing else; ``seconds`` is ``check_source`` alone.

Usage: python -m bench.lc_run HISTORY [--budget S] [--engine auto]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from leasecheck.checker import check_source


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lc_run")
    p.add_argument("history")
    p.add_argument("--budget", type=float, default=None, help="search budget in seconds (default: the checker's)")
    p.add_argument("--engine", default="auto")
    a = p.parse_args(argv)
    kwargs = {} if a.budget is None else {"budget": a.budget}
    start = time.perf_counter()
    verdict = check_source(a.history, engine=a.engine, **kwargs)
    elapsed = time.perf_counter() - start
    out = {
        "valid": verdict.valid,
        "seconds": round(elapsed, 3),
        "anomalies": [an.to_json() for an in verdict.anomalies[:5]],
        "anomaly_count": len(verdict.anomalies),
        "stats": verdict.stats,
    }
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
