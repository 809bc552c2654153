"""The unfenced reference lease (``redis-token``) against a real redis-server.

What it must get right is what every unfenced lock library must: a token that
no longer holds the node can do nothing (renew, effect, commit, release), and a
lease runs out ttl after its last claim or heartbeat by the server's clock. And
it must be judged valid end to end, so leasecheck's unfenced checks have a
correct backend that exercises them under real faults.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from stores import claim, new_node, serve, takeover, wait_expired

from leasecheck.histories import read_history
from leasecheck.run.runner import RunOptions, run
from leasecheck.servers.base import free_port
from leasecheck.servers.redis import RedisServer
from leasecheck.targets import registry
from leasecheck.targets.base import Lease, NodeState, Refused, TargetConfig, Unavailable
from leasecheck.targets.redis_lease import RedisLease, RedisScripts
from leasecheck.targets.redis_token_lease import RedisTokenLease

TTL_MS = 300
Make = Callable[..., RedisTokenLease]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from serve(lambda: RedisServer(tmp_path_factory.mktemp("redis-token")), "redis-server")


@pytest.fixture
def make(server: RedisServer) -> Iterator[Make]:
    """Clients (one per simulated worker) on the shared server, closed after the test."""
    made: list[RedisTokenLease] = []

    def build(ttl_ms: int = TTL_MS, **config: Any) -> RedisTokenLease:
        target = RedisTokenLease(TargetConfig(server.url, ttl_ms=ttl_ms, timeout_s=2.0, **config))
        made.append(target)
        return target

    yield build
    for target in made:
        target.close()


def effects(target: RedisTokenLease, node: str) -> list[dict[str, str]]:
    """The protected resource's log of accepted effects."""
    return [json.loads(e) for e in target.client.lrange(target.keys(node)[1], 0, -1)]


# --- semantics ---------------------------------------------------------------------------------


def test_claim_renew_effect_commit_and_read_carry_a_token_and_no_epoch(make: Make) -> None:
    t = make()
    t.setup()
    node = new_node(t)
    assert t.read(node) == NodeState("READY", None)
    lease = claim(t, node, "w1")
    assert lease.epoch is None and lease.token is not None and len(lease.token) == 32
    assert lease.to_json() == {"epoch": None, "token": lease.token}
    assert t.read(node).to_json() == {"status": "RUNNING", "epoch": None, "owner": "w1", "result": None, "token": lease.token}
    assert t.renew(lease) is None
    assert t.effect(lease, "wrote") is None
    assert t.commit(lease, "done") is None
    assert t.read(node).to_json() == {"status": "SUCCEEDED", "epoch": None, "owner": "w1", "result": "done", "token": lease.token}
    assert effects(t, node) == [{"token": lease.token, "payload": "wrote"}]


def test_every_claim_gets_a_token_of_its_own(make: Make) -> None:
    t = make()
    tokens = set()
    for _ in range(20):
        node = new_node(t)
        lease = claim(t, node, "w")
        assert t.release(lease) is None
        again = claim(t, node, "w")  # the same owner, the same node: still a new token
        tokens |= {lease.token, again.token}
    assert len(tokens) == 40


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


def test_an_expired_lease_is_taken_over_with_a_new_token_not_before_the_ttl(make: Make) -> None:
    a, b = make(), make()
    node = new_node(a)
    started = time.monotonic()
    old = claim(a, node, "a")
    new = takeover(b, node, "b")
    assert time.monotonic() - started >= TTL_MS / 1000 - 0.005  # the server's ms clock rounds
    assert new.token != old.token
    assert b.read(node).to_json() == {"status": "RUNNING", "epoch": None, "owner": "b", "result": None, "token": new.token}


def test_an_expired_lease_can_do_nothing_not_even_release(make: Make) -> None:
    """Every op on a lease needs it unexpired (the fenced reference lets the holder give back an expired lease)."""
    t = make()
    node = new_node(t)
    lease = claim(t, node, "a")
    wait_expired(t, node)
    assert t.renew(lease) == Refused("expired")
    assert t.effect(lease, "late") == Refused("expired")
    assert t.commit(lease, "late") == Refused("expired")
    assert t.release(lease) == Refused("expired")
    assert t.read(node).status == "RUNNING" and effects(t, node) == []
    assert claim(make(), node, "b").token != lease.token  # and it can be taken over


def test_the_old_holder_can_do_nothing_after_a_takeover(make: Make) -> None:
    a, b, c = make(), make(), make()
    node = new_node(a)
    old = claim(a, node, "a")
    assert a.effect(old, "before") is None
    new = takeover(b, node, "b")
    stale = Refused("stale", f"token {old.token} is not the current holder")
    assert a.renew(old) == stale
    assert a.commit(old, "zombie") == stale
    assert a.effect(old, "zombie") == stale  # the resource is coupled to the lease: the claim fenced it off
    assert a.release(old) == stale
    assert c.try_claim(node, "c") == Refused("held")  # the zombie's release freed nothing
    assert b.effect(new, "after") is None
    assert b.commit(new, "done") is None
    assert a.read(node).to_json() == {"status": "SUCCEEDED", "epoch": None, "owner": "b", "result": "done", "token": new.token}
    assert [e["payload"] for e in effects(a, node)] == ["before", "after"]


def test_a_committed_node_is_terminal(make: Make) -> None:
    t = make()
    node = new_node(t)
    lease = claim(t, node, "a")
    assert t.commit(lease, "done") is None
    assert t.try_claim(node, "b") == Refused("terminal")
    assert t.renew(lease) == Refused("terminal")
    assert t.commit(lease, "again") == Refused("terminal")
    assert t.release(lease) == Refused("terminal")
    assert t.effect(lease, "after the end") == Refused("terminal")
    t.add_node(node)  # a redelivery's producer must not reset it
    assert t.read(node).to_json() == {"status": "SUCCEEDED", "epoch": None, "owner": "a", "result": "done", "token": lease.token}


