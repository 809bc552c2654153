"""One Docker run as its containers see it: the engine client, the run id, its labels and its bridge network.

Why apart from :class:`~leasecheck.servers.docker.DockerRun`: a container
server (:mod:`leasecheck.servers.container`, :mod:`leasecheck.servers.container_stores`)
needs only this much of its run, to name itself, label itself and join the
run's network; the run in turn makes those servers. With the part both need
here, the servers import it, and the run imports the servers, one way.

Every container and the network carry the label ``leasecheck.run=<run id>``,
so whoever holds the id (this process, or ``leasecheck heal`` in another) finds
all of them by label alone.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from docker.models.networks import Network

from leasecheck.machine.labels import RUN_LABEL, run_label
from leasecheck.servers.base import EnvironmentFailure


@dataclass
class RunNetwork:
    """A run's id on the engine, its labels, and its user-defined bridge network (``leasecheck-<run id>``)."""

    client: docker.DockerClient
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

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

    def containers(self) -> list[Container]:
        """Every container of this run, running or not, from the engine."""
        return self.client.containers.list(all=True, filters={"label": self.label})

    def networks(self) -> list[Network]:
        return self.client.networks.list(filters={"label": self.label})
