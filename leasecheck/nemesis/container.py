"""Docker container faults: pause, kill and disconnect a store's container; heal every one of a run.

These are the ``--env docker`` counterparts of :mod:`leasecheck.nemesis.faults`' store
faults, done by the engine instead of by signals: ``docker pause`` freezes every
process of the container at once through the cgroup freezer (a Postgres
postmaster *and* all its backends, no /proc walk), ``docker kill`` crashes the
whole process tree (SIGKILL to the container's PID 1 ends its pid namespace),
and a network disconnect takes the store off the run's network.

What "disconnect" means here (measured on Docker 20.10, userland proxy): a
container's published port lives on its network endpoint, so disconnecting it
from its run network — its only network — removes the port mapping. The host
port stops listening: open client connections are closed by the proxy (an op
in flight becomes indeterminate) and new ones are refused (unavailable). The
store keeps running and keeps its half-open server-side connections. It is the
store's machine dropping off the network with resets, not a silent packet loss
(that is Toxiproxy's job). Reconnecting restores the mapping on the same host
port, so clients reconnect without being told anything.

Every fault records its victims by container name and undoes only what it did.
``heal_containers`` is the sledgehammer for heal-all and ``leasecheck heal``: it
finds every container of a run by label and unpauses, reconnects and starts
whatever needs it, whoever broke it.

This module imports only the standard library, the Docker SDK and its nemesis
siblings (nemesis never imports the runner); the labels it relies on are
defined here and put on the containers by :mod:`leasecheck.servers.docker`.
The catalogue (:mod:`leasecheck.nemesis.catalogue`) names its ``make_*``
factories lazily, so the Docker SDK (an optional extra) is imported only by a
run that asks for a ``docker-*`` fault.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from docker.models.networks import Network

from leasecheck.machine.labels import NETWORK_LABEL, RUN_LABEL, run_label
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.heal import Record, undoes


def _container(container: Container | str, client: docker.DockerClient | None) -> Container:
    """The container object for ``container`` (an object, a name or an id)."""
    if isinstance(container, Container):
        return container
    return (client or docker.from_env()).containers.get(container)


def _client_of(container: Container, client: docker.DockerClient | None) -> docker.DockerClient:
    """A client for the engine ``container`` lives on (the one its object was made with)."""
    if client is not None:
        return client
    owner = getattr(container, "client", None)
    return owner if owner is not None else docker.from_env()


def _status(container: Container) -> str:
    container.reload()
    return str(container.status)


def _networks(container: Container) -> dict[str, Any]:
    """The networks the container is attached to now (name -> endpoint), from the engine."""
    container.reload()
    return dict(container.attrs.get("NetworkSettings", {}).get("Networks") or {})


class _ContainerFault(ABC):
    """What every container fault holds: the container (resolved once) and the engine's client."""

    name: str = ""

    def __init__(self, container: Container | str, client: docker.DockerClient | None = None) -> None:
        self.container: Container = _container(container, client)
        self.client: docker.DockerClient = _client_of(self.container, client)

    def _value(self) -> dict[str, Any]:
        """The nemesis event's value: the victim by name (names are what a reader recognises)."""
        return {"victims": [self.container.name], "container": self.container.short_id}

    @abstractmethod
    def start(self) -> dict[str, Any]:
        """Inflict the fault; return the nemesis event's value."""

    @abstractmethod
    def heal(self) -> dict[str, Any] | None:
        """Undo it; None when there was nothing of ours to undo."""

    def undo_record(self) -> dict[str, Any] | None:
        """For ``leasecheck heal``: heal every container of this one's run (by its label)."""
        run_id = (self.container.labels or {}).get(RUN_LABEL)
        return {"kind": "docker", "label": run_label(run_id) if run_id else RUN_LABEL}


@undoes("docker")
def _undo_containers(rec: Record) -> str:
    try:
        reports = heal_containers(docker.from_env(), rec["label"])
    except docker.errors.DockerException as e:
        return f"the Docker engine did not answer: {e}"
    return f"healed {len(reports)} container(s): {reports}" if reports else "no container of that run"


class ContainerPause(_ContainerFault):
    """Freeze every process of the container (``docker pause``); heal unpauses.

    Unlike SIGSTOP of one pid, the freezer stops the whole container at once,
    so a multi-process server cannot answer on any connection, old or new
    (the kernel may still accept a new TCP connection, which then hangs).
    """

    name = "docker-pause"

    def __init__(self, container: Container | str, client: docker.DockerClient | None = None) -> None:
        super().__init__(container, client)
        self.paused = False

    def start(self) -> dict[str, Any]:
        self.container.pause()
        self.paused = True
        return self._value()

    def heal(self) -> dict[str, Any] | None:
        if not self.paused:
            return None
        self.paused = False
        if _status(self.container) == "paused":  # heal_containers may have been first
            self.container.unpause()
        return self._value()


