"""The Postgres lease backends against a real PostgreSQL server started for this module.

Nothing is skipped: if the server cannot start, every test errors with the
EnvironmentFailure message, because a machine without Postgres cannot vouch
for the Postgres backend. Lease durations are short (300 ms) and waits poll a
condition with a deadline, so the module runs in seconds.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from stores import new_node

from leasecheck.machine.processes import working_in
from leasecheck.servers.base import EnvironmentFailure
from leasecheck.servers.postgres import PostgresServer
from leasecheck.targets import registry
from leasecheck.targets.base import Indeterminate, Lease, NodeState, Refused, Target, TargetConfig, Unavailable, system_clock_ms
from leasecheck.targets.broken_postgres import ClientClockPostgres, FenceInMemoryPostgres, GraceAfterFailoverPostgres
from leasecheck.targets.postgres_lease import PostgresLease
from leasecheck.waiting import wait_for

TTL_MS = 300


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    pg = PostgresServer()  # EnvironmentFailure here (no binaries) is the test's error message
    try:
        pg.start()
        schema = PostgresLease(TargetConfig(url=pg.url))
        schema.setup()
        schema.close()
        yield pg
    finally:
        pg.kill()  # the data is thrown away: no need for a clean shutdown's checkpoint
        shutil.rmtree(pg.directory, ignore_errors=True)


@pytest.fixture
def make(server: PostgresServer) -> Iterator[Callable[..., Any]]:
    """A factory of backend instances (one per simulated worker), all closed after the test.

    If a test crashed the server and did not bring it back, it is started again for the next test.
    """
    made: list[Target] = []

    def factory(cls: type[Target] = PostgresLease, clock: Callable[[], float] = system_clock_ms, timeout_s: float = 2.0) -> Any:
        target = cls(TargetConfig(url=server.url, ttl_ms=TTL_MS, clock=clock, timeout_s=timeout_s))
        made.append(target)
        return target

    yield factory
    for target in made:
        target.close()
    if server.pid is None:
        server.start()


@pytest.fixture
def node(make: Callable[..., PostgresLease]) -> str:
    """A fresh node, READY; every test has its own so they share one database safely."""
    return new_node(make())


def claimed(target: Target, node: str, owner: str) -> Callable[[], Lease | None]:
    """A condition: ``owner`` manages to claim ``node``."""
    def attempt() -> Lease | None:
        outcome = target.try_claim(node, owner)
        return outcome if isinstance(outcome, Lease) else None
    return attempt


def wait_expired(granted_by: float) -> None:
    """Sleep until a lease granted by monotonic time ``granted_by`` (taken once its claim returned) has surely run out.

    Never a time taken before the claim: on a loaded machine the claim's transaction began well after it, its lease
    ran from then, and a renew 50 ms past the first time was still granted (ci, beside two CPU-bound jobs)."""
    time.sleep(max(0.0, granted_by + TTL_MS / 1000 + 0.05 - time.monotonic()))


# -- the reference backend's semantics ---------------------------------------------------------


def test_claim_is_exclusive_until_expiry_then_taken_over_with_a_larger_epoch(make: Callable[..., Any], node: str) -> None:
    a, b = make(), make()
    invoked = time.monotonic()
    lease_a = a.try_claim(node, "a")
    assert lease_a == Lease(node, "a", 1)
    assert b.try_claim(node, "b") == Refused("held")
    assert b.read(node) == NodeState("RUNNING", 1, "a")
    lease_b = wait_for(claimed(b, node, "b"), timeout=5.0, what="b's takeover")
    assert time.monotonic() - invoked >= TTL_MS / 1000 - 0.01, "a live lease was taken over"
    assert lease_b.epoch == 2
    # the claim itself lifted the fence: the zombie's write is refused before the new holder wrote anything
    for stale in (a.renew(lease_a), a.commit(lease_a, "old"), a.effect(lease_a, "old"), a.release(lease_a)):
        assert isinstance(stale, Refused) and stale.reason == "stale"
    assert b.effect(lease_b, "new") is None
    assert a.read(node) == NodeState("RUNNING", 2, "b")


def test_an_expired_lease_cannot_renew_or_commit_but_its_owner_may_claim_again(make: Callable[..., Any], node: str) -> None:
    a = make()
    lease = a.try_claim(node, "a")
    wait_expired(time.monotonic())
    assert a.renew(lease) == Refused("expired")
    assert a.commit(lease, "late") == Refused("expired")
    assert a.try_claim(node, "a") == Lease(node, "a", 2)


def test_renewals_keep_the_lease_and_only_commit_succeeds_for_good(make: Callable[..., Any], node: str) -> None:
    a, b = make(), make()
    lease = a.try_claim(node, "a")
    until = time.monotonic() + 2 * TTL_MS / 1000
    while time.monotonic() < until:
        assert a.renew(lease) is None
        assert b.try_claim(node, "b") == Refused("held")
        time.sleep(TTL_MS / 3000)
    assert a.read(node).status == "RUNNING", "a heartbeat must never complete the node"
    assert a.commit(lease, "done") is None
    assert a.read(node) == NodeState("SUCCEEDED", 1, "a", "done")
    wait_expired(time.monotonic())
    assert b.try_claim(node, "b") == Refused("terminal")
    for late in (a.renew(lease), a.commit(lease, "again"), a.release(lease)):
        assert late == Refused("terminal")


def test_release_makes_the_node_ready_for_an_immediate_claim(make: Callable[..., Any], node: str) -> None:
    a, b = make(), make()
    lease_a = a.try_claim(node, "a")
    assert a.release(lease_a) is None
    assert a.read(node) == NodeState("READY", 1)
    assert a.renew(lease_a) == Refused("not-owner", "the lease was released")
    assert b.try_claim(node, "b") == Lease(node, "b", 2)
    assert a.release(lease_a).reason == "stale"


def test_the_fence_accepts_equal_or_larger_epochs_only(make: Callable[..., Any], node: str, server: PostgresServer) -> None:
    a = make()
    assert a.effect(Lease(node, "x", 2), "e2") is None
    assert a.effect(Lease(node, "x", 1), "e1").reason == "stale"
    assert a.effect(Lease(node, "x", 2), "e2-again") is None
    assert a.effect(Lease(node, "x", 3), "e3") is None
    with psycopg.connect(server.url) as conn:
        rows = conn.execute("SELECT epoch, payload FROM lease_effects WHERE node = %s ORDER BY id", (node,)).fetchall()
    assert rows == [(2, "e2"), (2, "e2-again"), (3, "e3")]


def test_unknown_node_is_an_error_and_reads_as_initial(make: Callable[..., Any]) -> None:
    a = make()
    assert a.try_claim("never-added", "a") == Refused("error", "no such node 'never-added'")
    assert a.read("never-added") == NodeState("READY", 0)


def test_racing_claims_grant_exactly_one_lease(make: Callable[..., Any], node: str) -> None:
    workers = [make() for _ in range(8)]
    for w in workers:
        w.read(node)  # connect first, so the race is between statements
    barrier = threading.Barrier(len(workers))
    outcomes: list[Lease | Refused] = []

    def run(i: int) -> None:
        barrier.wait()
        outcomes.append(workers[i].try_claim(node, f"w{i}"))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o.epoch for o in outcomes if isinstance(o, Lease)] == [1]
    assert sorted(o.reason for o in outcomes if isinstance(o, Refused)) == ["held"] * 7


def test_a_worker_clock_running_ahead_cannot_steal_from_the_reference(make: Callable[..., Any], node: str) -> None:
    make().try_claim(node, "a")
    ahead = make(clock=lambda: system_clock_ms() + 10_000)
    assert ahead.try_claim(node, "b") == Refused("held")


def test_concurrent_setup_creates_the_tables_once(server: PostgresServer) -> None:
    database = f"setup_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = server.url.rsplit("/", 1)[0] + "/" + database
    targets = [PostgresLease(TargetConfig(url=url)) for _ in range(6)]
    barrier, errors = threading.Barrier(len(targets)), []

    def run(t: PostgresLease) -> None:
        barrier.wait()
        try:
            t.setup()
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    targets[0].add_node("n")
    assert errors == [] and targets[0].try_claim("n", "a") == Lease("n", "a", 1)
    for t in targets:
        t.close()


# -- crashes, restarts, timeouts ------------------------------------------------------------------


def read_once_reconnected(target: Target, node: str) -> NodeState:
    """A read on an instance whose connection a restart broke: the first try may be Indeterminate."""
    try:
        return target.read(node)
    except Indeterminate:
        return target.read(node)


def test_an_acknowledged_commit_survives_restart_and_crash(make: Callable[..., Any], node: str, server: PostgresServer) -> None:
    a = make()
    lease = a.try_claim(node, "a")
    assert a.effect(lease, "wrote") is None
    assert a.commit(lease, "done") is None
    server.restart()
    assert read_once_reconnected(a, node) == NodeState("SUCCEEDED", 1, "a", "done")
    server.kill()
    server.start()
    assert read_once_reconnected(a, node) == NodeState("SUCCEEDED", 1, "a", "done")
    assert a.effect(Lease(node, "x", 0), "older").reason == "stale", "the fence was lost"


def test_killing_the_server_mid_statement_is_indeterminate_then_unavailable(
    make: Callable[..., Any], node: str, server: PostgresServer
) -> None:
    a = make()
    lease = a.try_claim(node, "a")
    locker = psycopg.connect(server.url)
    locker.execute("SELECT 1 FROM lease_nodes WHERE node = %s FOR UPDATE", (node,))  # opens a transaction
    outcome: list[object] = []

    def renew() -> None:
        try:
            outcome.append(a.renew(lease))
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=renew)
    thread.start()

    def blocked() -> int:
        row = locker.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leasecheck' AND wait_event_type = 'Lock'"
        ).fetchone()
        return row[0] if row else 0

    wait_for(blocked, timeout=5.0, what="the renewal waiting on the lock")
    backends = server._children()
    server.kill()
    thread.join(5)
    locker.close()
    assert len(outcome) == 1 and isinstance(outcome[0], Indeterminate), outcome
    assert not any(pid for pid in backends if _alive(pid)), "a backend survived the crash"
    with pytest.raises((Unavailable, Indeterminate)):
        a.read(node)
    with pytest.raises(Unavailable):
        make().read(node)
    server.start()
    assert a.read(node) == NodeState("RUNNING", 1, "a")


def test_a_connection_the_server_closed_is_replaced_before_the_next_op_is_sent(
    make: Callable[..., Any], node: str, server: PostgresServer
) -> None:
    """After a restart the next op goes out on a fresh connection: a certain outcome, not an ``info``."""
    a = make()
    claimed = time.monotonic()
    lease = a.try_claim(node, "a")
    assert isinstance(lease, Lease)
    server.restart()
    renew_invoked = time.monotonic()
    outcome = a.renew(lease)  # an Unavailable / Indeterminate here: it died on the dead connection
    if renew_invoked - claimed < TTL_MS / 1000 - 0.05:  # the lease was surely live when the renew went out
        assert outcome is None, "the renew must reach the restarted server, not die on the dead connection"
    else:  # a restart slower than the ttl (a loaded machine): the server's answer is still a certain one
        assert outcome in (None, Refused("expired")), outcome


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_paused_server_times_out_as_indeterminate_then_unavailable(
    make: Callable[..., Any], node: str, server: PostgresServer
) -> None:
    a = make(timeout_s=0.5)
    a.read(node)
    server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(Indeterminate, match="did not answer"):
            a.renew(Lease(node, "a", 1))
        assert time.monotonic() - started < a.deadline_s + 1.0
        with pytest.raises(Unavailable):
            a.read(node)
    finally:
        server.resume()
    assert a.read(node) == NodeState("READY", 0)


# -- the deliberately broken variants -----------------------------------------------------------


def test_fence_in_memory_accepts_the_old_owners_writes_after_a_takeover(make: Callable[..., Any], node: str) -> None:
    a, b = make(FenceInMemoryPostgres), make(FenceInMemoryPostgres)
    lease_a = a.try_claim(node, "a")
    lease_b = wait_for(claimed(b, node, "b"), timeout=5.0, what="b's takeover")
    assert lease_b.epoch > lease_a.epoch
    assert b.effect(lease_b, "new") is None
    # the zombie wakes up: the reference refuses all three (see the takeover test above)
    assert a.renew(lease_a) is None
    assert a.effect(lease_a, "old") is None, "stale-effect"
    assert a.commit(lease_a, "old") is None, "stale-commit"
    assert a.read(node).result == "old"
    assert b.renew(lease_a) == Refused("stale", "epoch 1 is not the one this worker was granted")


def test_client_clock_lets_a_worker_ahead_steal_a_live_lease(make: Callable[..., Any], node: str) -> None:
    a = make(ClientClockPostgres)
    ahead = make(ClientClockPostgres, clock=lambda: system_clock_ms() + 10_000)
    invoked = time.monotonic()
    lease_a = a.try_claim(node, "a")
    stolen = ahead.try_claim(node, "b")
    assert time.monotonic() - invoked < TTL_MS / 1000, "too slow to prove the lease was still live"
    assert isinstance(stolen, Lease) and stolen.epoch == lease_a.epoch + 1, "overlapping-lease"


def test_missing_binaries_are_an_environment_failure() -> None:
    with pytest.raises(EnvironmentFailure, match="no initdb/postgres binaries in /nonexistent"):
        PostgresServer(bin_dir="/nonexistent")


def test_variants_declare_their_bug_and_are_registered() -> None:
    assert registry.load("postgres") is PostgresLease
    assert registry.load("postgres-fence-in-memory") is FenceInMemoryPostgres
    assert registry.load("postgres-client-clock") is ClientClockPostgres
    assert PostgresLease.bug == "" and PostgresLease.fenced and PostgresLease.store == "postgres"
    assert FenceInMemoryPostgres.expected == ("stale-commit", "stale-effect") and FenceInMemoryPostgres.exposed_by == ("pause",)
    assert ClientClockPostgres.expected == ("overlapping-lease", "stuck-lease", "premature-expiry") and ClientClockPostgres.exposed_by == ("clock-bump",)
    assert registry.load("postgres-grace-after-failover") is GraceAfterFailoverPostgres
    assert GraceAfterFailoverPostgres.expected == ("stuck-lease",) and GraceAfterFailoverPostgres.exposed_by == ("kill-store",)
    for cls in (FenceInMemoryPostgres, ClientClockPostgres, GraceAfterFailoverPostgres):
        assert cls.bug and cls.store == "postgres" and cls.fenced


def test_grace_after_failover_resurrects_a_lease_that_expired_while_the_store_was_down(
    make: Callable[..., Any], node: str, server: PostgresServer
) -> None:
    """The variant's bug, seen at the store: after a crash, a reconnecting client re-arms an expired lease."""
    graceful = make(GraceAfterFailoverPostgres)
    assert isinstance(graceful.read(node), NodeState)  # connected once: its next connection is a reconnect
    lease = make().try_claim(node, "stalled")
    assert isinstance(lease, Lease)
    server.kill()
    time.sleep(TTL_MS / 1000 * 1.5)  # the lease runs out while the store is down (its own duration, not a wait for an event)
    server.start()
    assert isinstance(graceful.read(node), NodeState)  # its connection died with the server: it reconnects, and "spares" every lease
    refused = make().try_claim(node, "next")
    assert isinstance(refused, Refused) and refused.reason == "held", refused
    assert isinstance(make().try_claim(node, "next"), Refused), "still held: the expired lease was given a fresh ttl"


def test_a_server_killed_while_clients_keep_connecting_starts_again_every_time(server: PostgresServer) -> None:
    """A backend forked in the instant the postmaster dies must not outlive the kill.

    Such an orphan keeps the old shared memory attached, and the next postmaster
    refuses to start ("pre-existing shared memory block is still in use"): the
    kill-store fault once failed a CI run that way.
    """
    stop = threading.Event()
    connects = [0]

    def hammer() -> None:
        while not stop.is_set():
            try:
                psycopg.connect(server.url, connect_timeout=1).close()
                connects[0] += 1
            except psycopg.Error:
                pass

    clients = [threading.Thread(target=hammer) for _ in range(8)]
    for client in clients:
        client.start()
    try:
        for _ in range(10):
            before = connects[0]
            wait_for(lambda: connects[0] > before, timeout=30.0, what="a client connecting to the running server")  # noqa: B023
            server.kill()
            assert not working_in(str(server.data_dir)), "a process of the killed server still runs in its data directory"
            server.start()  # EnvironmentFailure here is the finding
    finally:
        stop.set()
        for client in clients:
            client.join(10)
