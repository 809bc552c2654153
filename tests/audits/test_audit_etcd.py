"""python-etcd3's Lock audits (documented and fenced by the lock key's revision), the etcd records, the server.

Each published fault of each plan is run once with the plan's first seed and
must reach the published verdict (``tests/support/audits.py``). Below them, what the
audits rely on: the private etcd starts, keeps acknowledged writes across a
crash, and stops; a fenced record write is refused below the stored fence and
applied at or above it; the lock grants one holder at a time, its lease runs
out on the server, and the revision fence grows with every grant.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import records_contract
from audits import assert_published, published_cases
from stores import serve

from leasecheck.servers.base import free_port
from leasecheck.servers.etcd import EtcdServer, etcd_healthy
from leasecheck.targets.base import Indeterminate, Lease, Refused, TargetConfig, Unavailable
from leasecheck.targets.locks.etcd3_lock import Etcd3Lock, RevisionEtcd3Lock
from leasecheck.targets.locks.etcd_records import Connection, EtcdRecords
from leasecheck.targets.locks.lockbase import Record
from leasecheck.waiting import poll, wait_for

AUDITED = ("etcd3-lock", "etcd3-lock-revision")


@pytest.mark.parametrize(("target", "nemesis"), published_cases(*AUDITED))
def test_audit_is_as_published(target: str, nemesis: str, tmp_path: Path) -> None:
    assert_published(target, nemesis, tmp_path)


def test_under_kill_every_stale_write_is_the_workloads_own_never_a_kill_victims(tmp_path: Path) -> None:
    """Issue 20: the documented lock was published "invalid under kill" for stale writes by workers nobody
    killed. Per fault, an audit publishes what that fault's victims did; the rest is reported apart."""
    result = assert_published("etcd3-lock", "kill", tmp_path)
    assert result.verdict == "valid" and result.kinds == ()
    assert result.without_fault and result.without_fault_count > 0 and result.without_fault_proof is not None
    saved = json.loads((result.run_dir / "results.json").read_text())
    assert saved["anomalies"] and all(a["faults"] == [] and a["stalled_on_its_own"] for a in saved["anomalies"])
    assert result.to_json()["without_fault"]["anomalies"] == len(saved["anomalies"])


# --- the server -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    yield from serve(lambda: EtcdServer(tmp_path_factory.mktemp("etcd")), "etcd")


def config(server: EtcdServer, ttl_ms: int = 1000) -> TargetConfig:
    return TargetConfig(url=server.url, ttl_ms=ttl_ms, timeout_s=3.0)


def test_the_server_keeps_acknowledged_writes_across_a_crash_and_stops(tmp_path: Path) -> None:
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    try:
        assert server.url == f"etcd://127.0.0.1:{server.port}" and server.peer_port != server.port
        records = EtcdRecords(Connection(server.url, 3.0))
        records.setup()
        records.add_nodes(["n"])
        assert records.put("n", {"status": "SUCCEEDED", "result": "r"}, fence=3)
        server.kill()
        assert server.pid is None
        # a call already on the dead connection is Indeterminate (it may have been sent); once gRPC
        # knows the connection is gone, nothing is sent and the call is Unavailable
        wait_for(lambda: outcome(lambda: records.get("n")) == "Unavailable", 5.0, what="Unavailable")
        # the same directory and ports: etcd fsynced the write before acknowledging it. Forked while this
        # process holds a live gRPC channel, as kill-store's heal does (gRPC's fork support would abort it)
        server.start()
        def read_back() -> object:
            got = outcome(lambda: records.get("n"))
            return got if isinstance(got, Record) else None

        assert wait_for(read_back, 5.0) == Record("SUCCEEDED", result="r", fence=3)
        records.close()
    finally:
        server.stop()
    assert server.pid is None
    assert not etcd_healthy(server.client_url, timeout_s=0.2)
    assert "etcd.log" in {p.name for p in (tmp_path / "etcd").iterdir()}


