"""``--env docker`` on a real engine: stores in containers, container faults, heal-all, cleanup.

The module fixture runs ``scripts/start-dockerd.sh`` (installs docker.io and
starts dockerd when no engine answers). If no engine can be had, every test
here FAILS with the script's reason — never a skip: a CI run that silently
stops testing the Docker environment must be red.

No registry is used: the stores run from the host-root image (the host's
binaries), and the one "image of its own" case builds its image locally from
the host's redis-server. Each worker (pytest-xdist) gets its own run: its own
network and containers, all removed at the end — which the teardown asserts
by asking the engine.
"""

from __future__ import annotations

import io
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container
from paths import REPO
from stores import claim, new_node, serve

from leasecheck.nemesis.catalogue import CATALOGUE, Need
from leasecheck.nemesis.container import ContainerDisconnect, ContainerKill, ContainerPause, heal_containers
from leasecheck.servers.base import EnvironmentFailure
from leasecheck.servers.docker import HOSTROOT_IMAGE, ContainerServer, DockerRun, ensure_base_image
from leasecheck.targets.base import Indeterminate, Lease, NodeState, Refused, Target, TargetConfig, Unavailable
from leasecheck.targets.postgres_lease import PostgresLease
from leasecheck.targets.redis_lease import RedisLease
from leasecheck.waiting import wait_for

TTL_MS = 300
#: the client's own timeout: how long an op waits for a frozen or cut-off store
TIMEOUT_S = 1.0


# --- engine, run, servers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    """A client for an engine that answers, started by scripts/start-dockerd.sh if need be."""
    try:
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "start-dockerd.sh")], capture_output=True, text=True, timeout=900,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"scripts/start-dockerd.sh did not finish in 15 minutes: {e}", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"no Docker engine (scripts/start-dockerd.sh exit {done.returncode}):\n{done.stdout}{done.stderr}", pytrace=False)
    engine = docker.from_env(timeout=60)
    try:
        engine.ping()
    except docker.errors.DockerException as e:
        pytest.fail(f"start-dockerd.sh succeeded but the engine does not answer the SDK: {e}", pytrace=False)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def run(client: docker.DockerClient) -> Iterator[DockerRun]:
    """This module's run (per xdist worker): a network; removed with all its containers at the end."""
    the_run = DockerRun.open(client)
    yield the_run
    the_run.close()
    assert the_run.containers() == [], "containers of the run survived close()"
    assert the_run.networks() == [], "the run's network survived close()"


@pytest.fixture(scope="module")
def redis_container(run: DockerRun) -> Iterator[ContainerServer]:
    yield from serve(run.redis, "redis in a container")


@pytest.fixture(scope="module")
def postgres_container(run: DockerRun) -> Iterator[ContainerServer]:
    yield from serve(run.postgres, "postgres in a container")


BACKENDS: dict[str, type[Target]] = {"redis": RedisLease, "postgres": PostgresLease}


