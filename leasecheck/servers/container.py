"""A store server in a container of a Docker run: :class:`LocalServer`'s interface, the engine's hands.

Why containers at all, when :mod:`leasecheck.servers.redis` and ``.postgres``
already run the stores as local processes: a container can be frozen whole
(``docker pause``), crashed whole (``docker kill``) and taken off its network
(``docker network disconnect``) by the engine, which is what
:mod:`leasecheck.nemesis.container` does — no pid bookkeeping, no process-group tricks.

**Data and logs.** The server's directory on the host is bind-mounted at
``/data``: data, AOF / WAL and the server's log live there, so a killed
container started again finds its data, ``log_path`` is a plain host file
like a local server's, and ``restart()`` (which removes the container and
creates a new one) keeps the data too.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from typing import Any, NoReturn

from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import Mount

from leasecheck.machine.labels import NETWORK_LABEL
from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath, log_tail
from leasecheck.servers.image import ImageChoice, choose_image, host_mounts
from leasecheck.servers.run_network import RunNetwork
from leasecheck.waiting import poll

#: a child of the runner's logger, so these lines land in the run's leasecheck.log
log = logging.getLogger("leasecheck.run.docker")

#: where the server's host directory appears inside the container
DATA = "/data"
#: label naming the kind of store a container serves
KIND_LABEL = "leasecheck.kind"


class ContainerServer(LocalServer):
    """A store server in a container of a Docker run (its :class:`RunNetwork`): LocalServer's interface, the engine's hands.

    ``start`` creates and starts the container (or starts it again after a
    kill) and waits until the store answers through the published port;
    ``stop`` stops it gracefully and removes it; ``kill``, ``pause``,
    ``resume`` act on the whole container. ``container`` is the Docker SDK
    object while the container exists (None otherwise): hand it to
    :mod:`leasecheck.nemesis.container`'s faults. ``image`` is the image asked for (see
    :func:`choose_image`); ``pull`` allows pulling it.
    """

    #: the store's port inside the container
    container_port: int = 0
    #: the image used unless another is asked for
    default_image: str = ""
    #: the signal ``stop`` sends (the store's fast, clean shutdown)
    stop_signal: str = "SIGTERM"

    def __init__(
        self,
        run: RunNetwork,
        directory: StrPath | None = None,
        port: int | None = None,
        image: str | None = None,
        pull: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(directory, port)
        self.run = run
        self.client = run.client
        self.wanted_image = self.default_image if image is None else image
        self.pull = pull
        self.name = name or f"leasecheck-{run.run_id}-{self.kind}"
        self.container: Container | None = None
        self.choice: ImageChoice | None = None

    # ---------------------------------------------------------------- what runs

    @abstractmethod
    def _command(self) -> list[str]:
        """The argv run inside the container (for the chosen image)."""

    def _user(self) -> str | None:
        """``uid:gid`` to run as inside the container; None for the image's default."""
        return None

    def _prepare(self) -> None:
        """Host-side preparation of ``directory`` before the container first starts; idempotent."""

    def _note(self, message: str) -> None:
        """A line in the server's log (and the run's), for what the server itself cannot say."""
        log.info("%s: %s", self.name, message)
        with open(self.log_path, "a") as f:
            f.write(f"leasecheck: {message}\n")

    def _create(self) -> Container:
        """Create and start the container: run network only, port on 127.0.0.1, directory at /data."""
        choice = self.choice
        assert choice is not None
        mounts = (host_mounts() if choice.hostroot else []) + [Mount(DATA, str(self.directory.resolve()), type="bind")]
        labels = {**self.run.labels, NETWORK_LABEL: self.run.network_name, KIND_LABEL: self.kind}
        self.run.ensure_network()
        return self.client.containers.run(
            choice.image, entrypoint=self._command(), name=self.name, detach=True,
            user=self._user(), labels=labels, network=self.run.network_name, mounts=mounts,
            ports={f"{self.container_port}/tcp": ("127.0.0.1", self.port)}, stop_signal=self.stop_signal,
            working_dir=DATA,
        )

    # ---------------------------------------------------------------- lifecycle

    @property
    def pid(self) -> int | None:
        """The store's pid on the host while its container runs (paused counts as running)."""
        state = self._state()
        return int(state["Pid"]) if state.get("Running") and state.get("Pid") else None

    def _state(self) -> dict[str, Any]:
        if self.container is None:
            return {}
        try:
            self.container.reload()
        except NotFound:
            self.container = None
            return {}
        return dict(self.container.attrs.get("State") or {})

    def start(self, timeout: float = 60.0) -> ContainerServer:
        """Create the container (or start the killed one again) and wait until the store answers."""
        state = self._state()
        if state.get("Running"):
            return self
        try:
            if self.container is not None:
                self.container.start()  # after a kill: same container, same data
            else:
                if self.choice is None:
                    self.choice = choose_image(self.client, self.wanted_image, self.pull)
                    self._note(self.choice.note)
                self._prepare()
                self.container = self._create()
        except (APIError, ImageNotFound) as e:
            raise EnvironmentFailure(f"{self.kind}: cannot start container {self.name}: {e}") from None
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        def answers() -> bool:
            state = self._state()
            if not state.get("Running"):
                self._give_up(f"container {self.name} exited with code {state.get('ExitCode')} while starting")
            return self._ready()

        if not poll(answers, timeout, every=0.1):
            self._give_up(f"{self.kind} in container {self.name} did not answer within {timeout:g} s")

    def _give_up(self, what: str) -> NoReturn:
        """Remove the container that would not serve (its output goes into the error) and raise."""
        failure = self._failure(what)
        self.stop()
        raise failure

    def _failure(self, what: str) -> EnvironmentFailure:
        """An EnvironmentFailure with the server log's tail and the container's own output."""
        output = ""
        if self.container is not None:
            try:
                output = self.container.logs(tail=15).decode(errors="replace").strip()
            except DockerException:
                pass
        return EnvironmentFailure(
            f"{what}; log {self.log_path}:\n{log_tail(self.log_path)}" + (f"\ncontainer output:\n{output}" if output else "")
        )

    def stop(self, grace: float = 10.0) -> None:
        """Stop the store cleanly (unpausing it first) and remove its container; the data stays."""
        if self._state().get("Paused"):
            self.resume()
        container, self.container = self.container, None
        if container is None:
            return
        try:
            container.stop(timeout=int(grace))
            container.remove(force=True, v=True)
        except NotFound:
            pass

    def kill(self) -> None:
        """SIGKILL the whole container (a crash); ``start()`` brings it back on the same data."""
        if self.container is None or not self._state().get("Running"):
            return
        self.container.kill()
        self.container.wait(timeout=10)

    def pause(self) -> None:
        """Freeze every process of the container (``docker pause``)."""
        state = self._state()
        if self.container is not None and state.get("Running") and not state.get("Paused"):
            self.container.pause()

    def resume(self) -> None:
        if self.container is not None and self._state().get("Paused"):
            self.container.unpause()