def outcome(call: Callable[[], object]) -> object:
    """What ``call`` returned, or the name of the protocol exception it raised."""
    try:
        return call()
    except (Unavailable, Indeterminate) as e:
        return type(e).__name__


def test_a_client_that_reaches_no_server_is_unavailable() -> None:
    records = EtcdRecords(Connection(f"etcd://127.0.0.1:{free_port()}", 1.0))
    with pytest.raises(Unavailable):
        records.get("n")
    records.close()


def test_the_ttl_must_be_whole_seconds(server: EtcdServer) -> None:
    with pytest.raises(ValueError, match="whole seconds"):
        Etcd3Lock(config(server, ttl_ms=1500))


# --- the records' conditional writes --------------------------------------------------------


@pytest.fixture
def records(server: EtcdServer) -> Iterator[EtcdRecords]:
    made = EtcdRecords(Connection(server.url, 3.0))
    made.setup()
    yield made
    made.close()


@pytest.fixture
def node(records: EtcdRecords) -> str:
    name = f"run-{uuid.uuid4().hex[:8]}/node-1"
    records.add_nodes([name])
    return name


def test_a_fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records: EtcdRecords, node: str) -> None:
    records_contract.fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records, node)


def test_a_fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records: EtcdRecords, node: str) -> None:
    records_contract.fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records, node)


def test_unfenced_writes_are_plain_and_trust_the_lock(records: EtcdRecords, node: str) -> None:
    records_contract.unfenced_writes_are_plain_and_trust_the_lock(records, node)


def test_add_nodes_leaves_existing_records_alone(records: EtcdRecords, node: str) -> None:
    assert records.put(node, {"status": "SUCCEEDED", "result": "r"})
    records.add_nodes([node])
    assert records.get(node) == Record("SUCCEEDED", result="r")


# --- the lock ---------------------------------------------------------------------------------


def test_one_holder_at_a_time_and_the_lock_is_free_once_committed(server: EtcdServer, node: str) -> None:
    a, b = Etcd3Lock(config(server)), Etcd3Lock(config(server))
    try:
        lease = a.try_claim(node, "w1")
        assert isinstance(lease, Lease) and lease.epoch is None and lease.token
        assert uuid.UUID(lease.token)  # the lock's own uuid names the lease
        assert b.try_claim(node, "w2") == Refused("held")  # a taken lock: acquire(timeout=0) does not wait
        assert a.renew(lease) is None
        assert a.effect(lease, "p") is None
        assert a.commit(lease, "r") is None
        assert b.try_claim(node, "w2") == Refused("terminal")
        assert a.read(node).status == "SUCCEEDED"
    finally:
        a.close()
        b.close()


def test_the_lease_runs_out_on_the_server_and_refreshes_to_nothing(server: EtcdServer, node: str) -> None:
    a, b = Etcd3Lock(config(server)), Etcd3Lock(config(server))
    try:
        lease = a.try_claim(node, "w1")
        assert isinstance(lease, Lease)
        # wait on the evidence, not the clock: b is granted the lock once etcd has revoked a's lease
        # (the 1 s ttl, plus etcd's 500 ms check for expired leases)
        granted: list[Lease] = []

        def taken_over() -> bool:
            got = b.try_claim(node, "w2")
            if isinstance(got, Lease):
                granted.append(got)
            return bool(granted)

        assert poll(taken_over, 10.0, every=0.1), "b was never granted the lock after a's lease ran out"
        assert granted[0].token != lease.token
        assert a.renew(lease) == Refused("expired", "the library says the lock is no longer held")
        assert a.commit(lease, "zombie") is None  # unfenced: the old holder's write is not stopped
    finally:
        a.close()
        b.close()


def test_the_fence_is_the_lock_keys_revision_and_grows_with_every_grant(server: EtcdServer, node: str) -> None:
    a, b = RevisionEtcd3Lock(config(server)), RevisionEtcd3Lock(config(server))
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