@pytest.fixture(params=["redis", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[ContainerServer]:
    """Each store's container, healthy at the start and at the end of the test (whatever a test broke)."""
    server: ContainerServer = request.getfixturevalue(f"{request.param}_container")
    yield server
    heal_containers(server.client, server.run.label)
    wait_for(server._ready, timeout=30, every=0.05, what=f"{server.kind} answering again")


@pytest.fixture
def make(store: ContainerServer) -> Iterator[Callable[..., Target]]:
    """Reference backends on the store's published port, closed after the test."""
    made: list[Target] = []

    def new(timeout_s: float = TIMEOUT_S) -> Target:
        target = BACKENDS[store.kind](TargetConfig(url=store.url, ttl_ms=TTL_MS, timeout_s=timeout_s))
        made.append(target)
        return target

    yield new
    for target in made:
        target.close()


# --- helpers ---------------------------------------------------------------------------------------


def read_when_back(target: Target, node: str, timeout: float = 30.0) -> NodeState:
    """Read ``node`` as soon as the store answers again (after a kill, a disconnect...)."""

    def attempt() -> NodeState | None:
        try:
            return target.read(node)
        except (Unavailable, Indeterminate):
            return None

    return wait_for(attempt, timeout, every=0.1, what=f"a read of {node}")


def engine_state(container: Container) -> dict[str, Any]:
    container.reload()
    return container.attrs["State"]


def attached(container: Container) -> list[str]:
    container.reload()
    return list(container.attrs["NetworkSettings"]["Networks"] or {})


def port_refuses(port: int) -> bool:
    """Does a TCP connection to 127.0.0.1:port get refused (nothing listens on the host port)?"""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    return False


def prepared(make: Callable[..., Target]) -> Target:
    """A backend whose store has its schema / scripts (so a frozen store already knows them)."""
    target = make()
    target.setup()
    return target


# --- base image and servers --------------------------------------------------------------------------


def test_the_base_image_is_built_locally_from_an_empty_tar(client: docker.DockerClient) -> None:
    tag = ensure_base_image(client)
    assert tag == HOSTROOT_IMAGE
    image = client.images.get(tag)
    assert image.attrs["Size"] == 0, "the image has files of its own"
    assert image.attrs.get("RepoDigests") == [], "the image came from a registry"
    assert image.labels.get("leasecheck.image") == "hostroot"
    assert ensure_base_image(client) == tag and client.images.get(tag).id == image.id  # idempotent


def test_each_store_runs_the_hosts_binaries_published_on_loopback_only(store: ContainerServer, run: DockerRun) -> None:
    assert store.choice is not None and store.choice.hostroot  # no registry here: the fallback, said in the log
    assert "falling back to leasecheck/hostroot:1" in store.log_path.read_text()
    container = store.container
    assert container is not None and container.labels["leasecheck.run"] == run.run_id
    assert attached(container) == [run.network_name]
    published = container.attrs["NetworkSettings"]["Ports"][f"{store.container_port}/tcp"]
    assert published == [{"HostIp": "127.0.0.1", "HostPort": str(store.port)}]
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    assert not mounts["/usr"]["RW"] and not mounts["/etc"]["RW"] and mounts["/data"]["RW"]
    assert mounts["/data"]["Source"] == str(store.directory.resolve())
    assert store.pid is not None and store.pid == engine_state(container)["Pid"]


def test_postgres_runs_as_the_hosts_postgres_user_with_initdb_done_inside(postgres_container: ContainerServer) -> None:
    import pwd

    user = pwd.getpwnam("postgres")
    container = postgres_container.container
    assert container is not None
    assert container.attrs["Config"]["User"] == f"{user.pw_uid}:{user.pw_gid}"
    assert (postgres_container.directory / "pgdata" / "PG_VERSION").stat().st_uid == user.pw_uid
    top = container.top(ps_args="-o pid,uid,comm")  # the engine needs the pid column
    uid = top["Titles"].index("UID")
    assert top["Processes"] and all(int(row[uid]) == user.pw_uid for row in top["Processes"]), top


def test_the_reference_backends_are_correct_on_the_containers(make: Callable[..., Target]) -> None:
    a, b = prepared(make), make()
    node = new_node(a)
    lease = claim(a, node, "a")
    assert b.try_claim(node, "b") == Refused("held")
    assert a.effect(lease, "wrote") is None
    assert a.commit(lease, "done") is None
    assert b.read(node) == NodeState("SUCCEEDED", lease.epoch, "a", "done")


def test_restart_removes_the_container_and_keeps_the_data(store: ContainerServer, make: Callable[..., Target]) -> None:
    a = prepared(make)
    node = new_node(a)
    lease = claim(a, node, "a")
    assert a.commit(lease, "done") is None
    old = store.container
    assert old is not None
    store.restart()
    assert store.container is not None and store.container.id != old.id
    with pytest.raises(docker.errors.NotFound):
        old.reload()
    assert read_when_back(a, node) == NodeState("SUCCEEDED", lease.epoch, "a", "done")


# --- faults ----------------------------------------------------------------------------------------


def test_pause_makes_an_op_in_flight_indeterminate_and_unpause_restores(store: ContainerServer, make: Callable[..., Target]) -> None:
    a = prepared(make)
    node = new_node(a)
    assert store.container is not None
    fault = ContainerPause(store.container)
    value = fault.start()
    try:
        assert value["victims"] == [store.container.name]
        assert engine_state(store.container)["Paused"]
        started = time.monotonic()
        with pytest.raises(Indeterminate):  # sent to a frozen store: it may run it when thawed
            a.try_claim(node, "a")
        assert time.monotonic() - started < TIMEOUT_S + 2.5
    finally:
        healed = fault.heal()
    assert healed is not None and not engine_state(store.container)["Paused"]
    assert fault.heal() is None  # nothing left to undo
    # the store answers again; Redis runs the frozen claim on thaw, Postgres may or may not have run it
    assert read_when_back(make(), node).status in ("READY", "RUNNING")


def test_redis_runs_the_claim_it_received_while_paused(redis_container: ContainerServer) -> None:
    """Why a paused store's op is Indeterminate, not failed: it happens after all."""
    a = RedisLease(TargetConfig(url=redis_container.url, ttl_ms=60_000, timeout_s=TIMEOUT_S))
    a.setup()
    node = new_node(a)
    assert redis_container.container is not None
    fault = ContainerPause(redis_container.container)
    fault.start()
    try:
        with pytest.raises(Indeterminate):
            a.try_claim(node, "a")
    finally:
        fault.heal()
    assert wait_for(lambda: a.read(node) if a.read(node).status == "RUNNING" else None, timeout=15, every=0.05).owner == "a"
    a.close()


def test_kill_and_heal_keep_an_acknowledged_commit(store: ContainerServer, make: Callable[..., Target]) -> None:
    a = prepared(make)
    node = new_node(a)
    lease = claim(a, node, "a")
    assert a.effect(lease, "wrote") is None
    assert a.commit(lease, "done") is None  # acknowledged: AOF fsynced (redis) / WAL fsynced (postgres)
    assert store.container is not None
    fault = ContainerKill(store.container)
    value = fault.start()
    assert value["victims"] == [store.container.name] and value["signal"] == "SIGKILL"
    state = engine_state(store.container)
    assert state["Status"] == "exited" and state["ExitCode"] == 137
    with pytest.raises((Unavailable, Indeterminate)):
        make().read(node)
    assert fault.heal() is not None
    assert engine_state(store.container)["Running"]
    b = make()
    assert read_when_back(b, node) == NodeState("SUCCEEDED", lease.epoch, "a", "done")
    assert b.try_claim(node, "b") == Refused("terminal")
    late = b.effect(Lease(node, "x", 0), "older")
    assert isinstance(late, Refused) and late.reason == "stale", "the fence was lost"


def test_disconnect_cuts_the_clients_off_and_heal_restores(store: ContainerServer, run: DockerRun, make: Callable[..., Target]) -> None:
    a = prepared(make)
    node = new_node(a)
    lease = claim(a, node, "a")
    assert store.container is not None
    fault = ContainerDisconnect(store.container)
    value = fault.start()
    try:
        assert value == {"victims": [store.container.name], "container": store.container.short_id, "network": run.network_name}
        assert attached(store.container) == [] and engine_state(store.container)["Running"]  # cut off, not stopped
        assert port_refuses(store.port), "the host port still leads to the store"
        started = time.monotonic()
        with pytest.raises((Indeterminate, Unavailable)):  # the open connection is closed under it
            a.renew(lease)
        with pytest.raises(Unavailable):  # a new one is refused: definitely not applied
            make().read(node)
        assert time.monotonic() - started < 2 * TIMEOUT_S + 3
    finally:
        healed = fault.heal()
    assert healed is not None and attached(store.container) == [run.network_name]
    assert read_when_back(a, node).status in ("RUNNING", "READY")  # the store kept running: the lease may have expired meanwhile


def test_an_op_in_flight_when_the_store_is_disconnected_is_indeterminate(redis_container: ContainerServer) -> None:
    """The op is on its way (the store is frozen, so it cannot answer first) when the network is cut."""
    a = RedisLease(TargetConfig(url=redis_container.url, ttl_ms=TTL_MS, timeout_s=10.0))
    a.setup()
    node = new_node(a)
    assert redis_container.container is not None
    pause, cut = ContainerPause(redis_container.container), ContainerDisconnect(redis_container.container)
    pause.start()
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(_outcome(lambda: a.try_claim(node, "a"))))
    try:
        thread.start()
        time.sleep(0.2)
        started = time.monotonic()
        cut.start()
        thread.join(5)
        assert time.monotonic() - started < 5, "the cut did not end the op: it waited for its own 10 s timeout"
    finally:
        cut.heal()
        pause.heal()
        thread.join(15)
    assert len(outcome) == 1 and isinstance(outcome[0], Indeterminate), outcome
    a.close()


def _outcome(op: Callable[[], object]) -> object:
    try:
        return op()
    except Exception as e:
        return e


def test_heal_containers_leaves_nothing_paused_stopped_or_disconnected(
    client: docker.DockerClient, run: DockerRun, redis_container: ContainerServer, postgres_container: ContainerServer
) -> None:
    r, p = redis_container.container, postgres_container.container
    assert r is not None and p is not None
    ContainerDisconnect(r).start()
    ContainerPause(r).start()  # frozen and cut off
    ContainerDisconnect(p).start()
    ContainerKill(p).start()  # crashed and cut off
    assert engine_state(r)["Paused"] and engine_state(p)["Status"] == "exited"
    report = heal_containers(client, run.label)
    assert {entry["container"]: entry["healed"] for entry in report} == {
        r.name: ["unpause", "connect"], p.name: ["connect", "start"],
    }
    for container in run.containers():
        state = engine_state(container)
        assert state["Running"] and not state["Paused"], (container.name, state)
        assert attached(container) == [run.network_name], container.name
    assert heal_containers(client, run.label) == []  # nothing left to heal
    for server in (redis_container, postgres_container):
        target = BACKENDS[server.kind](TargetConfig(url=server.url, ttl_ms=TTL_MS, timeout_s=TIMEOUT_S))
        assert read_when_back(target, "no-such-node").status == "READY"
        target.close()


def test_a_fault_healed_by_heal_containers_first_heals_quietly(run: DockerRun, redis_container: ContainerServer) -> None:
    """heal_all after heal_containers (or the other way round) must not fail on an already healed container."""
    c = redis_container.container
    assert c is not None
    faults: list[ContainerPause | ContainerDisconnect] = [ContainerPause(c), ContainerDisconnect(c)]
    faults[1].start()
    faults[0].start()
    heal_containers(run.client, run.label)
    for fault in reversed(faults):
        assert fault.heal() is not None
    assert engine_state(c)["Running"] and attached(c) == [run.network_name]


def test_event_names_for_the_history() -> None:
    container_events = {kind.name: kind.events for kind in CATALOGUE if Need.DOCKER in kind.needs}
    assert container_events == {
        "docker-pause": ("pause", "resume"), "docker-kill": ("kill", "start"), "docker-disconnect": ("partition", "heal"),
    }
    assert [f.name for f in (ContainerPause, ContainerKill, ContainerDisconnect)] == list(container_events)


# --- images of their own, and cleanup ------------------------------------------------------------------


def _self_contained_redis_image(client: docker.DockerClient, tag: str) -> None:
    """An image holding the host's redis-server and the libraries it links (ldd): no host mounts needed."""
    out = subprocess.run(["ldd", "/usr/bin/redis-server"], capture_output=True, text=True, check=True).stdout
    paths = {"/usr/bin/redis-server"} | {part for line in out.splitlines() for part in line.split() if part.startswith("/")}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", dereference=True) as tar:  # each file where ldd finds it
        for path in sorted(paths):
            tar.add(path, arcname=path.lstrip("/"), recursive=False)
    repository, _, version = tag.rpartition(":")
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=version)


