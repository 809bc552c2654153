"""``leasecheck run`` end to end, on real servers, under real faults.

Each test runs the real runner (worker processes, recorder, nemesis, final
reads, checker) for a few seconds with a fixed seed and a 300 ms ttl, then
judges what it left behind: the verdict, the history itself (a workload that
never contends, never takes a lease over and never has a stale op refused
cannot pass), the store directory, and the processes — every fault healed,
nothing left alive or stopped, on a normal end, an exception, Ctrl-C, and a
harness killed outright.

Postgres and Redis runs without store faults share the session servers of
``tests/support/stores.py`` (each run gets a fresh database: runs name their nodes
``run-N/node-I``, so two runs on one database would see each other's nodes);
runs with ``pause-store`` / ``kill-store`` let the runner start its own server,
since only a server it owns can be paused or killed.

Not tested here: the network, clock and Docker faults, and so the broken variants
only they expose (``postgres-client-clock``: worker clock skew); the detection matrix
(tests/detection/test_detection.py) runs those. Which variants run here, with what, is
generated from their ``exposed_by`` in tests/support/variants.py.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
import redis
from click.testing import CliRunner
from harness import ProcessWatch, check_cli, describe, harness_child, history_in, is_gone, wait_for_paused_worker, wait_gone
from psycopg import sql
from variants import END_TO_END, VariantRun, variant_params

from leasecheck.cli import main
from leasecheck.histories import read_history
from leasecheck.histories.format import Op
from leasecheck.run.runner import Run, RunOptions, RunResult, run
from leasecheck.servers.base import LocalServer
from leasecheck.targets.base import Target
from leasecheck.targets.registry import load

TTL_MS = 300
INTERVAL_S = 1.0

# ---------------------------------------------------------------- stores


_REDIS_DBS = itertools.cycle(range(8, 16))  # db 0 is the conformance tests'; ours are flushed before use


@pytest.fixture
def fresh_url(request: pytest.FixtureRequest) -> Iterator[Callable[[str], str | None]]:
    """``fresh_url(target)``: an empty store on the session server the target needs (None for SQLite:
    the runner makes a fresh file in its run directory)."""
    dropped: list[tuple[str, str]] = []

    def get(target: str) -> str | None:
        kind = load(target).store
        if kind == "sqlite":
            return None
        server: LocalServer = request.getfixturevalue(f"{kind}_server")
        if kind == "postgres":
            name = f"run_{uuid.uuid4().hex[:12]}"
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            dropped.append((server.url, name))
            return server.url.rsplit("/", 1)[0] + "/" + name
        url = f"redis://127.0.0.1:{server.port}/{next(_REDIS_DBS)}"
        client = redis.Redis.from_url(url)
        try:
            client.flushdb()
        finally:
            client.close()
        return url

    yield get
    for url, name in dropped:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        except psycopg.Error:
            pass


def options(tmp_path: Path, target: str, url: str | None = None, **kw: Any) -> RunOptions:
    kw.setdefault("ttl_ms", TTL_MS)
    kw.setdefault("nemesis_interval", INTERVAL_S)
    return RunOptions(target=target, url=url, store=str(tmp_path / "store"), **kw)


# ---------------------------------------------------------------- histories


def contention(history: Path) -> dict[str, int]:
    """What the workload made happen, from the history alone.

    ``held``: claims refused because another lease was live. ``takeovers``:
    a node's ok claim followed (by epoch) by a larger-epoch ok claim with no
    release of the first in between — the first lease expired and was taken
    over. ``stale``: ops the store refused because a newer epoch existed.
    """
    _, ops, _ = read_history(history)
    claims: dict[str, list[Op]] = defaultdict(list)
    released: dict[tuple[str, Any], list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "claim" and op.type == "ok":
            claims[op.node].append(op)
        elif op.f == "release" and op.type in ("ok", "info"):
            released[(op.node, op.epoch)].append(op)
    takeovers = 0
    for node, granted in claims.items():
        granted.sort(key=lambda o: o.epoch)
        for old, new in itertools.pairwise(granted):
            gave_back = any(r.invoke_time < new.complete_time for r in released[(node, old.epoch)])  # type: ignore[operator]
            if new.epoch > old.epoch and not gave_back:
                takeovers += 1
    return {
        "ops": len(ops),
        "held": sum(op.f == "claim" and op.type == "fail" and op.result.get("reason") == "held" for op in ops),
        "takeovers": takeovers,
        "stale": sum(op.type == "fail" and op.result.get("reason") == "stale" for op in ops),
    }


def assert_store_directory(result: RunResult, opts: RunOptions) -> None:
    """history.jsonl, results.json, test.json and leasecheck.log, and a re-check agrees."""
    d = result.run_dir
    assert d.parent.parent == Path(opts.store) and d.parent.name == opts.target.replace(":", "_")
    for name in ("history.jsonl", "results.json", "test.json", "leasecheck.log"):
        assert (d / name).is_file(), f"{name} missing from {d}: {sorted(p.name for p in d.iterdir())}"
    results = json.loads((d / "results.json").read_text())
    assert results["valid"] == result.verdict.valid and results["seed"] == opts.seed
    test = json.loads((d / "test.json").read_text())
    assert test["seed"] == opts.seed
    assert test["options"]["target"] == opts.target and test["options"]["ttl_ms"] == opts.ttl_ms
    assert tuple(test["options"]["nemesis"]) == opts.nemesis and test["options"]["seed"] == opts.seed
    assert "seed" in (d / "leasecheck.log").read_text()
    assert (Path(opts.store) / "latest").resolve() == d.resolve()
    code, verdict, _ = check_cli(d)
    assert code == result.verdict.exit_code
    assert verdict["valid"] == results["valid"] and verdict["anomalies"] == results["anomalies"]


def nemesis_events(run_dir: Path) -> Counter[str]:
    _, _, reader = read_history(run_dir / "history.jsonl")
    return Counter(str(e.f) for e in reader.nemesis)


# ---------------------------------------------------------------- 1. reference backends


REFERENCE = [
    # (target, nemesis, seed, time limit); the store faults need a server the runner owns
    pytest.param("sqlite", ("pause", "kill"), 1, 10.0, id="sqlite-pause-kill"),
    pytest.param("postgres", ("pause", "kill", "pause-store"), 1, 10.0, id="postgres-pause-kill-pause_store"),
    pytest.param("redis", ("pause", "kill", "kill-store"), 1, 10.0, id="redis-pause-kill-kill_store"),
]


#: the evidence a reference run must add up to before it counts as having tested something
ENOUGH = {"held": 10, "takeovers": 3, "stale": 2}
#: runs (each judged on its own) a test may take to gather it: a loaded machine does less per second
MAX_ATTEMPTS = 3


@pytest.mark.parametrize(("target", "nemesis", "seed", "seconds"), REFERENCE)
def test_reference_backend_is_valid_under_faults_with_real_contention(
    tmp_path: Path, target: str, nemesis: tuple[str, ...], seed: int, seconds: float
) -> None:
    """Every run is valid and leaves nothing behind; together they show real contention.

    The evidence is gathered, not timed: on a busy machine a 10 s run may take over
    fewer leases, so the test runs again (another seed, up to MAX_ATTEMPTS) until the
    sums reach ENOUGH, and every one of those runs must be valid on its own.
    """
    seen: Counter[str] = Counter()
    events: Counter[str] = Counter()
    for attempt in range(MAX_ATTEMPTS):
        opts = options(tmp_path / f"attempt-{attempt}", target, nemesis=nemesis, seed=seed + 1000 * attempt,
                       time_limit=seconds, evidence_wait_s=60.0)
        watch = ProcessWatch()
        result = run(opts, watch)

        # every fault healed, every process gone: a normal end leaves nothing behind
        watch.assert_clean()
        assert "pause" in watch.faults and "python" in " ".join(watch.saw_stopped), "no worker was seen paused"
        assert result.verdict.valid is True, [a.to_json() for a in result.verdict.anomalies[:5]]
        for fault in ("pause-store", "kill-store"):
            if fault in nemesis:
                _, _, reader = read_history(result.run_dir / "history.jsonl")
                f = fault.split("-")[0]
                assert any(e.f == f and e.value.get("victims") == ["store"] for e in reader.nemesis), f"no {fault} happened"
        assert_store_directory(result, opts)
        seen.update(contention(result.run_dir / "history.jsonl"))
        events.update(nemesis_events(result.run_dir))
        if all(seen[k] >= n for k, n in ENOUGH.items()) and events["pause"] >= 2:
            break
    assert all(seen[k] >= n for k, n in ENOUGH.items()), (seen, f"after {attempt + 1} runs")
    assert events["pause"] >= 2 and events["resume"] == events["pause"], events
    assert events["kill"] >= 1 and events["start"] >= events["kill"], events


# ---------------------------------------------------------------- 2. broken backends


#: each broken variant exposed by a process fault or duplicate delivery (tests/support/variants.py)
BROKEN = variant_params(END_TO_END)


@pytest.mark.parametrize("v", BROKEN)
def test_broken_backend_is_caught_by_the_fault_that_exposes_it(
    tmp_path: Path, fresh_url: Callable[[str], str | None], v: VariantRun
) -> None:
    opts = options(
        tmp_path, v.variant, fresh_url(v.variant), nemesis=v.nemesis, dup_rate=v.dup_rate, seed=v.seed, time_limit=v.seconds,
        fail_fast=True,
    )
    result = run(opts)

    kinds = Counter(a.kind for a in result.verdict.anomalies)
    assert result.verdict.valid is False, f"{v.variant} passed: the fault did not expose {v.bug!r}"
    assert kinds.keys() & set(v.expected), f"expected one of {v.expected}, found {dict(kinds)}"
    assert result.verdict.exit_code == 1
    assert_store_directory(result, opts)


# ---------------------------------------------------------------- 3. harness killed mid-run


KILLED = [
    pytest.param("sqlite", "pause", id="sqlite-paused-worker"),
    pytest.param("redis", "pause-store", id="redis-paused-server"),
    pytest.param("postgres", "pause-store", id="postgres-paused-server"),
]


@pytest.mark.parametrize(("target", "nemesis"), KILLED)
def test_harness_killed_mid_run_leaves_a_checkable_history_and_no_process(tmp_path: Path, target: str, nemesis: str) -> None:
    store = tmp_path / "store"
    with harness_child(
        "run", "--target", target, "--nemesis", nemesis, "--nemesis-interval", "0.5", "--time-limit", "120",
        "--ttl", str(TTL_MS), "--seed", "5", "--store", str(store), "--json",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    ) as h:
        history, h.kids = wait_for_paused_worker(h.proc, store, events=300, store_pause=nemesis == "pause-store")
        assert len(h.kids) >= 5, describe(h.kids)
        h.proc.send_signal(signal.SIGKILL)
        h.proc.wait(10)
        alive = wait_gone(h.kids, 8.0)
        assert not alive, f"left behind by the killed harness: {describe(alive)}"

    code, verdict, err = check_cli(history.parent)
    # recovered from the worker logs, every event is there, but the harness never finished the history: never valid
    assert code == 2 and verdict["valid"] == "unknown", (verdict, err)
    assert verdict["reason"] == verdict["cut"] and "its writer never finished it" in verdict["cut"], verdict
    assert verdict["stats"]["events"] >= 300
    text = " ".join(err.split())  # rich wraps long lines, paths included
    for warning in filter(None, (w.strip() for w in text.split("warning:"))):  # only what a cut-short run may have
        assert "never completed" in warning or "truncated last line" in warning or "recovered" in warning, err


# ---------------------------------------------------------------- 4. faults healed on every exit


class Injected(RuntimeError):
    """The error a test makes the runner hit mid-run."""


def test_exception_mid_run_heals_every_fault_and_stops_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception in the runner's loop while a worker or the store is paused: the run raises,
    and nothing is left stopped or alive — the server it started included."""
    watch = ProcessWatch()
    servers: set[int] = set()
    from leasecheck.run import runner as runner_module

    original = runner_module.progress_of

    def snapshot(self: Run, started: float) -> dict[str, Any]:
        s = original(self, started)
        if self.env is not None and self.env.server is not None and self.env.server.pid is not None:
            servers.add(self.env.server.pid)
        if watch.snapshots > 5 and {"pause", "pause-store"} & set(s["faults"]) and watch.saw_stopped:
            raise Injected(f"injected while {s['faults']} active")
        return s

    monkeypatch.setattr(runner_module, "progress_of", snapshot)
    opts = options(tmp_path, "redis", nemesis=("pause", "pause-store"), nemesis_interval=0.5, seed=2, time_limit=60.0)
    started = time.monotonic()
    with pytest.raises(Injected):
        run(opts, watch)
    assert time.monotonic() - started < 45, "the run did not stop at the exception"
    assert servers, "the runner never reported its server"
    watch.assert_clean()
    assert all(not psutil.pid_exists(pid) or is_gone(psutil.Process(pid)) for pid in servers)
    run_dir = history_in(Path(opts.store))
    assert run_dir is not None
    code, verdict, _ = check_cli(run_dir.parent)
    # what was recorded before the error is still a history, but the failed harness abandoned it (no history-end):
    # a cut history is never valid (3a694d4), and the reason names the line it ends at
    assert code == 2 and verdict["valid"] == "unknown", verdict
    assert verdict["reason"] == verdict["cut"] and "its writer never finished it" in verdict["cut"], verdict
    assert verdict["stats"]["events"] > 0, verdict


