"""The Redis lease backends against a real redis-server: semantics, durability, faults, known bugs.

A server that cannot start fails these tests with the reason (never a skip):
a CI run without redis-server must be red, not silently thinner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from stores import claim, new_node, serve, takeover, wait_expired

from leasecheck.servers.base import free_port
from leasecheck.servers.redis import RedisServer
from leasecheck.targets import registry
from leasecheck.targets.base import Indeterminate, Lease, NodeState, Refused, TargetConfig, Unavailable
from leasecheck.targets.broken_redis import NoIncrementRedis, QueueAsAuthorityRedis
from leasecheck.targets.redis_lease import RedisLease
from leasecheck.waiting import wait_for

TTL_MS = 300
Make = Callable[..., RedisLease]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the tests that leave it alone."""
    yield from serve(lambda: RedisServer(tmp_path_factory.mktemp("redis")), "redis-server")


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, for tests that kill, pause or restart it."""
    yield from serve(lambda: RedisServer(tmp_path / "redis"), "redis-server")


def _factory(url: Callable[[], str]) -> Iterator[Make]:
    made: list[RedisLease] = []

    def make(cls: type[RedisLease] = RedisLease, ttl_ms: int = TTL_MS, timeout_s: float = 2.0, **config: Any) -> RedisLease:
        target = cls(TargetConfig(url(), ttl_ms=ttl_ms, timeout_s=timeout_s, **config))
        made.append(target)
        return target

    yield make
    for target in made:
        target.close()


@pytest.fixture
def make(server: RedisServer) -> Iterator[Make]:
    """Targets (one per simulated worker) on the shared server, closed after the test."""
    yield from _factory(lambda: server.url)


@pytest.fixture
def make_own(own_server: RedisServer) -> Iterator[Make]:
    yield from _factory(lambda: own_server.url)


# --- semantics ---------------------------------------------------------------------------------


def test_claim_renew_effect_commit_and_read(make: Make) -> None:
    t = make()
    t.setup()
    node = new_node(t)
    assert t.read(node).to_json() == {"status": "READY", "epoch": 0, "owner": None, "result": None}
    lease = claim(t, node, "w1")
    assert lease.epoch == 1
    assert t.read(node).to_json() == {"status": "RUNNING", "epoch": 1, "owner": "w1", "result": None}
    assert t.renew(lease) is None
    assert t.effect(lease, "wrote") is None
    assert t.commit(lease, "done") is None
    assert t.read(node).to_json() == {"status": "SUCCEEDED", "epoch": 1, "owner": "w1", "result": "done"}


def test_a_live_lease_is_held_and_renewing_keeps_it(make: Make) -> None:
    a, b = make(), make()
    node = new_node(a)
    lease = claim(a, node, "a")
    deadline = time.monotonic() + 2 * TTL_MS / 1000
    while time.monotonic() < deadline:  # twice the ttl, renewing at a third of it
        assert b.try_claim(node, "b") == Refused("held")
        assert a.renew(lease) is None
        time.sleep(TTL_MS / 3000)
    assert a.read(node).owner == "a"


def test_an_expired_lease_is_taken_over_with_a_larger_epoch_not_before_the_ttl(make: Make) -> None:
    a, b = make(), make()
    node = new_node(a)
    started = time.monotonic()
    old = claim(a, node, "a")
    new = takeover(b, node, "b")
    assert time.monotonic() - started >= TTL_MS / 1000 - 0.005  # the server's ms clock rounds
    assert new.epoch is not None and old.epoch is not None and new.epoch > old.epoch
    assert b.read(node).to_json() == {"status": "RUNNING", "epoch": new.epoch, "owner": "b", "result": None}


def test_an_expired_lease_can_neither_renew_nor_commit_but_can_be_released(make: Make) -> None:
    t = make()
    node = new_node(t)
    lease = claim(t, node, "a")
    wait_expired(t, node)
    assert t.renew(lease) == Refused("expired")
    assert t.commit(lease, "late") == Refused("expired")
    assert t.release(lease) is None
    assert t.read(node).status == "READY"


def test_the_old_holder_is_fenced_after_a_takeover(make: Make) -> None:
    a, b = make(), make()
    node = new_node(a)
    old = claim(a, node, "a")
    assert a.effect(old, "before") is None
    new = takeover(b, node, "b")
    stale = f"epoch {old.epoch} < current {new.epoch}"
    assert a.renew(old) == Refused("stale", stale)
    assert a.commit(old, "zombie") == Refused("stale", stale)
    assert a.release(old) == Refused("stale", stale)
    assert a.effect(old, "zombie") == Refused("stale", f"epoch {old.epoch} < fence {new.epoch}")  # the claim raised the fence
    assert b.effect(new, "after") is None
    assert b.commit(new, "done") is None
    assert a.read(node).to_json() == {"status": "SUCCEEDED", "epoch": new.epoch, "owner": "b", "result": "done"}


def test_a_committed_node_is_terminal(make: Make) -> None:
    t = make()
    node = new_node(t)
    lease = claim(t, node, "a")
    assert t.commit(lease, "done") is None
    assert t.try_claim(node, "b") == Refused("terminal")
    assert t.renew(lease) == Refused("terminal")
    assert t.commit(lease, "again") == Refused("terminal")
    assert t.release(lease) == Refused("terminal")
    t.add_node(node)  # a redelivery's producer must not reset it
    assert t.read(node).to_json() == {"status": "SUCCEEDED", "epoch": 1, "owner": "a", "result": "done"}


def test_release_makes_the_node_ready_and_the_next_claim_gets_a_larger_epoch(make: Make) -> None:
    t = make()
    node = new_node(t)
    first = claim(t, node, "a")
    assert t.release(first) is None
    assert t.read(node).to_json() == {"status": "READY", "epoch": 1, "owner": None, "result": None}
    released = Refused("not-owner", "the lease was released")
    assert t.renew(first) == released
    assert t.commit(first, "x") == released
    assert t.release(first) == released
    second = claim(t, node, "b")
    assert second.epoch == 2


def test_unknown_nodes_and_epochs(make: Make) -> None:
    t = make()
    assert t.read("never-added").to_json() == {"status": "READY", "epoch": 0, "owner": None, "result": None}
    refusal = t.try_claim("never-added", "a")
    assert isinstance(refusal, Refused) and refusal.reason == "error" and "no such node" in refusal.message
    node = new_node(t)
    lease = claim(t, node, "a")
    assert lease.epoch is not None
    assert t.renew(Lease(node, "a", lease.epoch + 5)) == Refused("error", f"unknown epoch {lease.epoch + 5}")


def test_of_racing_claims_exactly_one_wins(make: Make) -> None:
    workers = [make() for _ in range(8)]
    node = new_node(workers[0])
    start = threading.Barrier(len(workers))

    def race(i: int) -> Lease | Refused:
        start.wait()
        return workers[i].try_claim(node, f"w{i}")

    with ThreadPoolExecutor(len(workers)) as pool:
        outcomes = list(pool.map(race, range(len(workers))))
    winners = [o for o in outcomes if isinstance(o, Lease)]
    assert len(winners) == 1 and winners[0].epoch == 1
    assert all(o == Refused("held") for o in outcomes if not isinstance(o, Lease))


def test_a_skewed_worker_clock_changes_nothing(make: Make) -> None:
    """Expiry is the server's business: a worker an hour ahead cannot steal a live lease."""
    honest, ahead = make(), make(clock=lambda: time.time() * 1000 + 3_600_000)
    node = new_node(honest)
    claim(honest, node, "a")
    assert ahead.try_claim(node, "b") == Refused("held")


