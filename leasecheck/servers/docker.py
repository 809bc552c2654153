"""Store servers in Docker containers (``--env docker``), with the same interface as the local ones.

Why containers at all, when :mod:`leasecheck.servers.redis` and ``.postgres``
already run the stores as local processes: a container can be frozen whole
(``docker pause``), crashed whole (``docker kill``) and taken off its network
(``docker network disconnect``) by the engine, which is what
:mod:`leasecheck.nemesis.container` does — no pid bookkeeping, no process-group tricks.

**No registry needed.** The machines this runs on reach no image registry, so
an image is chosen like this (``choose_image``):

1. the image asked for (``redis:7``, ``postgres:16`` by default) if the engine
   already has it — it is used as it is, its own binaries on its own PATH;
2. else, only when ``pull=True``, pulled from its registry (never by default:
   a pull on a machine without a registry hangs for the client's timeout, and
   a test suite must send no traffic off the machine);
3. else the *host-root* image (:func:`ensure_base_image`): an image made by
   ``docker import`` of an empty tar, run with the host's ``/usr``, ``/lib``,
   ``/lib64``, ``/bin``, ``/sbin`` and ``/etc`` bind-mounted read-only, so the
   container runs the host's own ``redis-server`` / ``postgres``. The server's
   log says which of the three happened.

**Networking.** Every run gets its own user-defined bridge network
(``leasecheck-<run id>``, see :class:`DockerRun`); each container is on that
network only and publishes its port on ``127.0.0.1:<free port>`` through it.
Clients talk to ``127.0.0.1`` only — never to container addresses — and
disconnecting a container from the run network really cuts them off
(measured: the host port stops listening until it is reconnected).

**Data and logs.** The server's directory on the host is bind-mounted at
``/data``: data, AOF / WAL and the server's log live there, so a killed
container started again finds its data, ``log_path`` is a plain host file
like a local server's, and ``restart()`` (which removes the container and
creates a new one) keeps the data too. Durability settings are those of the
local servers: Redis fsyncs its AOF before every reply, Postgres keeps
``fsync`` and ``synchronous_commit`` on.

Every container and the network carry the label ``leasecheck.run=<run id>``;
:meth:`DockerRun.close` removes everything so labelled, and
:func:`leasecheck.nemesis.container.heal_containers` heals it.
"""

from __future__ import annotations

import io
import logging
import os
import pwd
import shlex
import tarfile
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.models.networks import Network
from docker.types import Mount

from leasecheck.nemesis.container import NETWORK_LABEL, RUN_LABEL, run_label
from leasecheck.servers.base import EnvironmentFailure, LocalServer, log_tail

# The store clients (redis, psycopg) and the local servers' helpers that import them are
# imported where used: each store is an optional extra, and a Redis-only install must work.

#: a child of the runner's logger, so these lines land in the run's leasecheck.log
log = logging.getLogger("leasecheck.run.docker")

#: a ContainerServer subclass (DockerRun's helpers return what they were given)
S = TypeVar("S", bound="ContainerServer")

#: the local, registry-free base image (see ensure_base_image)
HOSTROOT_IMAGE = "leasecheck/hostroot:1"
#: host directories the host-root image is run with, read-only (those that exist)
HOST_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
#: where the server's host directory appears inside the container
DATA = "/data"
#: label naming the kind of store a container serves
KIND_LABEL = "leasecheck.kind"


def connect_engine(timeout_s: float = 60.0) -> docker.DockerClient:
    """A client for the local engine (``DOCKER_HOST`` or the default socket), checked with a ping."""
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except DockerException as e:
        raise EnvironmentFailure(f"docker: no engine answers ({e}); start one with scripts/start-dockerd.sh") from None
    return client


