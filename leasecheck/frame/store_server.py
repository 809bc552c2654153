"""The store server leasecheck starts on this machine for one run: a lease run's store, a queue run's broker.

Why one maker: both kinds of run start a Postgres or Redis server of their own in the run
folder, with the run's durability profile (:mod:`leasecheck.targets.durability`) and, when a
``power-loss`` fault is asked for, on the power-loss layer (:func:`leasecheck.servers.powerfs_layer.on_powerfs`).
Written in each runner, the queue run's broker had neither: a job queue could not be cut
off from power on its shipped configuration.
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.rundir.files import server_directory
from leasecheck.servers.base import EnvironmentFailure, LocalServer
from leasecheck.targets.durability import DEFAULT_PROFILE, check_profile

#: the store kinds leasecheck starts a server of (``Target.store``, ``QueueLibrary.broker``)
SERVER_KINDS = ("postgres", "redis", "zookeeper", "etcd")


def store_server(kind: str | None, run_dir: Path, *, profile: str = DEFAULT_PROFILE, power_layer: bool = False,
                 skewable: bool = False) -> LocalServer:
    """The server of ``kind`` for a run in ``run_dir``, not started: under libfaketime if ``skewable`` (a store clock
    to skew), with the durability ``profile`` (Postgres, Redis: the others have one way to keep data), on the power-loss layer if ``power_layer``. EnvironmentFailure for a
    kind leasecheck starts no server of."""
    server: LocalServer
    if kind == "postgres":
        from leasecheck.servers.faketime import FaketimePostgresServer
        from leasecheck.servers.postgres import PostgresServer

        # in the run directory, never the temp folder: its log belongs to the run, and a killed run leaves nothing elsewhere
        home = server_directory(run_dir, "postgres", PostgresServer._server_user())
        postgres = FaketimePostgresServer(home) if skewable else PostgresServer(home)
        postgres.profile = check_profile(profile)
        server = postgres
    elif kind == "redis":
        from leasecheck.servers.faketime import FaketimeRedisServer
        from leasecheck.servers.redis import RedisServer

        redis = FaketimeRedisServer(run_dir / "redis") if skewable else RedisServer(run_dir / "redis")
        redis.profile = check_profile(profile)
        server = redis
    elif kind == "zookeeper":
        from leasecheck.servers.zookeeper import ZooKeeperServer

        server = ZooKeeperServer(run_dir / "zookeeper")
    elif kind == "etcd":
        from leasecheck.servers.etcd import EtcdServer

        server = EtcdServer(run_dir / "etcd")
    else:
        raise EnvironmentFailure(f"leasecheck starts no {kind!r} server: give its address with --url")
    if power_layer:
        from leasecheck.servers.powerfs_layer import on_powerfs

        on_powerfs(server, names="journaled" if kind == "postgres" else "strict")  # Postgres never fsyncs a new file's folder
    return server