def test_release_makes_the_node_ready_and_the_released_token_powerless(make: Make) -> None:
    t = make()
    node = new_node(t)
    first = claim(t, node, "a")
    assert t.release(first) is None
    assert t.read(node).to_json() == {"status": "READY", "epoch": None, "owner": None, "result": None, "token": first.token}
    released = Refused("not-owner", "the lease was released")
    assert t.renew(first) == released
    assert t.commit(first, "x") == released
    assert t.effect(first, "x") == released
    assert t.release(first) == released
    second = claim(t, node, "b")
    assert second.token != first.token
    assert t.renew(first) == Refused("stale", f"token {first.token} is not the current holder")


def test_unknown_nodes_and_tokens(make: Make) -> None:
    t = make()
    assert t.read("never-added") == NodeState("READY", None)
    refusal = t.try_claim("never-added", "a")
    assert isinstance(refusal, Refused) and refusal.reason == "error" and "no such node" in refusal.message
    node = new_node(t)
    assert t.renew(Lease(node, "a", None, "made-up")) == Refused("not-owner", "no lease was ever granted on this node")
    claim(t, node, "a")
    assert t.renew(Lease(node, "a", None, "made-up")) == Refused("stale", "token made-up is not the current holder")
    with pytest.raises(ValueError, match="must carry its token"):
        t.renew(Lease(node, "a", 1))  # a fenced lease handed to an unfenced backend: the caller's bug


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
    assert len(winners) == 1
    assert all(o == Refused("held") for o in outcomes if not isinstance(o, Lease))
    assert workers[0].read(node).token == winners[0].token


def test_a_skewed_worker_clock_changes_nothing(make: Make) -> None:
    """Expiry is the server's business: a worker an hour ahead cannot steal a live lease."""
    honest, ahead = make(), make(clock=lambda: time.time() * 1000 + 3_600_000)
    node = new_node(honest)
    claim(honest, node, "a")
    assert ahead.try_claim(node, "b") == Refused("held")


def test_it_shares_the_fenced_references_machinery_and_never_its_keys(make: Make, server: RedisServer) -> None:
    """Both Redis backends run on RedisScripts; on one server their nodes of the same name stay apart."""
    assert issubclass(RedisTokenLease, RedisScripts) and issubclass(RedisLease, RedisScripts)
    token = make()
    fenced = RedisLease(TargetConfig(server.url, ttl_ms=TTL_MS))
    try:
        node = new_node(token)
        fenced.add_node(node)
        assert set(token.keys(node)).isdisjoint(fenced.keys(node))
        assert claim(fenced, node, "f").epoch == 1
        assert claim(token, node, "t").epoch is None  # the fenced lease on the same name is not in the way
        assert len({k.split("}")[0] for k in token.keys(node)}) == 1  # one hash slot
    finally:
        fenced.close()


def test_the_registry_name_loads_it_as_an_unfenced_reference() -> None:
    cls = registry.load("redis-token")
    assert cls is RedisTokenLease
    assert cls.fenced is False and cls.store == "redis" and cls.bug == "" and cls.expected == ()


# --- durability and faults ---------------------------------------------------------------------


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, for tests that kill it."""
    yield from serve(lambda: RedisServer(tmp_path / "redis"), "redis-server")


def test_an_acknowledged_commit_survives_a_kill(own_server: RedisServer) -> None:
    t = RedisTokenLease(TargetConfig(own_server.url, ttl_ms=TTL_MS, timeout_s=2.0))
    try:
        node = new_node(t)
        lease = claim(t, node, "a")
        assert t.commit(lease, "done") is None
        own_server.kill()
        with pytest.raises(Unavailable):
            t.read(node)
        own_server.start()
        # the same client carries on: a dead pooled connection is replaced, the scripts reloaded
        assert t.read(node).to_json() == {"status": "SUCCEEDED", "epoch": None, "owner": "a", "result": "done", "token": lease.token}
    finally:
        t.close()


def test_a_server_that_never_ran_is_unavailable() -> None:
    t = RedisTokenLease(TargetConfig(f"redis://127.0.0.1:{free_port()}/0", timeout_s=1.0))
    with pytest.raises(Unavailable):
        t.setup()
    with pytest.raises(Unavailable):
        t.try_claim("n", "a")
    t.close()


# --- end to end --------------------------------------------------------------------------------


def test_a_run_under_pause_and_kill_is_valid_and_really_fences_zombies(tmp_path: Path) -> None:
    """``leasecheck run --target redis-token --nemesis pause,kill``: valid, with takeovers and refused zombies.

    The runner starts its own redis-server. A valid verdict only counts if the
    run tested something: contended claims, and superseded tokens refused.
    """
    opts = RunOptions(
        target="redis-token", nemesis=("pause", "kill"), nemesis_interval=1.0, time_limit=8.0,
        evidence_wait_s=30.0, ttl_ms=TTL_MS, seed=5, store=str(tmp_path / "store"),
    )
    result = run(opts)
    assert result.verdict.valid is True, [a.to_json() for a in result.verdict.anomalies[:5]]
    _, ops, _ = read_history(result.run_dir / "history.jsonl")
    claims = [op for op in ops if op.f == "claim" and op.type == "ok"]
    assert claims and all(op.result.get("epoch") is None and op.result.get("token") for op in claims)
    refused = Counter(op.result.get("reason") for op in ops if op.type == "fail")
    assert refused["held"] >= 1 and refused["stale"] >= 1, refused
