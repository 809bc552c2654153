"""Clock skew: worker clocks moved from another process, the store's clock under libfaketime.

Worker clocks are exercised the way the runner uses them: the clock travels to a
spawned worker inside its arguments, and this (the harness's) process bumps,
strobes and resets it. The store's clock is skewed for real, by a Postgres and
a Redis running under libfaketime, while the host's clock must not move.
"""

from __future__ import annotations

import datetime
import fcntl
import itertools
import multiprocessing as mp
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from stores import serve

from leasecheck.nemesis.catalogue import FAULTS
from leasecheck.nemesis.clock import ClockBump, ClockStrobe
from leasecheck.nemesis.heal import heal_record
from leasecheck.nemesis.store_clock import ServerClockSkew, faketime_offset, required_uncertainty_ms
from leasecheck.nemesis.timepatch import patch_process_time
from leasecheck.nemesis.worker_clocks import ClockControl, WorkerClock
from leasecheck.servers.base import EnvironmentFailure, LocalServer
from leasecheck.servers.faketime import FaketimePostgresServer, FaketimeRedisServer, find_libfaketime
from leasecheck.targets.base import Lease, Refused, Target, TargetConfig
from leasecheck.targets.registry import TargetSpec

TTL_MS = 2000
#: how far two reads of "now" in one process may sit apart on a loaded CI machine
TOLERANCE_MS = 50.0
HOUR_MS = 3_600_000.0


def _real_ms() -> float:
    """The host's wall clock, through a function patch_process_time leaves alone."""
    return time.clock_gettime(time.CLOCK_REALTIME) * 1000.0


# -- a worker process --------------------------------------------------------------------------


def _worker(conn: Connection, clock: WorkerClock) -> None:
    """A stand-in worker: answers questions about its clock until told to stop."""
    patch = None
    while True:
        cmd, *args = conn.recv()
        if cmd == "offset":
            conn.send(clock() - _real_ms())
        elif cmd == "sample":
            conn.send(_sample(clock, args[0]))
        elif cmd == "patch":
            patch = patch_process_time(clock)
            conn.send(None)
        elif cmd == "process-time":
            conn.send(_process_time_offsets())
        elif cmd == "unpatch":
            assert patch is not None
            patch.undo()
            conn.send(None)
        else:
            conn.send("bye")
            return


def _sample(clock: WorkerClock, seconds: float) -> list[float]:
    """The clock's offset every ~2 ms for ``seconds``."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.append(clock() - _real_ms())
        time.sleep(0.002)
    return out


def _process_time_offsets() -> dict[str, float]:
    """How far each wall-clock function of this process is from the host's clock, in ms."""
    from datetime import datetime as bound_early  # a name bound the usual way

    real = _real_ms()
    return {
        "time.time": time.time() * 1000.0 - real,
        "time.time_ns": time.time_ns() / 1e6 - real,
        "datetime.now": bound_early.now().timestamp() * 1000.0 - real,
        "datetime.utcnow": bound_early.utcnow().replace(tzinfo=datetime.UTC).timestamp() * 1000.0 - real,
        "datetime.now(utc)": datetime.datetime.now(datetime.UTC).timestamp() * 1000.0 - real,
        "localtime": (time.mktime(time.localtime()) - time.mktime(time.localtime(real / 1000.0))) * 1000.0,
    }


class Worker:
    """The harness's end of a spawned worker process holding ``clock``."""

    def __init__(self, clock: WorkerClock) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, clock), daemon=True)
        self.process.start()
        child.close()

    def ask(self, *msg: Any, timeout: float = 20.0) -> Any:
        self.conn.send(msg)
        assert self.conn.poll(timeout), f"worker did not answer {msg!r}"
        return self.conn.recv()

    def stop(self) -> None:
        try:
            self.ask("stop")
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()


@pytest.fixture
def clocks(tmp_path: Path) -> Iterator[ClockControl]:
    control = ClockControl(tmp_path / "clocks")
    yield control
    control.cleanup()


@pytest.fixture
def worker(clocks: ClockControl) -> Iterator[Worker]:
    w = Worker(clocks.clock(3))
    yield w
    w.stop()


