"""The store a backend runs against: a file, a local server we start, or the user's own."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from leasecheck.servers.base import EnvironmentFailure, LocalServer
from targets.base import Target


@dataclass
class Environment:
    """Where the store is (``url``) and, if we started it, its server."""

    url: str
    server: LocalServer | None = None

    def stop(self, keep_logs_in: Path | None = None) -> None:
        """Stop the server we started (never one the user gave), keeping its log."""
        if self.server is None:
            return
        self.server.resume()  # a paused server cannot shut down
        self.server.stop()
        if keep_logs_in is not None and self.server.log_path.exists():
            try:
                shutil.copy(self.server.log_path, keep_logs_in / self.server.log_path.name)
            except OSError:
                pass
        self.server.cleanup()


def prepare(target: type[Target], run_dir: Path, url: str | None, skewable: bool = False) -> Environment:
    """Start what ``target`` needs, or use ``url``; raises EnvironmentFailure.

    ``skewable`` starts the server under libfaketime, so the nemesis can skew
    the store's clock (and only then: it costs a little on every clock read).
    """
    if url:
        return Environment(url)
    kind = target.store
    if kind == "sqlite":
        return Environment(str(run_dir / "lease.sqlite3"))
    if kind == "postgres":
        from leasecheck.servers.faketime import FaketimePostgresServer
        from leasecheck.servers.postgres import PostgresServer

        server: LocalServer = FaketimePostgresServer() if skewable else PostgresServer()
    elif kind == "redis":
        from leasecheck.servers.faketime import FaketimeRedisServer
        from leasecheck.servers.redis import RedisServer

        server = FaketimeRedisServer(run_dir / "redis") if skewable else RedisServer(run_dir / "redis")
    else:
        raise EnvironmentFailure(f"target {target.name!r} brings its own store: give its address with --url")
    server.start()
    return Environment(server.url, server)
