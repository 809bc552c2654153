"""A private redis-server for tests and runs: loopback only, every acknowledged write on disk by default.

Durability is part of what leasecheck checks (``lost-commit`` after a crash), so
the server runs with the append-only file fsynced before every reply
(``appendfsync always``) and no RDB snapshots: an acknowledged commit survives
``kill()`` and ``restart()``, and a lost one is the backend's fault, not the
harness's configuration. Another durability profile
(:mod:`leasecheck.targets.durability`: ``default``, ``fast``) is given by name.
"""

from __future__ import annotations

import os
import shutil

from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath
from leasecheck.servers.readiness import redis_answers
from leasecheck.targets.durability import DEFAULT_PROFILE, REDIS, check_profile

#: what makes every acknowledged write durable, for the local and the container server alike
DURABLE_ARGS = REDIS["durable"]


def find_redis_server(binary: StrPath | None = None) -> str:
    """The redis-server executable: ``binary`` if given, else the one on PATH."""
    found = shutil.which(os.fspath(binary) if binary is not None else "redis-server")
    if found is None:
        where = f"{binary!s} is not an executable" if binary is not None else "redis-server is not on PATH"
        raise EnvironmentFailure(f"redis: {where} (install it: apt-get install -y redis-server)")
    return found


class RedisServer(LocalServer):
    """redis-server in the foreground on 127.0.0.1:PORT, data and AOF in ``directory``."""

    kind = "redis"

    def __init__(self, directory: StrPath | None = None, port: int | None = None, binary: StrPath | None = None,
                 profile: str = DEFAULT_PROFILE) -> None:
        self.binary = find_redis_server(binary)
        #: the durability profile (:data:`leasecheck.targets.durability.REDIS`)
        self.profile = check_profile(profile)
        super().__init__(directory, port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        return [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.directory),
            "--daemonize", "no",
            "--logfile", "",  # stdout: LocalServer captures it into redis.log
            *REDIS[self.profile],
        ]

    def _ready(self) -> bool:
        return redis_answers(self.url)
