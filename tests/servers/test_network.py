"""Network faults through a real Toxiproxy, in front of real Redis and Postgres servers.

What the runner relies on: a worker's backend works through its own proxy; a
"hang" partition makes an op in flight *indeterminate* (never a definite
failure: the store may have applied it) within the client's timeout; a "cut"
makes new connections definitely fail; healing restores service; latency and
bandwidth slow ops down by at least what they say; a fault on one worker
leaves another alone; and heal-everything leaves no toxic and no disabled proxy.

The Toxiproxy server is built by ``leasecheck install-toxiproxy``'s code (a
no-op when the pinned version is there) and started for this module; if either
fails, the tests fail — a CI machine without network faults must be red.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from stores import serve

from leasecheck.nemesis.catalogue import CATALOGUE, FAULTS, Need
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.heal import heal_record
from leasecheck.nemesis.network import Bandwidth, Latency, Partition
from leasecheck.nemesis.proxies import Network
from leasecheck.nemesis.toxiproxy import ToxiproxyClient
from leasecheck.servers.base import EnvironmentFailure, LocalServer
from leasecheck.servers.store_network import route
from leasecheck.servers.tools import install_toxiproxy
from leasecheck.servers.toxiproxy import ToxiproxyServer, find_toxiproxy_server
from leasecheck.targets.base import Indeterminate, Lease, Target, TargetConfig, Unavailable
from leasecheck.targets.postgres_lease import PostgresLease
from leasecheck.targets.redis_lease import RedisLease
from leasecheck.targets.urls import store_endpoint, with_endpoint

#: the backends' client timeout here: short, so a hang costs a second or two
TIMEOUT_S = 1.0
#: long enough that no lease of a test runs out while the test waits on a fault
TTL_MS = 30_000
BACKENDS: dict[str, type[Target]] = {"redis": RedisLease, "postgres": PostgresLease}


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[ToxiproxyServer]:
    try:
        binary = install_toxiproxy()
    except EnvironmentFailure as e:
        pytest.fail(str(e), pytrace=False)
    yield from serve(lambda: ToxiproxyServer(binary=binary, seed=7), "toxiproxy")


@pytest.fixture
def network(toxiproxy: ToxiproxyServer) -> Iterator[Network]:
    net = Network(toxiproxy.url, prefix=f"t{uuid.uuid4().hex[:6]}")
    try:
        yield net
    finally:
        net.heal_everything()
        net.close()


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest) -> tuple[str, LocalServer]:
    """(kind, running server) for each store, from the suite's shared servers."""
    return request.param, request.getfixturevalue(f"{request.param}_server")


Client = Callable[..., Target]


@pytest.fixture
def client(store: tuple[str, LocalServer], network: Network) -> Iterator[Client]:
    """``client(worker)``: a backend of the store reaching it through ``worker``'s proxy."""
    kind, server = store
    made: list[Target] = []

    def make(worker: str, timeout_s: float = TIMEOUT_S) -> Target:
        backend = BACKENDS[kind](TargetConfig(url=route(network, worker, server.url), ttl_ms=TTL_MS, timeout_s=timeout_s))
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def fresh_node(backend: Target) -> str:
    node = f"net-{uuid.uuid4().hex[:10]}/deploy"
    backend.setup()
    backend.add_node(node)
    return node


def claimed(backend: Target) -> Lease:
    lease = backend.try_claim(fresh_node(backend), "w1")
    assert isinstance(lease, Lease), lease
    return lease


def elapsed(op: Callable[[], Any]) -> tuple[float, Any]:
    start = time.monotonic()
    try:
        result: Any = op()
    except Exception as e:  # the caller asserts on which
        result = e
    return time.monotonic() - start, result


def give_up_after(backend: Target) -> float:
    """How long the backend may take to give up on a silent store, plus scheduling slack."""
    limit = backend.deadline_s if isinstance(backend, PostgresLease) else TIMEOUT_S
    return limit + 1.0


def assert_serves(backend: Target, lease: Lease) -> None:
    """The lease's holder can renew, write and read again: service is back."""
    assert backend.renew(lease) is None
    assert backend.effect(lease, "after-heal") is None
    assert backend.read(lease.node).epoch == lease.epoch


# ------------------------------------------------------------------------------------ forwarding


