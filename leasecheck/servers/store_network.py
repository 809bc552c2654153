"""Toxiproxy in front of the store for a run: one proxy per worker, and the worker's URL pointed at it.

The nemesis deals in ``host:port`` endpoints (:class:`leasecheck.nemesis.proxies.Network`);
the store's connection string is the backend's business
(:mod:`leasecheck.targets.urls`). This module is where the two meet. The
producer and the final reads use the store's own URL: they bypass the proxies,
so no fault ever hits them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from leasecheck.nemesis.proxies import Network, WorkerKey
from leasecheck.targets.urls import store_endpoint, with_endpoint

log = logging.getLogger("leasecheck.servers")


def route(network: Network, worker: WorkerKey, url: str) -> str:
    """``url`` (a store's DSN / URL) rewritten to reach the store through ``worker``'s own proxy."""
    host, port = network.proxy_for(worker, *store_endpoint(url))
    return with_endpoint(url, host, port)


class StoreNetwork:
    """A private Toxiproxy server and the :class:`Network` of proxies on it, for one run."""

    def __init__(self, directory: Path, seed: int) -> None:
        from leasecheck.servers.toxiproxy import ToxiproxyServer

        self.server = ToxiproxyServer(directory, seed=seed).start()
        self.network = Network(self.server.url)

    def route(self, worker: WorkerKey, url: str) -> str:
        return route(self.network, worker, url)

    def heal(self) -> None:
        """Every toxic removed and every proxy enabled, whoever left them (heal-all's last word)."""
        self.network.heal_everything()

    def stop(self) -> None:
        """Heal, delete the proxies and stop the server; a failing cleanup is logged, never raised."""
        try:
            self.network.heal_everything()
            self.network.close()
        except Exception as e:  # the server dies with us; say so and go on
            log.warning("toxiproxy cleanup: %s", e)
        self.server.stop()
