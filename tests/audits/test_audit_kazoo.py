"""kazoo's Lock audits (documented and fenced by the lock znode's czxid), the ZooKeeper records, the server.

Each published fault of each plan is run once with the plan's first seed and
must reach the published verdict (``tests/support/audits.py``). Below them, what the
audits rely on: the private ZooKeeper starts, survives a crash with its data,
and stops; a fenced record write is refused below the stored fence and applied
at or above it; the lock grants one holder at a time, with a fence that grows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import records_contract
from audits import assert_published, published_cases
from kazoo.client import KazooClient
from stores import serve

from leasecheck.servers.zookeeper import ZooKeeperServer, four_letter_word
from leasecheck.targets.base import Lease, Refused, Target, TargetConfig, Unavailable
from leasecheck.targets.locks.kazoo_lock import KazooLock, ZxidKazooLock
from leasecheck.targets.locks.lockbase import Record
from leasecheck.targets.locks.zk_records import ZkConnection, ZkRecords, znode_name
from leasecheck.targets.urls import store_endpoint
from leasecheck.waiting import wait_for

AUDITED = ("kazoo-lock", "kazoo-lock-zxid")


@pytest.mark.parametrize(("target", "nemesis"), published_cases(*AUDITED))
def test_audit_is_as_published(target: str, nemesis: str, tmp_path: Path) -> None:
    assert_published(target, nemesis, tmp_path)


# --- the server -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    yield from serve(lambda: ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")), "zookeeper")


def config(server: ZooKeeperServer, ttl_ms: int = 1000) -> TargetConfig:
    return TargetConfig(url=server.url, ttl_ms=ttl_ms, timeout_s=3.0)


def test_the_server_keeps_acknowledged_writes_across_a_crash_and_stops(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    try:
        assert server.url == f"zookeeper://127.0.0.1:{server.port}"
        assert "Mode: standalone" in four_letter_word(server.port, "srvr")
        records = ZkRecords(ZkConnection.of(config(server)))
        records.setup()
        records.add_nodes(["n"])
        assert records.put("n", {"status": "SUCCEEDED", "result": "r"}, fence=3)
        records.close()
        server.kill()
        assert server.pid is None
        server.start()  # the same directory and port: forceSync made the write durable
        records = ZkRecords(ZkConnection.of(config(server)))
        assert records.get("n") == Record("SUCCEEDED", result="r", fence=3)
        records.close()
    finally:
        server.stop()
    assert server.pid is None
    assert four_letter_word(server.port, "srvr", timeout_s=0.2) == ""


def test_a_client_that_reaches_no_server_is_unavailable() -> None:
    from leasecheck.servers.base import free_port

    records = ZkRecords(ZkConnection(f"zookeeper://127.0.0.1:{free_port()}", 1.0, 0.5))
    with pytest.raises(Unavailable):
        records.get("n")
    records.close()


# --- the records' conditional writes --------------------------------------------------------


@pytest.fixture
def records(server: ZooKeeperServer) -> Iterator[ZkRecords]:
    made = ZkRecords(ZkConnection.of(config(server)))
    made.setup()
    yield made
    made.close()


@pytest.fixture
def node(records: ZkRecords) -> str:
    name = f"run-{uuid.uuid4().hex[:8]}/node-1"
    records.add_nodes([name])
    return name


def test_node_names_are_one_znode_each() -> None:
    assert znode_name("run-1/node-3") == "run-1%2Fnode-3"
    assert "/" not in znode_name("a/b/c") and znode_name("..") == "%2E%2E"


def test_a_fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records: ZkRecords, node: str) -> None:
    records_contract.fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records, node)


def test_a_fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records: ZkRecords, node: str) -> None:
    records_contract.fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records, node)


def test_unfenced_writes_are_plain_and_trust_the_lock(records: ZkRecords, node: str) -> None:
    records_contract.unfenced_writes_are_plain_and_trust_the_lock(records, node)


# --- the lock ---------------------------------------------------------------------------------


def test_one_holder_at_a_time_and_the_lock_is_free_once_committed(server: ZooKeeperServer, records: ZkRecords, node: str) -> None:
    # a session of 10 s, not the ttl's 1 s: a loaded machine (ci: five test processes beside two CPU-bound jobs) let a's
    # 1 s session expire between the two claims, and ZooKeeper rightly gave the lock to b; this test is not about expiry
    a, b = KazooLock(config(server, ttl_ms=10_000)), KazooLock(config(server, ttl_ms=10_000))
    try:
        lease = a.try_claim(node, "w1")
        assert isinstance(lease, Lease) and lease.epoch is None and lease.token and "__lock__" in lease.token
        assert b.try_claim(node, "w2") == Refused("held")
        assert a.renew(lease) is None
        assert a.effect(lease, "p") is None
        assert a.commit(lease, "r") is None
        assert b.try_claim(node, "w2") == Refused("terminal")
        assert a.read(node).status == "SUCCEEDED"
    finally:
        a.close()
        b.close()


def test_the_fence_is_the_lock_znodes_czxid_and_grows_with_every_grant(server: ZooKeeperServer, node: str) -> None:
    a, b = ZxidKazooLock(config(server)), ZxidKazooLock(config(server))
    try:
        first = a.try_claim(node, "w1")
        assert isinstance(first, Lease) and first.epoch is not None
        assert a.release(first) is None
        second = b.try_claim(node, "w2")
        assert isinstance(second, Lease) and second.epoch is not None and second.epoch > first.epoch
        assert a.effect(first, "zombie") == Refused("stale", f"the resource has seen a fence above {first.epoch}")
        assert a.commit(first, "late") == Refused("stale", f"the record has seen a fence above {first.epoch}")
        assert b.commit(second, "r") is None
        assert b.read(node).epoch == second.epoch
    finally:
        a.close()
        b.close()


def test_the_lock_goes_with_the_session(server: ZooKeeperServer, node: str) -> None:
    """A client that stops (its session ends) frees the lock at once: ZooKeeper deletes its ephemeral znode."""
    a, b = KazooLock(config(server)), KazooLock(config(server))
    try:
        lease = a.try_claim(node, "w1")
        assert isinstance(lease, Lease)
        a.records.close()
        assert isinstance(b.try_claim(node, "w2"), Lease)
    finally:
        a.close()
        b.close()


def end_session(server: ZooKeeperServer, target: KazooLock) -> None:
    """End ``target``'s ZooKeeper session behind its back, as the server does when the session times out.

    Another client that opens the same session (its id and password) and closes it ends it for good.
    """
    session = target.records.conn.client.client_id
    host, port = store_endpoint(server.url)
    other = KazooClient(hosts=f"{host}:{port}", client_id=session, timeout=1.0)
    other.start(timeout=3)
    other.stop()
    other.close()


def granted(outcome: Lease | Refused) -> Lease | None:
    return outcome if isinstance(outcome, Lease) else None


def eventually_ok(target: Target, lease: Lease, payload: str) -> object:
    """The effect's outcome once kazoo stops refusing it unsent (it opens a new session by itself)."""

    def attempt() -> object:
        try:
            return target.effect(lease, payload) or "ok"
        except Unavailable:
            return None

    return wait_for(attempt, timeout=5.0, what="kazoo's new session")