def test_exception_before_the_workers_start_is_the_one_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def spawn(self: Run) -> Any:
        raise Injected("cannot spawn")

    monkeypatch.setattr(Run, "_spawn", spawn)
    with pytest.raises(Injected):
        run(options(tmp_path, "sqlite", seed=1, time_limit=5.0))


def test_ctrl_c_heals_checks_and_exits_with_the_verdict(tmp_path: Path) -> None:
    """SIGINT to the harness's process group (a terminal's Ctrl-C) while a worker and the store
    may be paused: it heals, checks what was recorded, exits 130 (an interrupted run never
    exits 0), says so in results.json and leaves nothing behind."""
    store = tmp_path / "store"
    with harness_child(
        "run", "--target", "redis", "--nemesis", "pause,pause-store", "--nemesis-interval", "0.5",
        "--time-limit", "120", "--ttl", str(TTL_MS), "--seed", "5", "--store", str(store),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    ) as h:
        history, h.kids = wait_for_paused_worker(h.proc, store, events=200)
        started = time.monotonic()
        os.killpg(h.proc.pid, signal.SIGINT)
        out, err = h.proc.communicate(timeout=60)
        assert time.monotonic() - started < 30
        assert h.proc.returncode == 130, (out[-2000:], err[-2000:])
        assert b"interrupted" in err and b"verdict" in out and b"Traceback" not in err
        alive = wait_gone(h.kids, 15.0)
        assert not alive, f"left behind after Ctrl-C: {describe(alive)}"
    results = json.loads((history.parent / "results.json").read_text())
    # no anomaly; the run verdict may be unknown (cut short, it may not have tested enough)
    assert results["valid"] in (True, "unknown") and results["seed"] == 5 and results["interrupted"] == "SIGINT"
    events = nemesis_events(history.parent)
    assert events["pause"] == events["resume"] >= 1, events