def test_backend_works_through_its_proxy(client: Client, network: Network, store: tuple[str, LocalServer]) -> None:
    backend = client("w1")
    host, port = store_endpoint(backend.config.url)
    proxy = network.proxy("w1")
    assert (host, port) == (proxy.host, proxy.port) and proxy.upstream == f"127.0.0.1:{store[1].port}"
    lease = claimed(backend)
    assert backend.renew(lease) is None
    assert backend.effect(lease, "through-the-proxy") is None
    assert backend.commit(lease, "done") is None
    state = backend.read(lease.node)
    assert (state.status, state.epoch, state.result) == ("SUCCEEDED", lease.epoch, "done")


# ------------------------------------------------------------------------------------ partitions


def test_hang_turns_an_op_in_flight_into_indeterminate(
    client: Client, network: Network, store: tuple[str, LocalServer]
) -> None:
    """The commit reaches the store, the partition starts, the store applies it: its outcome is unknown, never "failed".

    To have the commit in flight for sure, the store is paused (SIGSTOP) while
    the request passes the proxy into its socket, the hang starts, then the
    store resumes, applies the commit and answers into the partition.
    """
    server = store[1]
    backend = client("w1")
    lease = claimed(backend)
    outcome: list[tuple[float, Any]] = []
    op = threading.Thread(target=lambda: outcome.append(elapsed(lambda: backend.commit(lease, "x"))))
    server.pause()
    try:
        op.start()
        time.sleep(0.2)  # the request is through the proxy, waiting in the paused store's socket
        hang = Partition(network, ["w1"], mode="hang")
        assert hang.start() == {"victims": ["w1"], "mode": "hang", "scope": "all"}
    finally:
        server.resume()
    op.join(10)
    ((seconds, result),) = outcome
    assert isinstance(result, Indeterminate), result
    assert seconds < give_up_after(backend)

    # new connections during the hang: not served, and never a definite refusal
    seconds, result = elapsed(lambda: client("w1").read(lease.node))
    assert isinstance(result, (Unavailable, Indeterminate)), result
    assert seconds < give_up_after(backend) + 1.0

    assert hang.heal() == {"victims": ["w1"], "mode": "hang", "fault": "partition"}
    state = backend.read(lease.node)
    assert (state.status, state.epoch, state.result) == ("SUCCEEDED", lease.epoch, "x")  # applied, reply lost
    assert_serves(backend, claimed(backend))


def test_cut_refuses_new_connections(client: Client, network: Network) -> None:
    backend = client("w1")
    lease = claimed(backend)
    cut = Partition(network, ["w1"], mode="cut")
    assert cut.start() == {"victims": ["w1"], "mode": "cut", "scope": "all"}
    assert network.api.proxies()[network.proxy_name("w1")]["enabled"] is False

    seconds, result = elapsed(lambda: client("w1").read(lease.node))
    assert isinstance(result, Unavailable), result  # refused: definitely not applied
    assert seconds < 1.0
    # the connection that was open is closed: an op on it was not served either
    seconds, result = elapsed(lambda: backend.renew(lease))
    assert isinstance(result, (Unavailable, Indeterminate)), result

    assert cut.heal() == {"victims": ["w1"], "mode": "cut", "fault": "partition"}
    assert network.api.proxies()[network.proxy_name("w1")]["enabled"] is True
    assert_serves(backend, lease)


@pytest.mark.parametrize("mode", ["hang", "cut"])
def test_a_partitioned_worker_does_not_affect_another(client: Client, network: Network, mode: str) -> None:
    victim, bystander = client("w1"), client("w2")
    victim_lease, bystander_lease = claimed(victim), claimed(bystander)
    fault = Partition(network, ["w1"], mode=mode)  # type: ignore[arg-type]
    assert fault.start()["scope"] == "some"
    _, result = elapsed(lambda: victim.renew(victim_lease))
    # sent on an open connection into a hang: unknown; a cut connection may be noticed before sending
    assert isinstance(result, Indeterminate if mode == "hang" else (Unavailable, Indeterminate)), result
    seconds, result = elapsed(lambda: bystander.renew(bystander_lease))
    assert result is None and seconds < TIMEOUT_S  # a hang would have held it for the client's whole timeout
    assert_serves(bystander, bystander_lease)
    fault.heal()
    assert_serves(victim, victim_lease)


# --------------------------------------------------------------------------- latency, bandwidth


def test_latency_delays_every_round_trip(client: Client, network: Network) -> None:
    backend = client("w1")
    lease = claimed(backend)
    fault = Latency(network, ["w1"], latency_ms=150, jitter_ms=0)
    assert fault.start() == {"victims": ["w1"], "latency_ms": 150, "jitter_ms": 0, "scope": "all"}
    seconds, result = elapsed(lambda: backend.renew(lease))
    assert result is None
    assert seconds >= 0.95 * 2 * 0.150  # the request and the reply each wait 150 ms
    assert fault.heal() == {"victims": ["w1"], "latency_ms": 150, "jitter_ms": 0, "fault": "latency"}
    seconds, result = elapsed(lambda: backend.renew(lease))
    assert result is None and seconds < 0.95 * 2 * 0.150  # what the latency alone took above


