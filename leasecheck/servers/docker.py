"""Store servers in Docker containers (``--env docker``), with the same interface as the local ones.

One run's containers hang off a :class:`DockerRun` (this module); the rest is
in modules of their own:

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

import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from docker.models.networks import Network

from leasecheck.nemesis.container import RUN_LABEL, run_label
from leasecheck.servers.base import EnvironmentFailure, StrPath
from leasecheck.servers.container import ContainerServer
from leasecheck.servers.container_stores import SERVERS, ContainerPostgresServer, ContainerRedisServer
from leasecheck.servers.image import HOSTROOT_IMAGE, ImageChoice, choose_image, connect_engine, ensure_base_image

#: a ContainerServer subclass (DockerRun's helpers return what they were given)
S = TypeVar("S", bound=ContainerServer)


@dataclass
class DockerRun:
    """One run's Docker resources: the engine client, a run id, and the run's bridge network.

    Servers made through it (:meth:`redis`, :meth:`postgres`) are attached to
    that network and labelled with the run id, so :meth:`close` (and the
    faults' heal) can find every one of them by label alone — also from
    another process, e.g. ``leasecheck heal``.
    """

    client: docker.DockerClient
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    servers: list[ContainerServer] = field(default_factory=list)

    @classmethod
    def open(cls, client: docker.DockerClient | None = None, run_id: str | None = None) -> DockerRun:
        """Connect (unless given a client) and create the run's network."""
        engine = client or connect_engine()
        run = cls(engine, run_id) if run_id else cls(engine)
        run.ensure_network()
        return run

    @property
    def label(self) -> str:
        """``leasecheck.run=<id>``: the filter for this run's containers and network."""
        return run_label(self.run_id)

    @property
    def labels(self) -> dict[str, str]:
        return {RUN_LABEL: self.run_id}

    @property
    def network_name(self) -> str:
        return f"leasecheck-{self.run_id}"

    def ensure_network(self) -> Network:
        """The run's user-defined bridge network, created on first use."""
        try:
            return self.client.networks.get(self.network_name)
        except NotFound:
            pass
        try:
            return self.client.networks.create(self.network_name, driver="bridge", labels=self.labels, check_duplicate=True)
        except APIError as e:
            raise EnvironmentFailure(f"docker: cannot create network {self.network_name}: {e}") from None

    def redis(self, directory: StrPath | None = None, **options: Any) -> ContainerRedisServer:
        """A Redis container of this run (not started); options as :class:`ContainerServer`."""
        return self._add(ContainerRedisServer(self, directory, **options))

    def postgres(self, directory: StrPath | None = None, **options: Any) -> ContainerPostgresServer:
        """A Postgres container of this run (not started); options as :class:`ContainerServer`."""
        return self._add(ContainerPostgresServer(self, directory, **options))

    def _add(self, server: S) -> S:
        self.servers.append(server)
        return server

    def containers(self) -> list[Container]:
        """Every container of this run, running or not, from the engine."""
        return self.client.containers.list(all=True, filters={"label": self.label})

    def networks(self) -> list[Network]:
        return self.client.networks.list(filters={"label": self.label})

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
