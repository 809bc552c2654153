"""A reference SQLite lease that writes its own CLOCK_MONOTONIC stamps at every round trip to a side file.

For tests/runs/test_aim_inside.py: an op held between its round trips for a fault must
still lie inside the interval the history records for it (its invoke stamped
before the first request, its completion after the last reply).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from leasecheck.targets.base import TargetConfig
from leasecheck.targets.sqlite_lease import SqliteLease

OPS = {"try_claim": "claim", "renew": "renew", "effect": "effect", "commit": "commit", "release": "release",
       "read": "read", "read_resource": "read-resource"}


class StampedConnection(sqlite3.Connection):
    """Stamps the moment each statement goes out and the moment it returns (the store's answer)."""

    stamps: list[int] | None = None

    def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:  # type: ignore[override]
        if self.stamps is not None:
            self.stamps.append(time.monotonic_ns())
        try:
            return super().execute(*args, **kwargs)
        finally:
            if self.stamps is not None:
                self.stamps.append(time.monotonic_ns())


class StampingSqlite(SqliteLease):
    name = "test-stamping-sqlite"

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self.db.close()
        self.db = sqlite3.connect(self.path, timeout=config.timeout_s, isolation_level=None, check_same_thread=False,
                                  factory=StampedConnection)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.side = Path(str(config.options.get("log_dir", "."))) / f"stamps-{os.getpid()}.jsonl"

    def __getattribute__(self, name: str) -> Any:
        method = super().__getattribute__(name)
        if name not in OPS:
            return method

        def stamped(*args: Any) -> Any:
            db = self.db
            assert isinstance(db, StampedConnection)
            db.stamps = []
            try:
                return method(*args)
            finally:
                stamps, db.stamps = db.stamps, None
                key = args[0] if isinstance(args[0], str) else [args[0].node, args[0].epoch]
                with open(self.side, "a") as f:
                    f.write(json.dumps({"f": OPS[name], "key": key, "stamps": stamps}) + "\n")
        return stamped