def test_bandwidth_limits_throughput(client: Client, network: Network) -> None:
    backend = client("w1", timeout_s=5.0)  # the slow write below must not time out
    lease = claimed(backend)
    payload = "x" * 4000
    fault = Bandwidth(network, ["w1"], rate_kb=10)
    assert fault.start() == {"victims": ["w1"], "rate_kb": 10, "scope": "all"}
    seconds, result = elapsed(lambda: backend.effect(lease, payload))
    assert result is None
    assert seconds >= 0.9 * 4000 / 10_000  # 4 kB at 10 kB/s
    assert fault.heal() == {"victims": ["w1"], "rate_kb": 10, "fault": "bandwidth"}


# --------------------------------------------------------------------------------------- healing


def test_heal_removes_exactly_its_own_toxics(toxiproxy: ToxiproxyServer, network: Network, redis_server: LocalServer) -> None:
    route(network, "w1", redis_server.url)
    api = ToxiproxyClient(toxiproxy.url)
    slow = Latency(network, ["w1"], latency_ms=10)
    hang = Partition(network, ["w1"], mode="hang")
    slow.start()
    hang.start()
    assert len(api.proxies()[network.proxy_name("w1")]["toxics"]) == 4
    hang.heal()
    left = api.proxies()[network.proxy_name("w1")]["toxics"]
    assert sorted(t["type"] for t in left) == ["latency", "latency"]
    assert hang.heal() is None  # nothing left to undo
    slow.heal()
    assert api.proxies()[network.proxy_name("w1")]["toxics"] == []


def test_heal_everything_leaves_no_toxic_and_every_proxy_enabled(
    toxiproxy: ToxiproxyServer, network: Network, redis_server: LocalServer
) -> None:
    for worker in ("w1", "w2", "w3"):
        route(network, worker, redis_server.url)
    faults = [
        Partition(network, ["w1"], mode="hang"),
        Partition(network, ["w2"], mode="cut"),
        Latency(network, ["w3"], latency_ms=50, jitter_ms=10),
        Bandwidth(network, None, rate_kb=100),  # everyone
    ]
    for fault in faults:
        fault.start()
    assert network.heal_everything() == {"toxics_removed": 2 + 2 + 3 * 2, "proxies_enabled": 1}
    proxies = ToxiproxyClient(toxiproxy.url).proxies()
    ours = {name: p for name, p in proxies.items() if name.startswith(network.prefix)}
    assert len(ours) == 3
    assert all(p["enabled"] and p["toxics"] == [] for p in proxies.values()), proxies
    for fault in faults:  # the faults' own heals find nothing left, and do not fail
        fault.heal()
    assert all(p["enabled"] and p["toxics"] == [] for p in ToxiproxyClient(toxiproxy.url).proxies().values())


def test_leasecheck_heal_undoes_a_fault_from_its_record(
    toxiproxy: ToxiproxyServer, network: Network, redis_server: LocalServer
) -> None:
    """What faults.json keeps is enough to undo a fault after the harness that made it is gone."""
    for worker in ("w1", "w2"):
        route(network, worker, redis_server.url)
    hang, cut = Partition(network, ["w1"], mode="hang"), Partition(network, ["w2"], mode="cut")
    assert hang.undo_record() is None
    hang.start()
    cut.start()
    records = [json.loads(json.dumps(f.undo_record())) for f in (hang, cut)]  # as faults.json holds them
    assert [r["kind"] for r in records] == ["toxiproxy", "toxiproxy"]
    assert [heal_record(r) for r in records] == [
        f"removed 2 toxic(s), re-enabled 0 proxy(ies) at {toxiproxy.url}",
        f"removed 0 toxic(s), re-enabled 1 proxy(ies) at {toxiproxy.url}",
    ]
    proxies = ToxiproxyClient(toxiproxy.url).proxies()
    assert all(proxies[network.proxy_name(w)]["enabled"] and not proxies[network.proxy_name(w)]["toxics"] for w in ("w1", "w2"))
    gone = {**records[0], "api": "http://127.0.0.1:1"}  # the harness's toxiproxy died with it
    assert "nothing left to undo" in heal_record(gone)