def test_a_holder_whose_session_ended_still_writes_unfenced(server: ZooKeeperServer, node: str) -> None:
    """The audit's finding in miniature: the lock is gone, kazoo reconnects on a new session, the plain write goes through."""
    a, b = KazooLock(config(server)), KazooLock(config(server))
    try:
        old = a.try_claim(node, "w1")
        assert isinstance(old, Lease)
        end_session(server, a)
        new = wait_for(lambda: granted(b.try_claim(node, "w2")), timeout=5.0, what="the takeover")
        assert isinstance(new, Lease)
        assert a.renew(old) == Refused("expired", "the library says the lock is no longer held")
        assert eventually_ok(a, old, "zombie") == "ok"
        assert [e["payload"] for e in b.records.effects(node)] == ["zombie"]
    finally:
        a.close()
        b.close()


def test_a_holder_whose_session_ended_is_fenced_off_by_the_czxid(server: ZooKeeperServer, node: str) -> None:
    a, b = ZxidKazooLock(config(server)), ZxidKazooLock(config(server))
    try:
        old = a.try_claim(node, "w1")
        assert isinstance(old, Lease)
        end_session(server, a)
        new = wait_for(lambda: granted(b.try_claim(node, "w2")), timeout=5.0, what="the takeover")
        assert isinstance(new, Lease) and new.epoch is not None and old.epoch is not None and new.epoch > old.epoch
        assert eventually_ok(a, old, "zombie") == Refused("stale", f"the resource has seen a fence above {old.epoch}")
        assert b.records.effects(node) == []
    finally:
        a.close()
        b.close()
