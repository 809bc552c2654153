"""A private single-member etcd for tests and runs: loopback only, every acknowledged write fsynced.

etcd fsyncs its write-ahead log before it acknowledges a write (its default;
``--unsafe-no-fsync`` is never passed), so an acknowledged commit survives
``kill()`` and ``start()`` on the same data directory, and a lost one is the
backend's fault, not the harness's configuration. The member's peer URL is on
a second free loopback port: a single member never talks to a peer, but etcd
listens on one all the same, and the default (2380) may be taken.

Readiness is etcd's own ``/health`` endpoint on the client URL: it answers
``{"health":"true"}`` only when the member has a leader and a read through
raft succeeds, so a member that merely listens is not taken for ready.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request

from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath, free_port

#: raft timing of a member alone on loopback (etcd's defaults are 100 / 1000 ms, sized for a LAN). etcd's
#: shortest lease is 1.5 election timeouts rounded up to a second: 2 s by default, 1 s here, so a lock
#: with leasecheck's default ttl (1 s) gets the lease it asks for instead of a silently doubled one
HEARTBEAT_MS = 50
ELECTION_MS = 500


def find_etcd(binary: StrPath | None = None) -> str:
    """The etcd executable: ``binary`` if given, else ``etcd`` on PATH, else Debian's ``/usr/bin/etcd``."""
    found = shutil.which(os.fspath(binary) if binary is not None else "etcd") or (
        shutil.which("/usr/bin/etcd") if binary is None else None
    )
    if found is None:
        where = f"{binary!s} is not an executable" if binary is not None else "etcd is not on PATH"
        raise EnvironmentFailure(f"etcd: {where} (install it: apt-get install -y etcd-server)")
    return found


def etcd_healthy(client_url: str, timeout_s: float = 1.0) -> bool:
    """Does the etcd member at ``client_url`` (``http://host:port``) say it is healthy?"""
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=timeout_s) as reply:
            return bool(json.load(reply).get("health") == "true")
    except (OSError, ValueError, urllib.error.URLError):
        return False


class EtcdServer(LocalServer):
    """etcd in the foreground, one member, client URL 127.0.0.1:PORT, data in ``directory/data``."""

    kind = "etcd"

    def __init__(
        self, directory: StrPath | None = None, port: int | None = None, peer_port: int | None = None,
        binary: StrPath | None = None,
    ) -> None:
        self.binary = find_etcd(binary)
        super().__init__(directory, port)
        self.peer_port = peer_port or free_port(besides=self.port)

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.port}"

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        # the initial-cluster flags only matter on the first start: a restart reads the member from its data
        return [
            self.binary,
            "--name", "leasecheck",
            "--data-dir", str(self.directory / "data"),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"leasecheck={peer}",
            "--initial-cluster-state", "new",
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_MS),
            "--logger", "zap",
            "--log-outputs", "stderr",  # LocalServer captures it into etcd.log
        ]

    def _ready(self) -> bool:
        return etcd_healthy(self.client_url)