# --------------------------------------------------------------------------------- scheduling


def test_seeded_faults_name_their_events_and_victims(network: Network, redis_server: LocalServer) -> None:
    for worker in range(5):
        route(network, worker, redis_server.url)

    kinds = [kind for kind in CATALOGUE if Need.TOXIPROXY in kind.needs]
    context = FaultContext(ttl_ms=1000, network=network)

    def draw(seed: int) -> list[tuple[str, Any]]:
        rng = random.Random(seed)
        faults = [kind.make(context, rng) for kind in kinds for _ in range(4)]
        return [(f.name, f.victims) for f in faults if isinstance(f, (Partition, Latency, Bandwidth))]

    first = draw(3)
    assert first == draw(3)  # the seed decides
    assert {name for name, _ in first} == {kind.name for kind in kinds} == {"partition", "latency", "bandwidth"}
    assert [kind.events[1] for kind in kinds] == ["heal"] * 3  # one heal event for every network fault
    for _, victims in first:
        assert victims is None or (victims and set(victims) <= set(range(5)))
    nobody = FaultContext(ttl_ms=1000, network=Network(network.api, prefix="empty"))
    assert FAULTS["partition"].make(nobody, random.Random(1)) is None
    assert FAULTS["latency"].make(FaultContext(ttl_ms=1000), random.Random(1)) is None  # no Toxiproxy at all


@dataclass(frozen=True)
class _Worker:
    slot: int
    process: int
    pid: int | None = None


@pytest.mark.parametrize("name", ["partition", "latency", "bandwidth"])
def test_a_network_fault_names_its_victims_by_process_number_and_their_proxies_by_slot(
    network: Network, redis_server: LocalServer, name: str,
) -> None:
    """Slots and process numbers part ways once a worker renumbers (after an info op) or is replaced: the
    events name the history's process numbers, as every other fault's do, so a report can say whom it hit."""
    for worker in range(5):
        route(network, worker, redis_server.url)
    workers = [_Worker(slot, 10 + 3 * slot) for slot in range(4)]  # slot 4's worker is gone: its proxy stays
    context = FaultContext(ttl_ms=1000, network=network, workers=lambda: workers)
    for seed in range(12):
        fault = FAULTS[name].make(context, random.Random(seed))
        assert isinstance(fault, (Partition, Latency, Bandwidth))
        started = fault.start()
        try:
            proxies = started["proxies"]
            assert proxies == (list(range(5)) if fault.victims is None else list(fault.victims))
            assert started["victims"] == [10 + 3 * slot for slot in proxies if slot < 4]
        finally:
            healed = fault.heal()
        assert healed is not None and (healed["victims"], healed["proxies"]) == (started["victims"], proxies)


# ------------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("url", "endpoint", "proxied"),
    [
        ("postgresql://postgres@127.0.0.1:5433/postgres", ("127.0.0.1", 5433), "postgresql://postgres@127.0.0.1:20001/postgres"),
        ("postgres://u:p%40ss@db.local/app?sslmode=disable", ("db.local", 5432), "postgres://u:p%40ss@127.0.0.1:20001/app?sslmode=disable"),
        ("redis://127.0.0.1:6380/0", ("127.0.0.1", 6380), "redis://127.0.0.1:20001/0"),
        ("redis://:secret@[::1]:6379/2", ("::1", 6379), "redis://:secret@127.0.0.1:20001/2"),
        ("host=127.0.0.1 port=5433 dbname=x user='a b'", ("127.0.0.1", 5433), "host=127.0.0.1 port=20001 dbname=x user='a b'"),
    ],
)
def test_store_addresses_are_rewritten_to_a_proxy(url: str, endpoint: tuple[str, int], proxied: str) -> None:
    assert store_endpoint(url) == endpoint
    assert with_endpoint(url, "127.0.0.1", 20001) == proxied


@pytest.mark.parametrize(
    "url", ["postgresql:///db?host=/var/run/postgresql", "host=/tmp dbname=x", "unix:///tmp/redis.sock", "postgresql://a:1,b:2/db"]
)
def test_addresses_a_tcp_proxy_cannot_front_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        store_endpoint(url)


def test_a_missing_binary_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentFailure, match="leasecheck install-toxiproxy"):
        find_toxiproxy_server()
    with pytest.raises(EnvironmentFailure, match="not an executable"):
        find_toxiproxy_server(tmp_path / "toxiproxy-server")


def test_an_unknown_partition_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="hang"):
        Partition(Network("http://127.0.0.1:1"), ["w1"], mode="drop")  # type: ignore[arg-type]