class ContainerKill(_ContainerFault):
    """SIGKILL the container's whole process tree (a crash); heal starts it again on the same data.

    The container (and its data directory) stays; only its processes die. The
    heal returns once the engine has started the container, not when the store
    answers: clients see it unavailable for the second or two of its recovery,
    as after a real crash.
    """

    name = "docker-kill"

    def __init__(self, container: Container | str, client: docker.DockerClient | None = None, wait_s: float = 10.0) -> None:
        super().__init__(container, client)
        self.wait_s = wait_s
        self.killed = False

    def start(self) -> dict[str, Any]:
        self.container.kill()  # a paused container dies just the same (measured on Docker 20.10)
        self.container.wait(timeout=self.wait_s)  # exited for sure, so that a heal right after really starts it
        self.killed = True
        return {**self._value(), "signal": "SIGKILL"}

    def heal(self) -> dict[str, Any] | None:
        if not self.killed:
            return None
        self.killed = False
        if _status(self.container) not in ("running", "paused"):  # heal_containers may have been first
            self.container.start()
        return self._value()


def _run_network(container: Container, client: docker.DockerClient, network: Network | str | None) -> Network:
    """The network to cut the container from: given, or the one its label names, or its only one."""
    if isinstance(network, Network):
        return network
    name = network or (container.labels or {}).get(NETWORK_LABEL)
    if name is None:
        attached = list(_networks(container))
        if len(attached) != 1:
            raise ValueError(f"container {container.name} is on networks {attached}: say which one to disconnect")
        name = attached[0]
    return client.networks.get(name)


class ContainerDisconnect(_ContainerFault):
    """Take the container off its run network; heal connects it again.

    With the store's port published through that network (its only one), this
    cuts every client off: see the module docstring for exactly how.
    """

    name = "docker-disconnect"

    def __init__(
        self, container: Container | str, client: docker.DockerClient | None = None, network: Network | str | None = None
    ) -> None:
        super().__init__(container, client)
        self.network: Network = _run_network(self.container, self.client, network)
        self.disconnected = False

    def _value(self) -> dict[str, Any]:
        return {**super()._value(), "network": self.network.name}

    def start(self) -> dict[str, Any]:
        self.network.disconnect(self.container)
        self.disconnected = True
        return self._value()

    def heal(self) -> dict[str, Any] | None:
        if not self.disconnected:
            return None
        self.disconnected = False
        if self.network.name not in _networks(self.container):  # heal_containers may have been first
            self.network.connect(self.container)
        return self._value()


def _heal_one(client: docker.DockerClient, container: Container) -> list[str]:
    """Unpause, reconnect, start — in that order — whatever this container needs; return what was done.

    Unpause first (an engine may refuse to change a frozen container's
    network); reconnect before starting, so the start publishes the ports on
    the run network again.
    """
    done: list[str] = []
    status = _status(container)
    if status == "paused":
        container.unpause()
        done.append("unpause")
    wanted = (container.labels or {}).get(NETWORK_LABEL)
    if wanted and wanted not in _networks(container):
        client.networks.get(wanted).connect(container)
        done.append("connect")
    if _status(container) in ("created", "exited"):
        container.start()
        done.append("start")
    return done


def heal_containers(client: docker.DockerClient, label: str = RUN_LABEL) -> list[dict[str, Any]]:
    """Unpause, reconnect and start every container carrying ``label`` (``key`` or ``key=value``).

    Used by heal-all at the end of a run (``run_label(run_id)``) and by
    ``leasecheck heal`` (the bare :data:`RUN_LABEL`: every run's containers).
    It tries every container even when one fails, and reports per container
    what it did (``healed``) or why it could not (``error``); containers that
    needed nothing are left out.
    """
    report: list[dict[str, Any]] = []
    for container in client.containers.list(all=True, filters={"label": label}):
        try:
            done = _heal_one(client, container)
        except (APIError, NotFound) as e:
            report.append({"container": container.name, "error": str(e)})
            continue
        if done:
            report.append({"container": container.name, "healed": done})
    return report


def _store_container(ctx: FaultContext) -> Container | str | None:
    """The store's container (a ``--env docker`` server has one); None for any other store, or before it exists."""
    container: Container | str | None = getattr(ctx.server, "container", None)
    return container


def make_docker_pause(ctx: FaultContext, rng: random.Random) -> ContainerPause | None:
    """The catalogue's ``docker-pause``."""
    container = _store_container(ctx)
    return ContainerPause(container) if container is not None else None


def make_docker_kill(ctx: FaultContext, rng: random.Random) -> ContainerKill | None:
    """The catalogue's ``docker-kill``."""
    container = _store_container(ctx)
    return ContainerKill(container) if container is not None else None


def make_docker_disconnect(ctx: FaultContext, rng: random.Random) -> ContainerDisconnect | None:
    """The catalogue's ``docker-disconnect``."""
    container = _store_container(ctx)
    return ContainerDisconnect(container) if container is not None else None