# --- durability and faults -----------------------------------------------------------------------


def test_an_acknowledged_commit_survives_restart_and_kill(own_server: RedisServer, make_own: Make) -> None:
    t = make_own()
    nodes = []

    def crash_and_start() -> None:
        own_server.kill()
        own_server.start()

    for restart in (own_server.restart, crash_and_start):
        node = new_node(t)
        lease = claim(t, node, "a")
        assert t.commit(lease, "done") is None
        restart()
        nodes.append(node)
        # the same client carries on: a dead pooled connection is replaced, the scripts reloaded
        assert t.read(node).to_json() == {"status": "SUCCEEDED", "epoch": 1, "owner": "a", "result": "done"}
    assert [make_own().read(n).status for n in nodes] == ["SUCCEEDED", "SUCCEEDED"]


def test_a_killed_server_is_unavailable_then_usable_again(own_server: RedisServer, make_own: Make) -> None:
    t = make_own()
    node = new_node(t)
    lease = claim(t, node, "a")
    own_server.kill()
    for op in (
        lambda: t.try_claim(node, "b"), lambda: t.renew(lease), lambda: t.effect(lease, "x"),
        lambda: t.commit(lease, "x"), lambda: t.release(lease), lambda: t.read(node), t.setup,
    ):
        with pytest.raises(Unavailable):
            op()
    own_server.start()
    assert t.renew(lease) in (None, Refused("expired"))  # the lease lived on in the AOF


