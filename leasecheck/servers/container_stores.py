"""Redis and PostgreSQL in containers, configured as their local servers are.

Durability settings are those of :mod:`leasecheck.servers.redis` and
:mod:`leasecheck.servers.postgres`: Redis fsyncs its AOF before every reply,
Postgres keeps ``fsync`` and ``synchronous_commit`` on. Each listens on all the
container's interfaces (clients arrive through the bridge), and is published
on the host's 127.0.0.1 only (see :class:`~leasecheck.servers.container.ContainerServer`).
"""

from __future__ import annotations

import os
import pwd
import shlex
from collections.abc import Callable
from typing import Any

import docker
from docker.errors import DockerException

from leasecheck.servers.base import EnvironmentFailure, StrPath
from leasecheck.servers.container import DATA, ContainerServer
from leasecheck.servers.postgres import DURABLE_SETTINGS, SERVER_USER, find_bin_dir
from leasecheck.servers.readiness import postgres_answers, redis_answers
from leasecheck.servers.redis import DURABLE_ARGS, find_redis_server
from leasecheck.servers.run_network import RunNetwork


class ContainerRedisServer(ContainerServer):
    """redis-server in a container: AOF fsynced before every reply, no snapshots, like RedisServer."""

    kind = "redis"
    container_port = 6379
    default_image = "redis:7"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
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
            *DURABLE_ARGS,
        ]

    def _ready(self) -> bool:
        return redis_answers(self.url)


#: server settings, as PostgresServer's, adapted to a container (listens on all its interfaces)
POSTGRES_SETTINGS = {
    "listen_addresses": "*",
    "unix_socket_directories": DATA,
    "hba_file": f"{DATA}/pg_hba.conf",
    **DURABLE_SETTINGS,
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

    def __init__(self, run: RunNetwork, directory: StrPath | None = None, **options: Any) -> None:
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
        return postgres_answers(self.url)


def _host_user_ids() -> tuple[int, int]:
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise EnvironmentFailure(f"postgres: no {SERVER_USER!r} user on this host to run the server as (install postgresql)") from None
    return user.pw_uid, user.pw_gid


def _image_user_ids(client: docker.DockerClient, image: str) -> tuple[int, int]:
    """The postgres user's uid and gid inside ``image``: asked of a throwaway container, since images differ (999 in the official one)."""
    try:
        out = client.containers.run(image, entrypoint=["sh", "-c", f"id -u {SERVER_USER}; id -g {SERVER_USER}"], remove=True)
        uid, gid = (int(x) for x in out.decode().split())
    except (DockerException, ValueError) as e:
        raise EnvironmentFailure(f"postgres: cannot find the {SERVER_USER!r} user in image {image}: {e}") from None
    return uid, gid


#: what ``--env docker`` can start, by Target.store
SERVERS: dict[str, Callable[..., ContainerServer]] = {"redis": ContainerRedisServer, "postgres": ContainerPostgresServer}