def test_an_image_present_locally_is_used_as_it_is(client: docker.DockerClient, tmp_path: Path) -> None:
    tag = f"leasecheck-test/redis-{uuid.uuid4().hex[:6]}:1"
    _self_contained_redis_image(client, tag)
    try:
        with DockerRun.open(client) as own:
            server = own.redis(tmp_path / "redis", image=tag)
            try:
                server.start()
                assert server.choice is not None and not server.choice.hostroot
                assert "present locally" in server.log_path.read_text()
                assert server.container is not None
                assert [m["Destination"] for m in server.container.attrs["Mounts"]] == ["/data"]  # no host directories
                target = RedisLease(TargetConfig(url=server.url, ttl_ms=TTL_MS, timeout_s=TIMEOUT_S))
                target.setup()
                node = new_node(target)
                assert claim(target, node, "a").epoch == 1
                target.close()
            finally:
                server.stop()
    finally:
        client.images.remove(tag, force=True)


def test_close_removes_every_container_and_the_network(client: docker.DockerClient, tmp_path: Path) -> None:
    own = DockerRun.open(client)
    server = own.redis(tmp_path / "redis")
    server.start()
    assert server.container is not None
    ContainerKill(server.container).start()  # a run may end with a fault still active
    label = {"label": own.label}
    assert len(client.containers.list(all=True, filters=label)) == 1 and len(client.networks.list(filters=label)) == 1
    own.close()
    assert client.containers.list(all=True, filters=label) == []
    assert client.networks.list(filters=label) == []
    own.close()  # idempotent
    server.stop()  # and the server object knows its container is gone


def test_a_store_that_cannot_start_fails_with_its_log(run: DockerRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = run.redis(tmp_path / "bad", name=f"leasecheck-{run.run_id}-bad")
    monkeypatch.setattr(server, "_command", lambda: ["/usr/bin/redis-server", "--no-such-option", "1"])
    with pytest.raises(EnvironmentFailure, match=r"(?s)exited with code 1 while starting.*no-such-option"):
        server.start(timeout=20)
    assert server.container is None  # removed, and its output is in the error
    assert [c.name for c in run.containers() if c.name.endswith("-bad")] == []