def test_a_server_that_never_ran_is_unavailable() -> None:
    t = RedisLease(TargetConfig(f"redis://127.0.0.1:{free_port()}/0", timeout_s=1.0))
    with pytest.raises(Unavailable):
        t.setup()
    with pytest.raises(Unavailable):
        t.try_claim("n", "a")
    t.close()


def test_a_paused_server_makes_an_operation_indeterminate(own_server: RedisServer, make_own: Make) -> None:
    t = make_own(timeout_s=0.3)
    t.setup()  # the script must be known to the server for the paused claim to run later
    node, elsewhere = new_node(t), new_node(t)
    own_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(Indeterminate):
            t.try_claim(node, "a")
        assert time.monotonic() - started < 2.0
        with pytest.raises((Indeterminate, Unavailable)):  # a new connection may not even finish its handshake
            make_own(timeout_s=0.3).try_claim(elsewhere, "b")
    finally:
        own_server.resume()

    def running() -> NodeState | None:
        state = t.read(node)
        return state if state.status == "RUNNING" else None

    # why "indeterminate" and not "failed": the server ran the claim when it woke up
    assert wait_for(running, timeout=3.0, what="the claim applied by the woken server").owner == "a"


def test_a_connection_lost_mid_operation_is_indeterminate(own_server: RedisServer, make_own: Make) -> None:
    t = make_own(timeout_s=10.0)
    node = new_node(t)
    own_server.pause()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(t.try_claim, node, "a")
        time.sleep(0.1)  # the script is on its way to the stopped server
        started = time.monotonic()
        own_server.kill()
        with pytest.raises(Indeterminate):
            pending.result(timeout=5.0)
    assert time.monotonic() - started < 2.0  # the lost connection ended it, not the 10 s timeout
    own_server.start()
    assert t.read(node).status in ("READY", "RUNNING")


# --- deliberately broken variants ----------------------------------------------------------------


def test_queue_as_authority_gives_a_duplicate_delivery_two_owners(make: Make) -> None:
    a, b = make(QueueAsAuthorityRedis), make(QueueAsAuthorityRedis)
    node = new_node(a)
    first = claim(a, node, "a")
    second = claim(b, node, "b")  # the redelivered message: the live lease is not checked
    assert second.epoch is not None and first.epoch is not None and second.epoch > first.epoch
    assert b.effect(second, "b") is None
    assert a.effect(first, "a") is None  # stale effect: no fence
    assert b.commit(second, "b") is None
    assert a.commit(first, "a") is None  # duplicate commit
    assert a.try_claim(node, "c") == Refused("terminal")


def test_no_increment_hands_the_same_epoch_to_the_next_owner(make: Make) -> None:
    a, b = make(NoIncrementRedis), make(NoIncrementRedis)
    node = new_node(a)
    old = claim(a, node, "a")  # then "a" pauses past its ttl
    new = takeover(b, node, "b")
    assert new.epoch == old.epoch  # duplicate epoch
    assert a.effect(old, "zombie") is None
    assert a.commit(old, "zombie") is None  # the zombie passes every epoch check
    other = new_node(a)
    released = claim(a, other, "a")
    assert a.release(released) is None
    assert claim(b, other, "b").epoch == released.epoch


def test_the_registry_names_load_these_classes() -> None:
    assert registry.load("redis") is RedisLease
    assert registry.load("redis-queue-as-authority") is QueueAsAuthorityRedis
    assert registry.load("redis-no-increment") is NoIncrementRedis
    assert RedisLease.bug == "" and RedisLease.store == "redis" and RedisLease.fenced
    for broken in (QueueAsAuthorityRedis, NoIncrementRedis):
        assert broken.bug and broken.expected and (broken.exposed_by or broken.exposed_by_workload) and broken.store == "redis"


def test_a_server_restarted_from_a_thread_outlives_that_thread(tmp_path: Path) -> None:
    """The heal of kill-store restarts the server from the nemesis thread; the server must not die with it.

    A child's parent-death signal fires when the *thread* that forked it exits;
    servers are forked by one long-lived thread instead (``servers.base.popen``).
    """
    server = RedisServer(directory=tmp_path / "redis")
    try:
        starter = threading.Thread(target=server.start)
        starter.start()
        starter.join()
        time.sleep(0.5)  # the parent-death signal, were it armed to the starter thread, is sent at its exit: give it time
        assert server.pid is not None, f"the server died with the thread that started it (exit {server.process.returncode if server.process else None})"
        target = RedisLease(TargetConfig(url=server.url))
        try:
            target.setup()
        finally:
            target.close()
    finally:
        server.stop()