def near(value: float, expected: float, tolerance: float = TOLERANCE_MS) -> bool:
    return abs(value - expected) <= tolerance


# -- worker clocks -----------------------------------------------------------------------------


def test_a_bump_made_here_is_seen_by_the_worker_process_and_heal_resets_it(clocks: ClockControl, worker: Worker) -> None:
    assert near(worker.ask("offset"), 0.0)
    fault = ClockBump(clocks, victims=[3], delta_ms=10 * TTL_MS, processes=[7])
    assert fault.start() == {"victims": [7], "clocks": [3], "delta_ms": 10 * TTL_MS}
    assert FAULTS[fault.name].events == ("clock-skew", "clock-reset")
    assert near(worker.ask("offset"), 10 * TTL_MS)

    assert fault.heal() == {"victims": [7], "clocks": [3]}
    assert near(worker.ask("offset"), 0.0)
    assert fault.heal() is None  # nothing left to undo


def test_bumps_add_up_and_go_both_ways(clocks: ClockControl, worker: Worker) -> None:
    clocks.bump(3, -1500)
    assert near(worker.ask("offset"), -1500)
    clocks.bump(3, -1500)
    assert near(worker.ask("offset"), -3000)
    clocks.reset(3)
    assert near(worker.ask("offset"), 0.0)


def test_a_strobe_alternates_in_the_worker_and_ends_by_itself(clocks: ClockControl, worker: Worker) -> None:
    assert near(worker.ask("offset"), 0.0)  # the worker is up: the strobe's window starts now for both of us
    fault = ClockStrobe(clocks, victims=[3], delta_ms=1000, period_ms=20, duration_s=0.6)
    fault.start()
    samples = worker.ask("sample", 1.0)
    assert all(near(s, 0.0) or near(s, 1000.0) for s in samples), samples
    levels = [round(s / 1000.0) for s in samples]
    flips = sum(1 for a, b in itertools.pairwise(levels) if a != b)
    assert flips >= 6, f"only {flips} flips in {len(samples)} samples"
    assert levels[-10:] == [0] * 10  # the window is over: back to the base offset
    assert fault.heal() == {"victims": [3]}


def test_heal_stops_a_strobe_at_once(clocks: ClockControl, worker: Worker) -> None:
    fault = ClockStrobe(clocks, victims=[3], delta_ms=5000, period_ms=1, duration_s=60)
    fault.start()
    fault.heal()
    assert all(near(s, 0.0) for s in worker.ask("sample", 0.1))


def test_reset_all_resets_every_clock_even_those_made_elsewhere(clocks: ClockControl, worker: Worker) -> None:
    other = ClockControl(clocks.directory)  # e.g. a nemesis in a process of its own
    other.clock("w9")
    other.bump("w9", 700)
    clocks.bump(3, 4000)
    assert near(worker.ask("offset"), 4000)
    assert clocks.is_skewed(3) and other.is_skewed("w9")
    assert sorted(clocks.reset_all()) == ["3", "w9"]
    assert not clocks.is_skewed(3)
    assert near(worker.ask("offset"), 0.0)
    assert other.offset_ms("w9") == 0.0
    other.close()


def test_heal_from_the_record_alone_resets_the_clocks(clocks: ClockControl, worker: Worker) -> None:
    """``leasecheck heal`` after a SIGKILLed harness has only faults.json: the record must be enough."""
    fault = ClockBump(clocks, victims=[3], delta_ms=HOUR_MS)
    fault.start()
    record = fault.undo_record()
    assert record == {"kind": "clock-reset", "directory": str(clocks.directory), "clocks": ["3"]}
    assert "reset" in heal_record(record)
    assert near(worker.ask("offset"), 0.0)
    fault.heal()
    assert fault.undo_record() is None