def _empty_tar() -> bytes:
    """A valid tar archive with no member: the root filesystem of the host-root image."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w"):
        pass
    return buffer.getvalue()


def ensure_base_image(client: docker.DockerClient, tag: str = HOSTROOT_IMAGE) -> str:
    """Make sure the host-root image exists locally; return its tag.

    It is ``docker import`` of an empty tar: no layer content, no registry, no
    network, ~0.1 s. It has no files of its own — every container made from it
    gets the host's system directories bind-mounted read-only (:data:`HOST_DIRS`)
    and runs the host's binaries. Idempotent; safe to race (both imports give
    the same empty image, the tag just moves).
    """
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    repository, _, version = tag.rpartition(":")
    try:
        client.api.import_image_from_data(
            _empty_tar(), repository=repository, tag=version, changes=["LABEL leasecheck.image=hostroot"]
        )
        client.images.get(tag)
    except (APIError, ImageNotFound) as e:
        raise EnvironmentFailure(f"docker: cannot build the base image {tag} from an empty tar: {e}") from None
    log.info("built base image %s (docker import of an empty tar)", tag)
    return tag


@dataclass(frozen=True)
class ImageChoice:
    """The image a server runs, and whether it needs the host's directories (host-root)."""

    image: str
    hostroot: bool
    note: str


def choose_image(client: docker.DockerClient, wanted: str | None, pull: bool = False) -> ImageChoice:
    """``wanted`` if present locally (or pulled, when ``pull``); else the host-root image. See the module doc."""
    if wanted:
        try:
            client.images.get(wanted)
            return ImageChoice(wanted, False, f"image {wanted} (present locally)")
        except ImageNotFound:
            pass
        if pull:
            try:
                client.images.pull(wanted)
                return ImageChoice(wanted, False, f"image {wanted} (pulled)")
            except DockerException as e:
                reason = f"pulling it failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        else:
            reason = "not present locally and pulling is off"
        note = f"image {wanted}: {reason}; falling back to {HOSTROOT_IMAGE} with the host's binaries"
    else:
        note = f"image {HOSTROOT_IMAGE} with the host's binaries"
    return ImageChoice(ensure_base_image(client), True, note)


def _host_mounts() -> list[Mount]:
    return [Mount(path, path, type="bind", read_only=True) for path in HOST_DIRS if os.path.exists(path)]


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

    def redis(self, directory: str | os.PathLike[str] | None = None, **options: Any) -> ContainerRedisServer:
        """A Redis container of this run (not started); options as :class:`ContainerServer`."""
        return self._add(ContainerRedisServer(self, directory, **options))

    def postgres(self, directory: str | os.PathLike[str] | None = None, **options: Any) -> ContainerPostgresServer:
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


