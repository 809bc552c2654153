"""The store a backend runs against: a file, a local server we start, or the user's own (on their hosts: ``--hosts``)."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leasecheck.frame.store_server import SERVER_KINDS, store_server
from leasecheck.hosts.protocol import HostUnreachable
from leasecheck.nemesis.catalogue import Need
from leasecheck.run.options import RunOptions
from leasecheck.rundir.files import MEMBERS_DIR, server_directory
from leasecheck.servers.base import EnvironmentFailure, LocalServer
from leasecheck.targets.base import Indeterminate, Target, TargetConfig, Unavailable
from leasecheck.targets.durability import DEFAULT_PROFILE
from leasecheck.targets.durability import OPTION as PROFILE_OPTION
from leasecheck.targets.exec_target import ExecTarget
from leasecheck.waiting import poll

log = logging.getLogger("leasecheck.run")

if TYPE_CHECKING:  # imported where used: the docker SDK is an optional extra
    from leasecheck.hosts.control import DeployedCluster
    from leasecheck.servers.cluster import Cluster
    from leasecheck.servers.docker import DockerRun


#: how long a cluster of ours may take to settle before its first client is set up (:meth:`Environment.set_up`)
SETTLE_S = 20.0


@dataclass
class Environment:
    """Where the store is (``url``) and, if we started it, its server (and its Docker run)."""

    url: str
    server: LocalServer | None = None
    docker: DockerRun | None = None
    cluster: Cluster | None = None
    #: the user's own deployment (``--hosts``): never started nor stopped by us, only faulted, healed and its logs read
    deployed: DeployedCluster | None = None

    def fault_targets(self) -> tuple[Any, Any]:
        """What the store faults and the member faults act on: the server and cluster we started, or the deployment's
        (one member as the store's server when it has one member: ``pause-store`` / ``kill-store`` through its host)."""
        if self.deployed is not None:
            names = self.deployed.member_names()
            return (self.deployed.server(names[0]) if len(names) == 1 else None), self.deployed
        return self.server, self.cluster

    @property
    def members(self) -> Cluster | DeployedCluster | None:
        """The members the store runs on, ours or the deployment's (for the history's header and the report)."""
        return self.deployed or self.cluster

    def set_up(self, make: Callable[[], Target]) -> Target:
        """A client of the store with its ``setup()`` done (the producer's); Unavailable or Indeterminate if it cannot.

        A cluster of ours that drops the first client is waited for (its own readiness, asked of its members) and tried
        again for up to :data:`SETTLE_S`: on a loaded machine one stall right after the cluster came together can break
        its quorum (a ZooKeeper ensemble's followers give the leader up after 500 ms of silence), and it elects again
        within seconds; that is the cluster settling, not a store out of reach. A store the user gave, or one server of
        ours (ready when started), gets one try: its failure is said at once.
        """
        deadline = time.monotonic() + (SETTLE_S if self.cluster is not None else 0.0)
        while True:
            client = make()
            try:
                client.setup()
                return client
            except (Unavailable, Indeterminate):
                client.close()
                left = deadline - time.monotonic()
                if self.cluster is None or left <= 0 or not poll(self.cluster.ready, left, every=0.1):
                    raise

    def client_config(self, opts: RunOptions, run_dir: Path) -> TargetConfig:
        """What every client of the run is made with: the store's address, the lease's terms, and as options
        ``log_dir`` (where a backend may keep logs of its own: an exec: child's stderr goes to exec.log there) and the
        durability profile of an embedded store (SQLite's PRAGMAs)."""
        return TargetConfig(url=self.url, ttl_ms=opts.ttl_ms, timeout_s=opts.op_timeout_s,
                            options={"log_dir": str(run_dir), PROFILE_OPTION: opts.store_config})

    def heal_store(self) -> list[dict[str, Any]]:
        """Heal-all's last word on the store: every container of the run unpaused, reconnected and started, every
        link between a cluster's members whole and every member resumed, whoever left them otherwise."""
        reports: list[dict[str, Any]] = []
        if self.deployed is not None:  # what the nemesis healed, then whatever this run's tag is still on
            try:
                self.deployed.heal_all()
            except HostUnreachable as e:  # its fault's heal failed too (a fault-failed event): heal_run says which host
                log.warning("the deployment's heal-all: %s", e)
            rows = self.deployed.heal_run()
            reports.append({"hosts": str(self.deployed.deployment.path), "healed": [f"{r.member} {r.what}: {r.detail}" for r in rows]})
        if self.cluster is not None:
            self.cluster.heal_all()
            reports.append({"cluster": self.cluster.kind, "healed": "links whole, members resumed, clocks reset"})
        if self.docker is not None:
            from leasecheck.nemesis.container import heal_containers

            reports.extend(heal_containers(self.docker.client, self.docker.label))
        return reports

    def stop(self, keep_logs_in: Path | None = None) -> None:
        """Stop the server or cluster we started (never one the user gave), keeping its logs; a deployment's members'
        logs are copied into ``members/`` of the run folder."""
        if self.deployed is not None:
            try:
                if keep_logs_in is not None:
                    (keep_logs_in / MEMBERS_DIR).mkdir(exist_ok=True)
                    self.deployed.fetch_logs(keep_logs_in / MEMBERS_DIR)
            finally:
                self.deployed.close()
        if self.cluster is not None:
            self.cluster.stop()  # every member resumed and stopped, their hosts deleted
            self.cluster.remove_state()
        if self.server is None:
            return
        self.server.resume()  # a paused server cannot shut down
        self.server.stop()
        log = self.server.log_path
        if keep_logs_in is not None and log.exists() and not log.is_relative_to(keep_logs_in):  # else it is there already
            try:
                shutil.copy(self.server.log_path, keep_logs_in / self.server.log_path.name)
            except OSError:
                pass
        self.server.cleanup()
        if self.docker is not None:
            self.docker.close()  # every container and network of the run


def prepare_for(opts: RunOptions, target: type[Target], run_dir: Path, run_id: str, needs: Collection[Need]) -> Environment:
    """:func:`prepare` as a run of ``opts`` asks it (its faults' ``needs``: a store clock to skew, the power-loss layer)."""
    return prepare(target, run_dir, opts.url, skewable=Need.FAKETIME in needs, env=opts.env, cluster=opts.cluster,
                   ttl_ms=opts.ttl_ms, hosts=opts.hosts, run_id=run_id, faults=opts.nemesis, profile=opts.store_config,
                   power_layer=Need.POWERFS in needs)


def prepare(target: type[Target], run_dir: Path, url: str | None, skewable: bool = False, env: str = "local",
            cluster: str | None = None, ttl_ms: int = 1000, hosts: str | None = None, run_id: str = "",
            faults: Sequence[str] = (), profile: str = DEFAULT_PROFILE, power_layer: bool = False) -> Environment:
    """Start what ``target`` needs, or use ``url``; raises EnvironmentFailure.

    ``skewable`` starts the server under libfaketime, so the nemesis can skew
    the store's clock (and only then: it costs a little on every clock read).
    ``cluster`` starts that kind of cluster instead (``leasecheck.run.clusters``),
    its failure detectors sized by ``ttl_ms``. ``hosts`` opens the deployment file's hosts and tries, harmlessly,
    every command ``faults`` will need there (:func:`leasecheck.hosts.checks.open_deployment`); the store is at ``url``.
    A server we start runs with the durability ``profile`` (:mod:`leasecheck.targets.durability`), on the power-loss
    layer with ``power_layer`` (:func:`leasecheck.servers.powerfs_layer.on_powerfs`: a ``power-loss`` fault's).
    """
    if hosts is not None:
        from leasecheck.hosts.checks import open_deployment

        return Environment(url or "", deployed=open_deployment(hosts, run_id, faults))
    if url:
        return Environment(url)
    if cluster is not None:
        from leasecheck.run.clusters import CLUSTERS
        from leasecheck.servers.postgres import PostgresServer

        row = CLUSTERS[cluster]
        # Postgres members run as the postgres user, who may not reach a private run folder (as for one server)
        home = server_directory(run_dir, "cluster", PostgresServer._server_user() if row.store == "postgres" else None)
        made = row.load()(home, ttl_ms=ttl_ms, skewable=skewable)
        started = (made.on_powerfs() if power_layer else made).start()  # a power-loss-member's, a power-loss-all's
        return Environment(started.url, cluster=started)
    kind = target.store
    if kind is None and issubclass(target, ExecTarget):  # a child with a store of its own, or none: LEASECHECK_URL is empty
        return Environment("")
    if kind == "sqlite":
        return Environment(str(run_dir / "lease.sqlite3"))
    if kind == "files":  # a folder of lock and record files, shared by the workers on this host
        (run_dir / "files").mkdir(exist_ok=True)
        return Environment(str(run_dir / "files"))
    if env == "docker":
        return _in_docker(kind, run_dir)
    if kind not in SERVER_KINDS:
        raise EnvironmentFailure(f"target {target.name!r} brings its own store: give its address with --url")
    server = store_server(kind, run_dir, profile=profile, power_layer=power_layer, skewable=skewable)
    server.start()
    return Environment(server.url, server)


def _in_docker(kind: str | None, run_dir: Path) -> Environment:
    """The store as a container on a network of its own (``--env docker``)."""
    if kind not in ("postgres", "redis"):
        raise EnvironmentFailure(f"--env docker runs Postgres or Redis stores, not {kind!r}")
    from leasecheck.servers.docker import DockerRun

    run = DockerRun.open(run_id=run_dir.name.replace(":", "").replace(".", "-").lower())
    try:
        server = run.redis(run_dir / "redis") if kind == "redis" else run.postgres(run_dir / "postgres")
        server.start()
    except BaseException:
        run.close()
        raise
    return Environment(server.url, server, run)