def test_patch_process_time_makes_the_process_follow_its_skewed_clock(clocks: ClockControl, worker: Worker) -> None:
    worker.ask("patch")
    clocks.bump(3, HOUR_MS)  # after the patch: the patched functions follow the live clock
    skewed = worker.ask("process-time")
    assert all(near(v, HOUR_MS, 1000.0 if k == "localtime" else TOLERANCE_MS) for k, v in skewed.items()), skewed
    worker.ask("unpatch")
    restored = worker.ask("process-time")
    assert all(near(v, 0.0, 1000.0 if k == "localtime" else TOLERANCE_MS) for k, v in restored.items()), restored
    assert near(worker.ask("offset"), HOUR_MS)  # the clock itself is still skewed; only the patch is gone


def test_patch_process_time_accepts_a_clock_built_on_time_time() -> None:
    from leasecheck.targets.base import OffsetClock

    with patch_process_time(OffsetClock(-HOUR_MS)):
        assert near(time.time() * 1000.0 - _real_ms(), -HOUR_MS)
    assert near(time.time() * 1000.0, _real_ms())


def test_required_uncertainty_is_twice_the_largest_store_skew() -> None:
    assert required_uncertainty_ms(1500) == 3000
    assert required_uncertainty_ms(-250) == 500
    assert [faketime_offset(ms) for ms in (1500, -250, 0, -0.0, HOUR_MS, 1)] == ["+1.5", "-0.25", "+0", "+0", "+3600", "+0.001"]


# -- a backend that trusts the worker's clock, against the reference ---------------------------


def _steal_attempt(target: str, url: str, thief_clock: WorkerClock) -> tuple[Lease, Lease | Refused, float]:
    """Holder claims a fresh node; a thief with ``thief_clock`` claims it at once. (holder, thief's result, seconds)."""
    spec = TargetSpec(target, TargetConfig(url=url, ttl_ms=TTL_MS, timeout_s=5.0))
    holder, thief = spec.make(), spec.make(clock=thief_clock)
    try:
        holder.setup()
        node = f"clock/{uuid.uuid4().hex[:8]}"
        holder.add_node(node)
        started = time.monotonic()
        lease = holder.try_claim(node, "holder")
        assert isinstance(lease, Lease), lease
        result = thief.try_claim(node, "thief")
        return lease, result, time.monotonic() - started
    finally:
        _close(holder, thief)


def _close(*targets: Target) -> None:
    for t in targets:
        t.close()


def test_a_skewed_worker_steals_a_live_lease_from_the_client_clock_backend_only(
    clocks: ClockControl, postgres_server: LocalServer
) -> None:
    thief_clock = clocks.clock("thief")
    bump = ClockBump(clocks, victims=["thief"], delta_ms=10 * TTL_MS)
    bump.start()
    try:
        held, stolen, elapsed = _steal_attempt("postgres-client-clock", postgres_server.url, thief_clock)
        assert elapsed < TTL_MS / 1000 / 2, "too slow to call the first lease live"
        assert isinstance(stolen, Lease) and stolen.epoch > held.epoch, stolen  # type: ignore[operator]

        held, refused, elapsed = _steal_attempt("postgres", postgres_server.url, thief_clock)
        assert elapsed < TTL_MS / 1000 / 2
        assert refused == Refused("held")
    finally:
        bump.heal()


# -- the store's clock under libfaketime --------------------------------------------------------