class ContainerServer(LocalServer):
    """A store server in a container of a :class:`DockerRun`: LocalServer's interface, the engine's hands.

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
        run: DockerRun,
        directory: str | os.PathLike[str] | None = None,
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
        mounts = (_host_mounts() if choice.hostroot else []) + [Mount(DATA, str(self.directory.resolve()), type="bind")]
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self._state()
            if not state.get("Running"):
                self._give_up(f"container {self.name} exited with code {state.get('ExitCode')} while starting")
            if self._ready():
                return
            time.sleep(0.1)
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


class ContainerRedisServer(ContainerServer):
    """redis-server in a container: AOF fsynced before every reply, no snapshots, like RedisServer."""

    kind = "redis"
    container_port = 6379
    default_image = "redis:7"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        from leasecheck.servers.redis import find_redis_server

        assert self.choice is not None
        binary = find_redis_server() if self.choice.hostroot else "redis-server"
        return [
            binary,
            "--bind", "0.0.0.0",  # inside the container; the host publishes it on 127.0.0.1 only
            "--protected-mode", "no",  # clients come through the bridge's gateway, not loopback
            "--port", str(self.container_port),
            "--dir", DATA,
            "--daemonize", "no",
            "--logfile", f"{DATA}/{self.log_path.name}",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
        ]

    def _ready(self) -> bool:
        return _redis_answers(self.port)


def _redis_answers(port: int) -> bool:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1.0, socket_connect_timeout=1.0)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


#: server settings, as PostgresServer's, adapted to a container (listens on all its interfaces)
POSTGRES_SETTINGS = {
    "listen_addresses": "*",
    "unix_socket_directories": DATA,
    "hba_file": f"{DATA}/pg_hba.conf",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "max_connections": "200",
    "logging_collector": "off",
    "log_destination": "stderr",
    "timezone": "UTC",
}

#: trust everyone who reaches the port: it is published on 127.0.0.1 only, and clients arrive from the bridge's gateway
PG_HBA = "local all all trust\nhost all all all trust\n"


class ContainerPostgresServer(ContainerServer):
    """PostgreSQL in a container, as the postgres user: initdb inside it on first start, then postgres.

    One container does both (a shell runs ``initdb`` unless ``/data/pgdata``
    holds a cluster, then ``exec``\\ s postgres as PID 1), so a container
    started again after a kill skips straight to crash recovery. With the
    host-root image the user is the host's ``postgres`` (its uid and gid, as
    the host's ``/etc/passwd`` is the container's); with an image of its own,
    that image's ``postgres`` user. ``stop`` sends SIGINT (fast shutdown: it
    does not wait for clients to disconnect).
    """

    kind = "postgres"
    container_port = 5432
    default_image = "postgres:16"
    stop_signal = "SIGINT"

    def __init__(self, run: DockerRun, directory: str | os.PathLike[str] | None = None, **options: Any) -> None:
        super().__init__(run, directory, **options)
        self._ids: tuple[int, int] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _user_ids(self) -> tuple[int, int]:
        """(uid, gid) of the postgres user the image will run as."""
        if self._ids is None:
            assert self.choice is not None
            self._ids = _host_user_ids() if self.choice.hostroot else _image_user_ids(self.client, self.choice.image)
        return self._ids

    def _user(self) -> str:
        uid, gid = self._user_ids()
        return f"{uid}:{gid}"

    def _prepare(self) -> None:
        """The directory, hba file and log belong to the postgres user (initdb and postgres refuse root)."""
        uid, gid = self._user_ids()
        hba = self.directory / "pg_hba.conf"
        hba.write_text(PG_HBA)
        self.log_path.touch()
        for path in (self.directory, hba, self.log_path):
            os.chown(path, uid, gid)

    def _command(self) -> list[str]:
        from leasecheck.servers.postgres import find_bin_dir

        assert self.choice is not None
        bin_dir = f"{find_bin_dir()}/" if self.choice.hostroot else ""
        data = f"{DATA}/pgdata"
        initdb = [f"{bin_dir}initdb", "-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
        server = [f"{bin_dir}postgres", "-D", data, "-p", str(self.container_port)]
        for key, value in POSTGRES_SETTINGS.items():
            server += ["-c", f"{key}={value}"]
        script = (
            f"exec >>{shlex.quote(f'{DATA}/{self.log_path.name}')} 2>&1\n"
            f"test -f {data}/PG_VERSION || {shlex.join(initdb)} || exit 1\n"
            f"exec {shlex.join(server)}\n"
        )
        return ["/bin/sh", "-c", script]

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False


def _host_user_ids() -> tuple[int, int]:
    from leasecheck.servers.postgres import SERVER_USER

    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise EnvironmentFailure(f"postgres: no {SERVER_USER!r} user on this host to run the server as (install postgresql)") from None
    return user.pw_uid, user.pw_gid


def _image_user_ids(client: docker.DockerClient, image: str) -> tuple[int, int]:
    """The postgres user's uid and gid inside ``image``: asked of a throwaway container, since images differ (999 in the official one)."""
    from leasecheck.servers.postgres import SERVER_USER

    try:
        out = client.containers.run(image, entrypoint=["sh", "-c", f"id -u {SERVER_USER}; id -g {SERVER_USER}"], remove=True)
        uid, gid = (int(x) for x in out.decode().split())
    except (DockerException, ValueError) as e:
        raise EnvironmentFailure(f"postgres: cannot find the {SERVER_USER!r} user in image {image}: {e}") from None
    return uid, gid


#: what ``--env docker`` can start, by Target.store
SERVERS: dict[str, Callable[..., ContainerServer]] = {"redis": ContainerRedisServer, "postgres": ContainerPostgresServer}

__all__ = [
    "HOSTROOT_IMAGE", "SERVERS", "ContainerPostgresServer", "ContainerRedisServer", "ContainerServer", "DockerRun",
    "ImageChoice", "choose_image", "connect_engine", "ensure_base_image", "remove_run",
]