# ---------------------------------------------------------------- 5. exit codes 3 and 4


def run_cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["run", *args], catch_exceptions=False)
    return r.exit_code, r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--nemesis", "pause,partition-everything"), "unknown nemesis partition-everything"),
        (("--target", "no-such-backend"), "unknown target 'no-such-backend'"),
        (("--target", "sqlite", "--nemesis", "pause-store"), "sqlite has no store server"),
        (("--target", "sqlite-ttl-only", "--nemesis", "pause,kill-store"), "has no store server"),
        (("--ttl", "5"), "--ttl"),
        (("--concurrency", "0"), "--concurrency"),
    ],
    ids=["unknown-nemesis", "unknown-target", "pause-store-on-sqlite", "kill-store-on-sqlite", "ttl-too-small", "no-workers"],
)
def test_bad_options_exit_3_before_anything_starts(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    store = tmp_path / "store"
    code, err = run_cli(*args, "--time-limit", "5", "--store", str(store))
    assert code == 3, err
    assert message in err
    assert not store.exists() or not any(store.rglob("history.jsonl"))


class OwnStoreTarget(Target):
    """A third-party backend that brings its own store (``store = None``): it needs --url."""

    name = "own-store"

    def setup(self) -> None: ...
    def add_node(self, node: str) -> None: ...
    def try_claim(self, node, owner): ...  # type: ignore[no-untyped-def]
    def renew(self, lease): ...  # type: ignore[no-untyped-def]
    def effect(self, lease, payload): ...  # type: ignore[no-untyped-def]
    def commit(self, lease, result): ...  # type: ignore[no-untyped-def]
    def release(self, lease): ...  # type: ignore[no-untyped-def]
    def read(self, node): ...  # type: ignore[no-untyped-def]


def test_a_store_we_cannot_provide_is_a_usage_error_naming_url(tmp_path: Path) -> None:
    """``store = None`` without --url: the user must pass the store's address (exit 3, before anything starts)."""
    code, err = run_cli("--target", f"{__name__}:OwnStoreTarget", "--nemesis", "none", "--time-limit", "5", "--store", str(tmp_path))
    assert code == 3, err
    assert "--url" in err


@pytest.mark.parametrize(
    ("target", "url"),
    [
        pytest.param("postgres", "postgresql://nobody@127.0.0.1:1/x", id="postgres"),
        pytest.param("redis", "redis://127.0.0.1:1/0", id="redis"),
    ],
)
def test_an_unreachable_url_exits_4_with_a_clear_message(tmp_path: Path, target: str, url: str) -> None:
    code, err = run_cli("--target", target, "--url", url, "--nemesis", "none", "--time-limit", "5", "--store", str(tmp_path))
    assert code == 4, err
    assert "the environment failed" in err and "127.0.0.1" in err


# ---------------------------------------------------------------- the store down; a worker killed mid-handshake


def test_postgres_killed_and_restarted_again_and_again_stays_valid(tmp_path: Path) -> None:
    """kill-store every ~0.5 s: workers and the queue's producer wait the store out; nothing is left behind."""
    opts = options(tmp_path, "postgres", nemesis=("kill-store",), nemesis_interval=0.5, seed=1, time_limit=8.0)
    watch = ProcessWatch()
    try:
        result = run(opts, watch)
    finally:
        watch.assert_clean()
    assert result.verdict.valid is True, [a.to_json() for a in result.verdict.anomalies[:5]]
    events = nemesis_events(result.run_dir)
    assert events["kill"] >= 3 and events["start"] >= events["kill"], events
    assert contention(result.run_dir / "history.jsonl")["ops"] >= 200


def test_store_unreachable_while_adding_nodes_does_not_abort_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deterministic form of the kill-store bug: the store is unreachable for one add_nodes call."""
    from leasecheck.targets.base import Unavailable
    from leasecheck.targets.sqlite_lease import SqliteLease

    calls = []
    original = SqliteLease.add_nodes

    def add_nodes(self: SqliteLease, nodes: list[str]) -> None:
        calls.append(len(nodes))
        if len(calls) == 2:
            raise Unavailable("store down for a moment")
        original(self, nodes)

    monkeypatch.setattr(SqliteLease, "add_nodes", add_nodes)
    result = run(options(tmp_path, "sqlite", nemesis=(), seed=1, time_limit=4.0))
    assert result.verdict.valid is True and len(calls) >= 3


def test_recorder_survives_a_worker_killed_between_invoke_and_ack(tmp_path: Path) -> None:
    """A worker SIGKILLed right after sending an invoke: the recorder must record it as died, not crash."""
    import random
    from multiprocessing import Pipe

    from leasecheck.histories import Header, HistoryWriter
    from leasecheck.run.deliveries import Deliveries
    from leasecheck.run.recorder import Recorder

    died = []
    writer = HistoryWriter(tmp_path / "history.jsonl", Header(1000, 10, {}))
    recorder = Recorder(writer, Deliveries(random.Random(1), 5, 0.0, 1.0, lambda nodes: None), died.append)
    ours, worker = Pipe()
    recorder.add(ours, 0, None)
    worker.send(("invoke", "claim", "run-1/node-0", {"owner": "w0"}, writer.now(), True))  # a racing claim: waits
    worker.close()  # the worker is killed before the hub's acknowledgement
    recorder._handle(ours)
    assert len(died) == 1
    recorder.merge.drain()
    writer.close()
    _, ops, _ = read_history(tmp_path / "history.jsonl")
    assert [(op.f, op.type) for op in ops] == [("claim", "info")]
