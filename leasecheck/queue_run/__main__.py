"""``python -m leasecheck.queue_run LIBRARY``: one queue run, for adapter authors (``leasecheck audit`` is the front)."""

from __future__ import annotations

import argparse
import json
import sys

from leasecheck.errors import BadInput, EnvironmentFailure
from leasecheck.exits import Exit
from leasecheck.lists import names
from leasecheck.queue_run.runner import QueueOptions, run_queue
from leasecheck.targets.durability import DEFAULT_PROFILE, PROFILES


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m leasecheck.queue_run")
    p.add_argument("library")
    p.add_argument("--mode", default="documented", choices=("documented", "fenced"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--time-limit", type=float, default=20.0)
    p.add_argument("--ttl", type=int, default=2000, help="ms")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--stall-rate", type=float, default=0.5)
    p.add_argument("--nemesis", default="")
    p.add_argument("--store", default="store")
    p.add_argument("--store-config", default=DEFAULT_PROFILE,
                   help=f"the broker's durability profile (Redis, Postgres), as leasecheck run's: {', '.join(PROFILES)}")
    p.add_argument("--fail-fast", action="store_true", help="stop the test at the first anomaly the live check proves")
    a = p.parse_args()
    try:
        faults = () if a.nemesis.strip() in ("", "none") else names(a.nemesis, "--nemesis")
        opts = QueueOptions(a.library, a.mode, a.seed, faults, a.time_limit, a.ttl, a.workers, a.stall_rate, store=a.store,
                            fail_fast=a.fail_fast, store_config=a.store_config)
        result = run_queue(opts)
    except BadInput as e:  # bad input (a library not found among them): one line, exit 3, before anything starts
        print(f"python -m leasecheck.queue_run: {e}", file=sys.stderr)
        return int(Exit.BAD_INPUT)
    except EnvironmentFailure as e:
        print(f"python -m leasecheck.queue_run: {e}", file=sys.stderr)
        return int(Exit.ENVIRONMENT)
    print(json.dumps({"valid": result.verdict.valid, "reason": result.reason, "run_dir": str(result.run_dir),
                      "stats": result.stats, "anomalies": [a.to_json() for a in result.verdict.anomalies][:10]}, indent=1))
    return result.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
