"""The Redis lock libraries' audits (redis-py, python-redis-lock, portalocker) and the records they write.

Each published fault of each plan is run once with the plan's first seed and
must reach the published verdict (``tests/support/audits.py``). Below them, the
store's side of fencing, which the fenced audit relies on: a fenced write is
refused below the stored fence and applied at or above it, raising it; and
transport failures map to ``Unavailable`` only when nothing was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import records_contract
from audits import assert_published, published_cases
from stores import serve

from leasecheck.servers.base import free_port
from leasecheck.servers.redis import RedisServer
from leasecheck.targets.base import Indeterminate, Lease, Refused, TargetConfig, Unavailable
from leasecheck.targets.locks.portalocker_redis import FencedPortalockerRedisLock, PortalockerRedisLock
from leasecheck.targets.locks.python_redis_lock import PythonRedisLock
from leasecheck.targets.locks.redis_py import RedisPyLock
from leasecheck.targets.locks.redis_records import RedisRecords, redis_client

AUDITED = ("redis-py-lock", "python-redis-lock", "portalocker-redis", "portalocker-redis-fenced")


@pytest.mark.parametrize(("target", "nemesis"), published_cases(*AUDITED))
def test_audit_is_as_published(target: str, nemesis: str, tmp_path: Path) -> None:
    assert_published(target, nemesis, tmp_path)


# --- the records' conditional writes --------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of this module's own: one test pauses it."""
    yield from serve(lambda: RedisServer(tmp_path_factory.mktemp("redis-libs")), "redis-server")


@pytest.fixture
def records(server: RedisServer, request: pytest.FixtureRequest) -> Iterator[RedisRecords]:
    made = RedisRecords(redis_client(server.url, 2.0), f"test-{request.node.name}")
    made.setup()
    made.add_nodes(["n"])
    yield made
    made.close()


def test_a_fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records: RedisRecords) -> None:
    records_contract.fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records, "n")


def test_a_fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records: RedisRecords) -> None:
    records_contract.fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records, "n")


def test_unfenced_writes_are_plain_and_trust_the_lock(records: RedisRecords) -> None:
    records_contract.unfenced_writes_are_plain_and_trust_the_lock(records, "n")


def test_no_server_is_unavailable_and_a_silent_one_indeterminate(server: RedisServer) -> None:
    nobody = RedisRecords(redis_client(f"redis://127.0.0.1:{free_port()}/0", 0.5), "test-down")
    with pytest.raises(Unavailable):
        nobody.put("n", {"status": "RUNNING"}, fence=1)
    silent = RedisRecords(redis_client(server.url, 0.5), "test-paused")
    silent.add_nodes(["n"])  # a live pooled connection: the next command is sent
    server.pause()
    try:
        with pytest.raises(Indeterminate):
            silent.put("n", {"status": "RUNNING"}, fence=1)
    finally:
        server.resume()
        silent.close()


# --- the adapters, one lease each --------------------------------------------------------------


@pytest.mark.parametrize("cls", [RedisPyLock, PythonRedisLock, PortalockerRedisLock, FencedPortalockerRedisLock])
def test_each_adapter_grants_one_holder_and_frees_the_lock_on_commit(cls: type, server: RedisServer) -> None:
    config = TargetConfig(server.url, ttl_ms=1000, timeout_s=2.0)
    first, second = cls(config), cls(config)
    try:
        first.setup()
        node = f"{cls.name}/node"
        first.add_node(node)
        lease = first.try_claim(node, "w1")
        assert isinstance(lease, Lease) and lease.token
        assert (lease.epoch is not None) == cls.fenced
        assert second.try_claim(node, "w2") == Refused("held")
        assert first.renew(lease) is None
        assert first.effect(lease, "wrote") is None
        assert first.commit(lease, "done") is None
        assert second.try_claim(node, "w2") == Refused("terminal")
        assert first.read(node).status == "SUCCEEDED"
    finally:
        first.close()
        second.close()
