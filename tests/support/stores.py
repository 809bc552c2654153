"""Real store servers for the suite, started once per test session (per xdist worker).

A server that cannot start fails the tests that need it with the reason, never
a skip: a CI run without Postgres or Redis must be red, not silently thinner.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from leasecheck.servers.base import EnvironmentFailure, LocalServer
from leasecheck.servers.etcd import EtcdServer
from leasecheck.servers.postgres import PostgresServer
from leasecheck.servers.redis import RedisServer
from leasecheck.servers.zookeeper import ZooKeeperServer
from leasecheck.targets.base import Lease, Refused, Target, TargetConfig
from leasecheck.targets.redis_lease import RedisScripts
from leasecheck.targets.registry import TargetSpec, load
from leasecheck.waiting import wait_for

TTL_MS = 300
S = TypeVar("S", bound=LocalServer)


def serve(make: Callable[[], S], what: str) -> Iterator[S]:
    """A fixture's body: make ``what`` (e.g. "redis in a container") and start it, yield it, stop it.

    A server that cannot be made or started fails the test with the reason, never a skip.
    """
    try:
        server = make()
        server.start()
    except EnvironmentFailure as e:
        pytest.fail(f"cannot start {what}: {e}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
        server.cleanup()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    # its own directory under /tmp: the postgres user it runs as cannot enter pytest's
    yield from serve(PostgresServer, "postgres")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    yield from serve(lambda: RedisServer(tmp_path_factory.mktemp("redis")), "redis")


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    yield from serve(lambda: ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")), "zookeeper")


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    yield from serve(lambda: EtcdServer(tmp_path_factory.mktemp("etcd")), "etcd")


@dataclass
class Store:
    """Where a backend's store is, and how to restart it (durability scenarios)."""

    url: str
    restart: Callable[[], None]

    def spec(self, target: str, ttl_ms: int = TTL_MS) -> TargetSpec:
        """A spec for ``target`` on this store, its schema set up."""
        spec = TargetSpec(target, TargetConfig(url=self.url, ttl_ms=ttl_ms, timeout_s=5.0))
        t = spec.make()
        try:
            t.setup()
        finally:
            t.close()
        return spec


@pytest.fixture
def store_for(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Store]:
    """``store_for(target)``: a Store of the kind the target needs (servers started on demand)."""

    def get(target: str) -> Store:
        kind = load(target).store
        if kind == "sqlite":
            return Store(str(tmp_path / "lease.sqlite3"), lambda: None)
        if kind == "files":  # a folder of lock and record files
            (tmp_path / "files").mkdir(exist_ok=True)
            return Store(str(tmp_path / "files"), lambda: None)
        server: LocalServer = request.getfixturevalue(f"{kind}_server")
        return Store(server.url, server.restart)

    return get


def new_node(target: Target) -> str:
    """A node no other test touches, READY."""
    node = f"run-{uuid.uuid4().hex[:8]}/deploy"
    target.add_node(node)
    return node


def claim(target: Target, node: str, owner: str) -> Lease:
    """``owner``'s claim of ``node``, which must be granted."""
    lease = target.try_claim(node, owner)
    assert isinstance(lease, Lease), lease
    return lease


def takeover(target: Target, node: str, owner: str) -> Lease:
    """Claim as soon as the current lease expires; until then the claim must be refused as held."""

    def attempt() -> Lease | None:
        outcome = target.try_claim(node, owner)
        if isinstance(outcome, Lease):
            return outcome
        assert outcome == Refused("held")
        return None

    return wait_for(attempt, timeout=3.0, what=f"{owner}'s takeover of {node}")


def wait_expired(target: RedisScripts, node: str) -> None:
    """Wait until the Redis server's clock passed the node's lease expiry (asking the server, changing nothing)."""
    raw = target.client.hget(target.keys(node)[0], "expires_ms")
    assert isinstance(raw, (bytes, str)), raw
    expires_ms = int(raw)

    def passed() -> bool | None:
        seconds, micros = target.client.time()
        return True if seconds * 1000 + micros // 1000 >= expires_ms else None

    wait_for(passed, timeout=3.0, what="the server's clock past the lease's expiry")
