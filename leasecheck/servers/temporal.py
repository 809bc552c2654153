"""A private Temporal dev server (``temporal server start-dev``) for queue runs: loopback only, SQLite on disk.

Temporal ships its server inside its CLI; no Debian package and no prebuilt
download can be had here, so ``scripts/install-temporal.sh`` builds the CLI at
the pinned :data:`TEMPORAL_VERSION` with the machine's Go into the per-user cache
(``~/.cache/leasecheck/bin``, where :func:`find_temporal` looks after ``PATH``).
Why that version: the CLI's newer releases (v1.9) carry a ``replace`` directive
in their ``go.mod`` and cannot be ``go install``-ed; v1.5.1 embeds Temporal
Server 1.29.1.

The dev server is one process (frontend, history, matching and its internal
worker in one binary). Its state is a SQLite file in ``directory`` (``--db-filename``),
so ``kill()`` then ``start()`` keeps the workflows, as the ``kill-store`` fault needs;
its web UI is off (``--headless``); its HTTP API listens on a second free loopback
port and answers readiness: ``GET /api/v1/namespaces/default`` returns the
namespace only once the frontend serves it (a listening gRPC port alone does
not mean the namespace is registered yet).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath, free_port
from leasecheck.servers.tools import GoBuild, cache_bin_dir

#: the CLI release that embeds the server (Temporal Server 1.29.1): the newest that ``go install`` builds
TEMPORAL_VERSION = "v1.5.1"
TEMPORAL_MODULE = "github.com/temporalio/cli"
TEMPORAL_BINARY = "temporal"
#: what every "not found" message tells the user to run
INSTALL_COMMAND = "scripts/install-temporal.sh"
#: the namespace the dev server always creates (the adapters use it)
NAMESPACE = "default"
#: one partition per task queue (Temporal's default is 4, for throughput): with a few workers, a task
#: (an activity's retry) that lands in a partition no idle worker polls waits ~2 s to be forwarded
#: (measured: a retry dispatched 1.8 s after a worker fell idle in 2 of 3 tries; at once with one)
DYNAMIC_CONFIG = ("matching.numTaskqueueReadPartitions=1", "matching.numTaskqueueWritePartitions=1")


def find_temporal(binary: StrPath | None = None) -> str:
    """The temporal CLI: ``binary`` if given, else ``temporal`` on PATH, else the cached build."""
    if binary is not None:
        found = shutil.which(os.fspath(binary))
        if found is None:
            raise EnvironmentFailure(f"temporal: {binary!s} is not an executable")
        return found
    found = shutil.which(TEMPORAL_BINARY)
    if found is not None:
        return found
    cached = cache_bin_dir() / TEMPORAL_BINARY
    if os.access(cached, os.X_OK):
        return str(cached)
    raise EnvironmentFailure(
        f"temporal: no {TEMPORAL_BINARY} on PATH or in {cache_bin_dir()}; build it there with: {INSTALL_COMMAND}"
    )


#: the temporal CLI, built as toxiproxy is (:class:`~leasecheck.servers.tools.GoBuild`)
TEMPORAL = GoBuild(TEMPORAL_BINARY, TEMPORAL_MODULE, TEMPORAL_VERSION, f"{TEMPORAL_MODULE}/cmd/temporal", INSTALL_COMMAND)


def install_temporal(bin_dir: Path | None = None) -> Path:
    """Build the temporal CLI at :data:`TEMPORAL_VERSION` into ``bin_dir`` (the per-user cache); idempotent. A cold
    module cache takes about 6.5 min (2 cores)."""
    return TEMPORAL.install(bin_dir)


def namespace_served(http_url: str, namespace: str = NAMESPACE, timeout_s: float = 1.0) -> bool:
    """Does the frontend's HTTP API at ``http_url`` describe ``namespace`` (it is registered and served)?"""
    try:
        with urllib.request.urlopen(f"{http_url}/api/v1/namespaces/{namespace}", timeout=timeout_s) as reply:
            return bool(json.load(reply).get("namespaceInfo", {}).get("name") == namespace)
    except (OSError, ValueError, urllib.error.URLError):
        return False


class TemporalServer(LocalServer):
    """``temporal server start-dev`` in the foreground: gRPC on 127.0.0.1:PORT, state in ``directory/temporal.db``."""

    kind = "temporal"

    def __init__(self, directory: StrPath | None = None, port: int | None = None, http_port: int | None = None,
                 binary: StrPath | None = None) -> None:
        self.binary = find_temporal(binary)
        super().__init__(directory, port)
        self.http_port = http_port or free_port(besides=self.port)

    @property
    def url(self) -> str:
        """The frontend's gRPC address, as ``temporalio.client.Client.connect`` takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def _command(self) -> list[str]:
        return [
            self.binary, "server", "start-dev",
            "--ip", "127.0.0.1",
            "--port", str(self.port),
            "--http-port", str(self.http_port),
            "--headless",
            "--db-filename", str(self.directory / "temporal.db"),
            "--log-level", "warn",  # stderr: LocalServer captures it into temporal.log
            *(a for value in DYNAMIC_CONFIG for a in ("--dynamic-config-value", value)),
        ]

    def _ready(self) -> bool:
        return namespace_served(self.http_url)


def main() -> None:
    """``python -m leasecheck.servers.temporal``: build the pinned CLI into the cache; print its path."""
    import sys

    from leasecheck.exits import Exit

    try:
        print(install_temporal())
    except EnvironmentFailure as e:
        print(e, file=sys.stderr)
        raise SystemExit(Exit.ENVIRONMENT) from None


if __name__ == "__main__":
    main()