def _install_libfaketime() -> None:
    """``apt-get install -y libfaketime``, once per machine even under xdist (the dpkg lock is not a queue)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    with open("/tmp/leasecheck-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            find_libfaketime()
            return  # the other xdist worker installed it meanwhile
        except EnvironmentFailure:
            pass
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "libfaketime"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)


@pytest.fixture(scope="module")
def libfaketime() -> Path:
    """The preload library; installed if missing (CI installs it in .ci/run; a missing one is a failure)."""
    try:
        return find_libfaketime()
    except EnvironmentFailure:
        _install_libfaketime()
    try:
        return find_libfaketime()
    except EnvironmentFailure as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def faketime_postgres(libfaketime: Path) -> Iterator[FaketimePostgresServer]:
    yield from serve(FaketimePostgresServer, "postgres under libfaketime")


@pytest.fixture(scope="module")
def faketime_redis(libfaketime: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaketimeRedisServer]:
    yield from serve(lambda: FaketimeRedisServer(tmp_path_factory.mktemp("faketime-redis")), "redis under libfaketime")


def _host_clock_step() -> Callable[[], float]:
    """A probe for "did the host's wall clock jump?": wall minus monotonic stays put unless it did."""
    before = time.time() - time.monotonic()
    return lambda: abs((time.time() - time.monotonic()) - before) * 1000.0


def test_postgres_under_faketime_follows_the_control_file_live_and_heals(faketime_postgres: FaketimePostgresServer) -> None:
    host_step = _host_clock_step()
    with psycopg.connect(faketime_postgres.url, autocommit=True) as conn:  # one connection: the edit must reach it

        def server_ahead_ms() -> float:
            (server_s,) = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()  # type: ignore[misc]
            return float(server_s) * 1000.0 - _real_ms()

        assert near(server_ahead_ms(), 0.0, 1000.0)
        fault = ServerClockSkew(faketime_postgres.control_file, HOUR_MS)
        assert fault.start() == {"victims": ["store"], "delta_ms": HOUR_MS}
        assert faketime_postgres.control_file.read_text().strip() == "+3600"
        assert near(server_ahead_ms(), HOUR_MS, 1000.0)
        assert host_step() < 500.0, "the host's clock moved"

        assert fault.heal() == {"victims": ["store"]}
        assert near(server_ahead_ms(), 0.0, 1000.0)
    assert host_step() < 500.0


def test_a_store_skew_lets_even_the_reference_backend_grant_a_live_lease_twice(
    faketime_postgres: FaketimePostgresServer,
) -> None:
    """Why the history header must widen clock_uncertainty_ms by 2s for a store skew of s."""
    spec = TargetSpec("postgres", TargetConfig(url=faketime_postgres.url, ttl_ms=TTL_MS, timeout_s=5.0))
    holder, thief = spec.make(), spec.make()
    fault = faketime_postgres.clock_fault(10 * TTL_MS)
    try:
        holder.setup()
        node = f"clock/{uuid.uuid4().hex[:8]}"
        holder.add_node(node)
        held = holder.try_claim(node, "holder")
        assert isinstance(held, Lease)
        fault.start()
        second = thief.try_claim(node, "thief")
        assert isinstance(second, Lease) and second.epoch > held.epoch  # type: ignore[operator]
        assert required_uncertainty_ms(10 * TTL_MS) >= 10 * TTL_MS  # the header rule covers this jump
    finally:
        fault.heal()
        _close(holder, thief)


def test_server_clock_heal_from_the_record_alone(faketime_postgres: FaketimePostgresServer) -> None:
    fault = ServerClockSkew(faketime_postgres.control_file, -1500)
    fault.start()
    assert faketime_postgres.control_file.read_text().strip() == "-1.5"
    record = fault.undo_record()
    assert record == {"kind": "faketime-reset", "control_file": str(faketime_postgres.control_file)}
    heal_record(record)
    assert faketime_postgres.control_file.read_text().strip() == "+0"
    fault.heal()


def test_redis_under_faketime_serves_leases_and_follows_the_control_file(faketime_redis: FaketimeRedisServer) -> None:
    client = redis.Redis(host="127.0.0.1", port=faketime_redis.port, socket_timeout=5.0)

    def server_ahead_ms() -> float:
        seconds, micros = client.time()
        return seconds * 1000.0 + micros / 1000.0 - _real_ms()

    host_step = _host_clock_step()
    try:
        assert near(server_ahead_ms(), 0.0, 1000.0)
        faketime_redis.skew(HOUR_MS)
        assert near(server_ahead_ms(), HOUR_MS, 1000.0)
        spec = TargetSpec("redis", TargetConfig(url=faketime_redis.url, ttl_ms=TTL_MS, timeout_s=5.0))
        t = spec.make()
        try:
            t.setup()
            t.add_node("clock/redis")
            assert isinstance(t.try_claim("clock/redis", "w1"), Lease)
        finally:
            t.close()
        faketime_redis.skew(0)
        assert near(server_ahead_ms(), 0.0, 1000.0)
        assert host_step() < 500.0
    finally:
        client.close()
