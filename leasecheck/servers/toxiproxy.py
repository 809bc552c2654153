"""A private Toxiproxy server: the TCP proxy the network nemesis puts between workers and the store.

Shopify's ``toxiproxy-server`` is a Go program, found on ``PATH`` or in the
per-user cache where ``leasecheck install-toxiproxy`` builds it at a pinned
version (:mod:`leasecheck.servers.tools`). Like the store servers it
runs as our child on a free loopback port and is stopped by its pid. Its API
listens on 127.0.0.1 only (the proxies it creates are loopback too), and it is
started with a seed, so the randomness of its toxics (jitter, toxicity)
repeats with the run's seed.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request

from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath
from leasecheck.servers.tools import require_toxiproxy

#: talks to the loopback API directly, whatever http_proxy the environment sets
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def find_toxiproxy_server(binary: StrPath | None = None) -> str:
    """The toxiproxy-server executable: ``binary`` if given, else PATH's, else the per-user cache's."""
    if binary is not None:
        found = shutil.which(os.fspath(binary))
        if found is None:
            raise EnvironmentFailure(f"toxiproxy: {binary!s} is not an executable")
        return found
    return require_toxiproxy()


class ToxiproxyServer(LocalServer):
    """``toxiproxy-server -host 127.0.0.1 -port PORT``; ``url`` is its HTTP API."""

    kind = "toxiproxy"

    def __init__(
        self,
        directory: StrPath | None = None,
        port: int | None = None,
        binary: StrPath | None = None,
        seed: int | None = None,
    ) -> None:
        self.binary = find_toxiproxy_server(binary)  # before the base class makes a directory we would leave behind
        self.seed = seed
        super().__init__(directory, port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        command = [self.binary, "-host", "127.0.0.1", "-port", str(self.port)]
        if self.seed is not None:
            command += ["-seed", str(self.seed)]
        return command

    def version(self, timeout: float = 1.0) -> str:
        """What ``GET /version`` answers (``2.12.0`` for the pinned build); raises OSError if it does not."""
        with _DIRECT.open(f"{self.url}/version", timeout=timeout) as reply:
            body = reply.read().decode("utf-8", "replace").strip()
        try:
            return str(json.loads(body)["version"])
        except (ValueError, KeyError, TypeError):
            return body  # releases before 2.6 answered a bare string

    def _ready(self) -> bool:
        try:
            self.version()
            return True
        except (OSError, urllib.error.URLError):
            return False
