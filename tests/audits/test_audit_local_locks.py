"""The local lock libraries' audits (filelock, sqlalchemy-dlock) and the records they write.

Each published fault of each plan is run once with the plan's first seed and
must reach the published verdict (``tests/support/audits.py``). Below them: the
records' writes (plain for both; fenced, the advice, for the Postgres tables:
refused below the stored fence, applied at or above it), and the library
behaviours the audits' findings rest on: a dead holder's lock is free at once
(flock, a PID-stamped soft lock, a Postgres session), a live holder's never.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import records_contract
from audits import assert_published, published_cases

from leasecheck.servers.base import LocalServer
from leasecheck.targets.base import Lease, Refused, TargetConfig
from leasecheck.targets.locks.files import FileLockLease, FileRecords, SoftFileLockLease, file_name
from leasecheck.targets.locks.lockbase import Record
from leasecheck.targets.locks.pg_advisory import Connections, SqlalchemyDlock, SqlRecords
from leasecheck.waiting import wait_for

AUDITED = ("filelock", "filelock-soft", "sqlalchemy-dlock")


@pytest.mark.parametrize(("target", "nemesis"), published_cases(*AUDITED))
def test_audit_is_as_published(target: str, nemesis: str, tmp_path: Path) -> None:
    assert_published(target, nemesis, tmp_path)


# --- files ----------------------------------------------------------------------------------


def test_node_names_become_one_reversible_file_name() -> None:
    assert file_name("run-1/node-3") == "run-1%2Fnode-3"
    assert "/" not in file_name("a/../b")


def test_file_records_are_plain_writes_and_refuse_a_fence(tmp_path: Path) -> None:
    records = FileRecords(tmp_path)
    records.setup()
    records.add_nodes(["run-1/n"])
    assert records.get("run-1/n") == Record("READY")
    assert records.get("run-1/other") is None
    assert records.put("run-1/n", {"status": "RUNNING", "owner": "w1", "token": "a"})
    records.add_nodes(["run-1/n"])  # an existing record is never overwritten
    assert records.put("run-1/n", {"status": "SUCCEEDED", "result": "r"})
    assert records.get("run-1/n") == Record("SUCCEEDED", "w1", "a", "r")
    assert records.append_effect("run-1/n", "a", "one") and records.append_effect("run-1/n", "old", "zombie")
    assert [e["payload"] for e in records.effects("run-1/n")] == ["one", "zombie"]
    with pytest.raises(ValueError):
        records.put("run-1/n", {"status": "READY"}, fence=3)
    with pytest.raises(ValueError):
        records.append_effect("run-1/n", "a", "x", fence=3)
    assert not [p for p in records.folder.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind


@pytest.mark.parametrize("adapter", [FileLockLease, SoftFileLockLease])
def test_a_file_lock_excludes_a_second_claim_until_released(adapter: type[FileLockLease], tmp_path: Path) -> None:
    config = TargetConfig(url=str(tmp_path))
    a, b = adapter(config), adapter(config)
    a.setup()
    a.add_nodes(["run-1/n"])
    lease = a.try_claim("run-1/n", "wa")
    assert isinstance(lease, Lease) and lease.epoch is None and lease.token
    assert b.try_claim("run-1/n", "wb") == Refused("held")
    assert a.renew(lease) is None
    assert a.release(lease) is None
    again = b.try_claim("run-1/n", "wb")
    assert isinstance(again, Lease)
    assert b.commit(again, "r") is None
    assert a.try_claim("run-1/n", "wa") == Refused("terminal")
    a.close()
    b.close()


def _hold_and_wait(adapter: type[FileLockLease], folder: str, ready: Any) -> None:
    """A holder in another process: claims, says so, and waits to be killed."""
    holder = adapter(TargetConfig(url=folder))
    assert isinstance(holder.try_claim("run-1/n", "dead"), Lease)
    ready.set()
    signal.pause()


@pytest.mark.parametrize("adapter", [FileLockLease, SoftFileLockLease])
def test_a_killed_holders_lock_is_free_at_once_a_stopped_ones_never(adapter: type[FileLockLease], tmp_path: Path) -> None:
    """What the kill and pause audits rest on: flock and the PID-stamped marker outlive a stop, not a death."""
    config = TargetConfig(url=str(tmp_path))
    other = adapter(config)
    other.setup()
    other.add_nodes(["run-1/n"])
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_and_wait, args=(adapter, str(tmp_path), ready))
    holder.start()
    try:
        assert ready.wait(30)
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGSTOP)
        assert other.try_claim("run-1/n", "w") == Refused("held")
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)  # reaped: a zombie process still "runs" for a PID check
        assert isinstance(other.try_claim("run-1/n", "w"), Lease)
    finally:
        if holder.is_alive():
            holder.kill()
        holder.join()
        other.close()


# --- Postgres ------------------------------------------------------------------------------


@pytest.fixture
def records(postgres_server: LocalServer, request: pytest.FixtureRequest) -> Iterator[tuple[SqlRecords, str]]:
    """The tables on the session's server, and a node of this test's own (fresh on every run)."""
    made = SqlRecords(Connections(TargetConfig(url=postgres_server.url)))
    made.setup()
    node = f"test/{request.node.name}/{uuid.uuid4().hex}"
    made.add_nodes([node])
    yield made, node
    made.close()
    made.db.watchdog.close()


def test_a_fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records: tuple[SqlRecords, str]) -> None:
    records, n = records
    records_contract.fenced_put_is_refused_below_the_stored_fence_and_applied_at_or_above(records, n)


def test_a_fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records: tuple[SqlRecords, str]) -> None:
    records, n = records
    records_contract.fenced_effect_is_guarded_by_the_record_fence_that_a_claim_lifts(records, n)


def test_unfenced_sql_writes_are_plain_and_trust_the_lock(records: tuple[SqlRecords, str]) -> None:
    records, n = records
    records_contract.unfenced_writes_are_plain_and_trust_the_lock(records, n)
    with pytest.raises(ValueError):
        records.put(n, {"fence": 1})


def _granted(outcome: Lease | Refused) -> Lease | None:
    return outcome if isinstance(outcome, Lease) else None


def test_an_advisory_lock_lives_exactly_as_long_as_its_connection(postgres_server: LocalServer) -> None:
    config = TargetConfig(url=postgres_server.url, timeout_s=2.0)
    node = f"dlock/{uuid.uuid4().hex}"
    a, b = SqlalchemyDlock(config), SqlalchemyDlock(config)
    try:
        a.setup()
        a.add_nodes([node])
        lease = a.try_claim(node, "wa")
        assert isinstance(lease, Lease)
        assert b.try_claim(node, "wb") == Refused("held")
        assert a.renew(lease) is None
        # the holder's session ends (a crash, a restart, a proxy that closed it): the lock is free at once
        a._held[lease.token or ""].lock.conn.close()
        assert a.renew(lease) == Refused("expired", "the library says the lock is no longer held")
        # Postgres frees it when the backend exits, a moment after the client hung up
        assert isinstance(wait_for(lambda: _granted(b.try_claim(node, "wb")), 5.0, what="the lock freed"), Lease)
    finally:
        a.close()
        b.close()
