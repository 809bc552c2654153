"""Store servers in Docker containers (``--env docker``), with the same interface as the local ones.

One run's containers hang off a :class:`DockerRun` (this module); the rest is
in modules of their own:

* :mod:`leasecheck.servers.run_network` — :class:`RunNetwork`, what a container
  sees of its run: the client, the run id, its labels and its network;
* :mod:`leasecheck.servers.image` — which image a container runs, and the
  registry-free *host-root* image made here when the engine has no other;
* :mod:`leasecheck.servers.container` — :class:`ContainerServer`, a store
  server's lifecycle (start, stop, kill, pause) done by the engine;
* :mod:`leasecheck.servers.container_stores` — Redis and Postgres in containers.

**Networking.** Every run gets its own user-defined bridge network
(``leasecheck-<run id>``, see :class:`DockerRun`); each container is on that
network only and publishes its port on ``127.0.0.1:<free port>`` through it.
Clients talk to ``127.0.0.1`` only — never to container addresses — and
disconnecting a container from the run network really cuts them off
(measured: the host port stops listening until it is reconnected).

Every container and the network carry the label ``leasecheck.run=<run id>``;
:meth:`DockerRun.close` removes everything so labelled, and
:func:`leasecheck.nemesis.container.heal_containers` heals it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import docker
from docker.errors import NotFound

from leasecheck.machine.labels import run_label
from leasecheck.servers.base import StrPath
from leasecheck.servers.container import ContainerServer
from leasecheck.servers.container_stores import SERVERS, ContainerPostgresServer, ContainerRedisServer
from leasecheck.servers.image import HOSTROOT_IMAGE, ImageChoice, choose_image, connect_engine, ensure_base_image
from leasecheck.servers.run_network import RunNetwork

#: a ContainerServer subclass (DockerRun's helpers return what they were given)
S = TypeVar("S", bound=ContainerServer)


@dataclass
class DockerRun(RunNetwork):
    """One run's Docker resources: the engine client, a run id, the run's bridge network (:class:`RunNetwork`), its servers.

    Servers made through it (:meth:`redis`, :meth:`postgres`) are attached to
    that network and labelled with the run id, so :meth:`close` (and the
    faults' heal) can find every one of them by label alone — also from
    another process, e.g. ``leasecheck heal``.
    """

    servers: list[ContainerServer] = field(default_factory=list)

    @classmethod
    def open(cls, client: docker.DockerClient | None = None, run_id: str | None = None) -> DockerRun:
        """Connect (unless given a client) and create the run's network."""
        engine = client or connect_engine()
        run = cls(engine, run_id) if run_id else cls(engine)
        run.ensure_network()
        return run

    def redis(self, directory: StrPath | None = None, **options: Any) -> ContainerRedisServer:
        """A Redis container of this run (not started); options as :class:`ContainerServer`."""
        return self._add(ContainerRedisServer(self, directory, **options))

    def postgres(self, directory: StrPath | None = None, **options: Any) -> ContainerPostgresServer:
        """A Postgres container of this run (not started); options as :class:`ContainerServer`."""
        return self._add(ContainerPostgresServer(self, directory, **options))

    def _add(self, server: S) -> S:
        self.servers.append(server)
        return server

    def close(self) -> None:
        """Remove every container and network of the run (by label, whoever made them); idempotent."""
        for server in self.servers:
            server.container = None
        remove_run(self.client, self.run_id)

    def __enter__(self) -> DockerRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def remove_run(client: docker.DockerClient, run_id: str) -> list[str]:
    """Force-remove a run's containers, then its network; return the names removed."""
    removed = []
    label = run_label(run_id)
    for container in client.containers.list(all=True, filters={"label": label}):
        try:
            container.remove(force=True, v=True)
            removed.append(container.name)
        except NotFound:
            pass
    for network in client.networks.list(filters={"label": label}):
        try:
            network.remove()
            removed.append(network.name)
        except NotFound:
            pass
    return removed


__all__ = [
    "HOSTROOT_IMAGE", "SERVERS", "ContainerPostgresServer", "ContainerRedisServer", "ContainerServer", "DockerRun",
    "ImageChoice", "choose_image", "connect_engine", "ensure_base_image", "remove_run",
]
