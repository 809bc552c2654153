"""The run verdict, the workers-ready barrier, interrupts and temp folders (issue 9, items 1-2).

A CI gate must never pass a run that tested nothing, and a cancelled run must
say so. Each test here is one "Seen on main" bullet: the pure run verdict on
small histories, then real ``python -m leasecheck run`` subprocesses with real
signals, each with a private TMPDIR so that anything left in the temp folder
shows. Tests synchronise on the run's own files (a line in leasecheck.log, the
history growing), never on sleeps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from paths import REPO

from leasecheck.checker import Verdict
from leasecheck.checker.verdict import Validity
from leasecheck.histories import read_history
from leasecheck.nemesis.catalogue import lookup
from leasecheck.run.options import RunResult
from leasecheck.rundir.files import remove_leftovers
from leasecheck.verdict.run_verdict import evidence_of, history_coverage, run_verdict

RESULT_KEYS = {"valid", "reason", "target", "nemesis", "seed", "run_dir", "interrupted"}

# ---------------------------------------------------------------- the pure run verdict


class History:
    """A tiny history built op by op (one process per op, so ops never overlap wrongly)."""

    def __init__(self) -> None:
        self.lines = [msgspec.json.encode({"format": "leasecheck-history", "version": 1, "ttl_ms": 100, "clock_uncertainty_ms": 1})]
        self.process = 0
        #: added to every later event's time (ns): lets a lease expire
        self.elapsed = 0

    def _event(self, **ev: Any) -> None:
        self.lines.append(msgspec.json.encode({"index": len(self.lines) - 1, "time": self.elapsed + len(self.lines), **ev}))

    def op(self, f: str, typ: str, node: str = "n", value: dict[str, Any] | None = None, result: dict[str, Any] | None = None) -> None:
        self.process += 1
        self._event(process=self.process, type="invoke", f=f, node=node, value=value or {})
        self._event(process=self.process, type=typ, f=f, node=node, value=result or {})

    def nemesis(self, f: str, value: dict[str, Any]) -> None:
        self._event(process="nemesis", type="info", f=f, value=value)

    def protocol(self) -> History:
        """A claim, renew, effect and commit, and a claim refused held."""
        self.op("claim", "ok", result={"epoch": 1})
        self.op("claim", "fail", result={"reason": "held"})
        self.op("renew", "ok", value={"epoch": 1})
        self.op("effect", "ok", value={"epoch": 1, "payload": "p"})
        self.op("commit", "ok", value={"epoch": 1, "result": "r"})
        return self

    def expiry(self) -> History:
        """A lease left to expire (its worker paused or killed), then claimed again: a claim-after-expiry."""
        self.op("claim", "ok", node="m", result={"epoch": 1})
        self.elapsed += 200_000_000  # past ttl + uncertainty
        self.op("claim", "ok", node="m", result={"epoch": 2})
        return self


def verdict_of(h: History, nemesis: tuple[str, ...] = (), checked: Validity = True) -> tuple[Validity, str | None]:
    return run_verdict(checked, evidence_of(h.lines), lookup(nemesis), history_coverage(h.lines)[1])


def test_an_empty_history_is_unknown_naming_everything_missing() -> None:
    valid, reason = verdict_of(History(), ("pause",))
    assert valid == "unknown"
    assert reason is not None
    for missing in ("no ok claim", "no ok renew", "no ok effect", "no ok commit", "no contended claim", "pause never started"):
        assert missing in reason


def test_a_run_that_tested_the_protocol_is_valid() -> None:
    assert verdict_of(History().protocol()) == (True, None)


def test_without_contention_the_run_is_unknown() -> None:
    h = History()
    h.op("claim", "ok", result={"epoch": 1})
    h.op("renew", "ok", value={"epoch": 1})
    h.op("effect", "ok", value={"epoch": 1})
    h.op("release", "ok", value={"epoch": 1})
    h.op("claim", "ok", result={"epoch": 2})  # after a release: no contention
    h.op("commit", "ok", value={"epoch": 2})
    valid, reason = verdict_of(h)
    assert valid == "unknown" and reason is not None and "no contended claim" in reason


def test_a_claim_granted_over_a_live_lease_is_contention() -> None:
    h = History()
    h.op("claim", "ok", result={"epoch": 1})
    h.op("renew", "ok", value={"epoch": 1})
    h.op("effect", "ok", value={"epoch": 1})
    h.op("claim", "ok", result={"epoch": 2})  # the first lease expired and was taken over
    h.op("commit", "ok", value={"epoch": 2})
    assert verdict_of(h) == (True, None)


def test_an_anomaly_wins_over_a_vacuous_run() -> None:
    assert verdict_of(History(), ("pause",), checked=False) == (False, None)


def test_timing_findings_after_a_step_of_the_hosts_wall_clock_are_unknown_and_the_rest_stay_proven() -> None:
    """A virtual machine restored from a snapshot stepped this machine's wall clock mid-run: Postgres and Redis, which
    judge leases by it, refused renews "expired" 335 ms after granting them (a bench, 2026-12-03)."""
    h = History().protocol()
    h.nemesis("host-clock-step", {"delta_ms": 812.5})
    ev, cov = evidence_of(h.lines), history_coverage(h.lines)[1]
    valid, reason = run_verdict(False, ev, (), cov, found=["premature-expiry", "overlapping-lease"])
    assert valid == "unknown" and reason is not None
    assert "wall clock stepped during the run (+812.5 ms" in reason and "overlapping-lease, premature-expiry" in reason
    assert run_verdict(False, ev, (), cov, found=["premature-expiry", "stale-commit"]) == (False, None)  # proven anyway
    calm = History().protocol()
    assert run_verdict(False, evidence_of(calm.lines), (), history_coverage(calm.lines)[1], found=["premature-expiry"]) == (False, None)


def test_the_clock_watch_records_a_step_of_the_wall_clock_and_not_a_loaded_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from leasecheck.nemesis import host_clock

    recorded: list[tuple[str, Any]] = []
    stepped = threading.Event()
    real = time.time_ns
    monkeypatch.setattr(host_clock.time, "time_ns", lambda: real() + (750_000_000 if stepped.is_set() else 0))
    watch = host_clock.ClockWatch.started(lambda f, v: recorded.append((f, v)), threshold_ms=10)
    try:
        time.sleep(0.2)  # a busy test machine schedules the watch late: no step for that
        assert recorded == []
        stepped.set()
        deadline = time.monotonic() + 10
        while not recorded and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watch.stop()
    assert len(recorded) == 1 and recorded[0][0] == "host-clock-step"
    assert 749 < recorded[0][1]["delta_ms"] < 751


def test_a_search_out_of_budget_stays_unknown_with_a_reason() -> None:
    valid, reason = verdict_of(History().protocol(), checked="unknown")
    assert valid == "unknown" and reason is not None and "budget" in reason


def _between_ops(h: History, fault: str, start: str, heal: str, value: dict[str, Any]) -> History:
    """``fault`` started and healed between two ops (no op in flight), as the newcomer's latency from 16.88 to 18.64 s."""
    h.nemesis(start, {"fault": fault, **value})
    h.nemesis(heal, {"fault": fault, **value})
    return h


UNMET = "never met an op"


def test_a_fault_that_no_op_of_its_victims_met_did_not_test_anything() -> None:
    """Seen by a newcomer: a latency fault overlapped no op of any worker, and the run said valid."""
    h = _between_ops(History().protocol(), "latency", "latency", "heal", {"victims": [1, 2, 3], "scope": "all"})
    valid, reason = verdict_of(h, ("latency",))
    assert valid == "unknown" and reason is not None and f"latency {UNMET}" in reason, reason


def test_a_network_fault_met_by_an_op_of_its_victim_counts_and_one_of_another_process_does_not() -> None:
    h = History().protocol()
    h.nemesis("latency", {"fault": "latency", "victims": [7], "scope": "some"})
    h.op("read", "ok", result={"status": "SUCCEEDED", "epoch": 1})  # process 6: not a victim
    h.nemesis("heal", {"fault": "latency", "victims": [7]})
    assert f"latency {UNMET}" in (verdict_of(h, ("latency",))[1] or "")
    h.nemesis("latency", {"fault": "latency", "victims": [7], "scope": "some"})
    h.op("read", "ok", result={"status": "SUCCEEDED", "epoch": 1})  # process 7: the victim, during the second one
    h.nemesis("heal", {"fault": "latency", "victims": [7]})
    assert verdict_of(h, ("latency",)) == (True, None)


def test_a_store_fault_counts_when_any_op_is_in_flight_at_its_start() -> None:
    h = History().protocol()
    h._event(process=9, type="invoke", f="read", node="n", value={})  # in flight when the store stops
    h.nemesis("pause", {"fault": "pause-store", "victims": ["store"]})
    h.nemesis("resume", {"fault": "pause-store", "victims": ["store"]})
    h._event(process=9, type="ok", f="read", node="n", value={"status": "SUCCEEDED", "epoch": 1})
    assert UNMET not in (verdict_of(h, ("pause-store",))[1] or "")
    idle = _between_ops(History().protocol(), "pause-store", "pause", "resume", {"victims": ["store"]})
    assert f"pause-store {UNMET}" in (verdict_of(idle, ("pause-store",))[1] or "")


def test_a_worker_fault_on_a_lease_holder_counts_without_an_op_in_flight() -> None:
    """The seed's GC pause: the holder is paused mid-execution, between its ops; that is what pause is for."""
    h = History().protocol()  # process 1 holds epoch 1 on n (its claim); the commit was another process's
    h.nemesis("kill", {"fault": "kill", "victims": [1]})
    h.nemesis("start", {"victims": [10], "replaces": 1})
    assert UNMET not in (verdict_of(h, ("kill",))[1] or "")
    idle = History().protocol()
    idle.nemesis("kill", {"fault": "kill", "victims": [4]})  # process 4 wrote an effect and holds nothing
    idle.nemesis("start", {"victims": [10], "replaces": 4})
    idle.op("read", "ok", result={"status": "SUCCEEDED", "epoch": 1})  # after the heal: does not count
    assert f"kill {UNMET}" in (verdict_of(idle, ("kill",))[1] or "")


def test_a_broker_fault_in_a_queue_run_counts_on_an_execution_under_way_without_an_op_in_flight() -> None:
    """A job queue's execution talks to its broker through the library, outside the recorded ops: a power cut of the
    broker while an execution holds its job met the run (in a lease run only an op in flight does)."""
    for queue in (True, False):
        h = History()
        if queue:
            h.lines[0] = msgspec.json.encode({**msgspec.json.decode(h.lines[0]), "lease_expiry": "queue"})
        h.protocol()  # process 1 holds epoch 1 on n (its claim); nothing is in flight below
        h.nemesis("kill", {"fault": "power-loss", "victims": ["store"], "dropped": {"bytes": 0, "files": 0, "entries": 0}})
        h.nemesis("start", {"fault": "power-loss", "victims": ["store"]})
        evidence = evidence_of(h.lines)
        assert evidence.queue is queue
        assert evidence.unexercised(lookup(("power-loss",))) == ([] if queue else [f"power-loss {UNMET} (no op of a process it"
                                                                                   f" hit was in flight while it lasted)"])


def test_every_requested_fault_must_start_and_heal() -> None:
    h = History().protocol()
    h.nemesis("pause", {"fault": "pause", "victims": [1]})
    h.nemesis("resume", {"fault": "pause", "victims": [1]})
    h.nemesis("pause", {"fault": "pause-store", "victims": ["store"]})  # never resumed
    valid, reason = verdict_of(h, ("pause", "pause-store", "latency"))
    assert valid == "unknown" and reason is not None
    assert "pause-store never healed" in reason and "latency never started" in reason
    assert "pause never" not in reason.replace("pause-store", "")


def test_a_kill_is_healed_by_the_start_of_its_victims_replacement() -> None:
    """A killed worker is replaced, not healed: the catalogue's heal event for ``kill`` is ``start``,
    and only a replacement of a killed process counts (not one of a worker that crashed by itself)."""
    h = History().protocol().expiry()
    h.nemesis("kill", {"fault": "kill", "victims": [6], "pid": 1234})  # process 6 holds epoch 1 of node m
    h.nemesis("start", {"victims": [9], "replaces": 7})  # a crash's replacement
    assert verdict_of(h, ("kill",))[1] == "the run did not test enough: kill never healed"
    h.nemesis("start", {"victims": [10], "replaces": 6})
    assert verdict_of(h, ("kill",)) == (True, None)


def test_histories_without_fault_names_are_read_by_event_name() -> None:
    h = History().protocol().expiry()
    h.nemesis("pause", {"victims": [1]})
    h.nemesis("resume", {"victims": [1]})
    assert verdict_of(h, ("pause",)) == (True, None)


def test_a_fault_whose_situation_never_happened_makes_the_run_unknown() -> None:
    """Issue 10: a run that asked for a fault but never reached what the fault exists for tested nothing of it."""
    h = History().protocol()
    h._event(process=9, type="invoke", f="read", node="n", value={})  # an op the paused store met
    h.nemesis("pause", {"fault": "pause-store", "victims": ["store"]})
    h.nemesis("resume", {"fault": "pause-store", "victims": ["store"]})
    h._event(process=9, type="ok", f="read", node="n", value={"status": "SUCCEEDED", "epoch": 1})
    h.nemesis("clock-skew", {"fault": "clock-bump", "victims": [1]})
    h.nemesis("clock-reset", {"fault": "clock-bump", "victims": [1]})
    valid, reason = verdict_of(h, ("pause-store", "clock-bump"))
    assert valid == "unknown"
    assert reason == ("the run did not test enough: pause-store: lease-expires-during-store-fault never happened; "
                      "clock-bump: lease-held-by-skewed-worker never happened")
    assert verdict_of(h, ("pause-store", "clock-bump"), checked=False) == (False, None)  # an anomaly still wins
    assert verdict_of(h, ()) == (True, None)  # the workload's own situations never make a run unknown


def test_a_required_situation_that_never_happened_makes_the_run_unknown() -> None:
    """``--require``: a situation the caller needs the run to reach counts like a fault's own (here: never reached)."""
    h = History().protocol().expiry()
    cov = history_coverage(h.lines)[1]
    assert run_verdict(True, evidence_of(h.lines), (), cov, ("claim-after-expiry",)) == (True, None)
    valid, reason = run_verdict(True, evidence_of(h.lines), (), cov, ("claim-after-expiry", "claim-race-ready"))
    assert (valid, reason) == ("unknown", "the run did not test enough: --require: claim-race-ready never happened")
    assert run_verdict(False, evidence_of(h.lines), (), cov, ("claim-race-ready",)) == (False, None)


def test_an_interrupted_run_never_exits_0_and_an_anomaly_still_exits_1() -> None:
    def result(valid: bool | str, interrupted: str | None) -> RunResult:
        return RunResult(Path("."), 1, Verdict(valid, [], {}), {}, None, interrupted)

    assert result(True, None).exit_code == 0
    assert result(True, "SIGINT").exit_code == 130
    assert result("unknown", "SIGTERM").exit_code == 143
    assert result(False, "SIGTERM").exit_code == 1


# ---------------------------------------------------------------- real runs


@pytest.fixture(autouse=True)
def _private_tmps() -> Iterator[None]:
    yield
    for tmp in _TMPS.values():
        shutil.rmtree(tmp, ignore_errors=True)
    _TMPS.clear()


_TMPS: dict[Path, Path] = {}


def private_tmp(tmp_path: Path) -> Path:
    """The run's TMPDIR: empty, private to the test, reachable by the postgres user (pytest's tmp_path is 0700)."""
    if tmp_path not in _TMPS:
        _TMPS[tmp_path] = Path(tempfile.mkdtemp(prefix="leasecheck-test-tmp-"))
        os.chmod(_TMPS[tmp_path], 0o755)
    return _TMPS[tmp_path]


def leasecheck(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    """``python -m leasecheck run ARGS`` in a session of its own, with a private, empty TMPDIR."""
    env = {**os.environ, "TMPDIR": str(private_tmp(tmp_path))}
    return subprocess.Popen(
        [sys.executable, "-m", "leasecheck", "run", "--store", str(tmp_path / "store"), *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )


def finish(proc: subprocess.Popen[bytes], timeout: float = 180) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the run did not end within {timeout:g} s: {err.decode()[-2000:]}") from None
    return proc.returncode, out.decode(), err.decode()


def wait_for(proc: subprocess.Popen[bytes] | None, what: str, ready: Callable[[], bool], timeout: float = 120) -> None:
    """Until ``ready()``: the run's own files tell (polled, since there is no file event to wait on)."""
    end = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run exited ({proc.returncode}) before {what}: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        if time.monotonic() > end:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(0.02)


def run_dir(tmp_path: Path) -> Path | None:
    found = sorted((tmp_path / "store").glob("*/*/leasecheck.log"))
    return found[0].parent if found else None


def log_says(tmp_path: Path, text: str) -> Callable[[], bool]:
    def ready() -> bool:
        d = run_dir(tmp_path)
        return d is not None and text in (d / "leasecheck.log").read_text()
    return ready


def history_has(tmp_path: Path, events: int, nemesis: str | None = None) -> Callable[[], bool]:
    def ready() -> bool:
        d = run_dir(tmp_path)
        if d is None or not (d / "history.jsonl").exists():
            return False
        data = (d / "history.jsonl").read_bytes()
        return data.count(b"\n") > events and (nemesis is None or f'"f":"{nemesis}"'.encode() in data)
    return ready


def results(tmp_path: Path) -> dict[str, Any]:
    d = run_dir(tmp_path)
    assert d is not None
    obj: dict[str, Any] = json.loads((d / "results.json").read_text())
    assert obj.keys() >= RESULT_KEYS, obj.keys()
    assert obj["run_dir"] == str(d)
    return obj


def assert_clean(tmp_path: Path, err: str) -> None:
    """No traceback on stderr, nothing left in the temp folder, no clocks or server data left in the run."""
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert sorted(p.name for p in private_tmp(tmp_path).iterdir()) == []
    d = run_dir(tmp_path)
    assert d is not None
    assert not (d / "clocks").exists() and not (d / "postgres" / "data").exists() and not (d / "postgres").is_symlink()


@pytest.mark.parametrize("time_limit", ["0.5", "3"])
def test_the_clock_starts_when_every_worker_is_up(tmp_path: Path, time_limit: str) -> None:
    """Seen on main: ``--concurrency 32 --time-limit 10`` gave ops 0 / valid (the clock ran while workers spawned)."""
    proc = leasecheck(tmp_path, "--concurrency", "32", "--time-limit", time_limit, "--nemesis", "none", "--ttl", "300",
                      "--seed", "3", "--json")
    code, out, err = finish(proc)
    obj = json.loads(out)
    assert obj == results(tmp_path)
    assert obj["run"]["ops"] > 0, obj["run"]
    assert code in (0, 2) and (code == 0) == (obj["valid"] is True), (code, obj["reason"])
    _, ops, _ = read_history(Path(obj["run_dir"]) / "history.jsonl")
    claimed = {op.process for op in ops if op.f == "claim"}
    assert len(claimed) >= 24, f"only {len(claimed)} of 32 workers claimed anything: the clock ran before they were up"
    assert_clean(tmp_path, err)


def test_a_run_that_tested_nothing_exits_2_naming_what_is_missing(tmp_path: Path) -> None:
    """Seen on main: ``--time-limit 0.5`` gave valid, exit 0; the pause (every 5 s) never happened. (A short run's
    first fault now starts within a third of its time limit; what half a second misses is what a pause is for.)"""
    code, out, err = finish(leasecheck(tmp_path, "--time-limit", "0.5", "--seed", "3"))
    obj = results(tmp_path)
    assert code == 2, (out, err)
    missing = re.search(r"pause( never started| never healed| never met an op|: claim-after-expiry never happened)", obj["reason"])
    assert obj["valid"] == "unknown" and missing and obj["interrupted"] is None, obj["reason"]
    assert obj["target"] == "sqlite" and obj["nemesis"] == ["pause"] and obj["seed"] == 3
    assert missing.group(0) in " ".join(out.split())
    assert_clean(tmp_path, err)


def test_evidence_wait_goes_on_until_every_fault_started_and_healed(tmp_path: Path) -> None:
    """The same short run, allowed to go on while evidence is missing: valid, because it then tested enough."""
    code, out, err = finish(leasecheck(
        tmp_path, "--time-limit", "0.5", "--evidence-wait", "120", "--nemesis", "pause,kill", "--nemesis-interval", "0.3",
        "--ttl", "300", "--seed", "3", "--json",
    ))
    obj = json.loads(out)
    assert code == 0 and obj["valid"] is True and obj["reason"] is None, (obj.get("reason"), err[-2000:])
    assert_clean(tmp_path, err)


def test_require_goes_on_while_a_situation_is_missing_and_says_which_never_happened(tmp_path: Path) -> None:
    """A run told to reach a situation no fault of it brings about goes on for --evidence-wait, then is unknown naming it."""
    code, out, err = finish(leasecheck(
        tmp_path, "--time-limit", "1", "--evidence-wait", "1", "--nemesis", "none", "--ttl", "300", "--seed", "3",
        "--require", "lease-expires-during-store-fault", "--json",
    ))
    obj = json.loads(out)
    assert code == 2 and obj["valid"] == "unknown", (obj.get("reason"), err[-2000:])
    assert obj["reason"].endswith("--require: lease-expires-during-store-fault never happened"), obj["reason"]
    assert "time limit reached; going on up to" in (Path(obj["run_dir"]) / "leasecheck.log").read_text()
    assert obj["coverage"]["required"] == {"--require": ["lease-expires-during-store-fault"]}
    assert "lease-expires-during-store-fault" in obj["coverage"]["missing"]
    assert_clean(tmp_path, err)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_heals_checks_and_exits_128_plus_signal(tmp_path: Path, sig: signal.Signals) -> None:
    """Seen on main: SIGTERM gave exit 143 with no output, no results.json and temp folders left behind;
    Ctrl-C gave valid, exit 0. Postgres under a paused store and worker: its folder and log are the run's."""
    proc = leasecheck(tmp_path, "--target", "postgres", "--nemesis", "pause,pause-store", "--nemesis-interval", "0.3",
                      "--ttl", "300", "--time-limit", "300", "--seed", "4")
    wait_for(proc, "a pause in a growing history", history_has(tmp_path, 100, nemesis="pause"))
    os.killpg(proc.pid, sig)  # to the whole group: what a terminal (Ctrl-C) or a CI runner does
    code, out, err = finish(proc, timeout=60)
    obj = results(tmp_path)
    assert code == 128 + sig, (code, out[-2000:], err[-2000:])
    assert obj["interrupted"] == sig.name and obj["valid"] is not False and obj["seed"] == 4
    # the reason is the interruption and when, not what the cut-short run lacked ("kill never started")
    assert re.fullmatch(rf"interrupted by {sig.name} \d+\.\d s after the start(; by then .*)?", obj["reason"] or ""), obj["reason"]
    assert "seed" in out and "4" in out
    assert "interrupted" in err
    d = run_dir(tmp_path)
    assert d is not None and ((d / "postgres" / "postgres.log").is_file() or (d / "postgres.log").is_file())
    assert_clean(tmp_path, err)


def test_ctrl_c_while_workers_start_is_clean(tmp_path: Path) -> None:
    """Seen on main: Ctrl-C while workers start printed their KeyboardInterrupt tracebacks."""
    proc = leasecheck(tmp_path, "--concurrency", "24", "--time-limit", "30", "--seed", "1")
    wait_for(proc, "the workers starting", log_says(tmp_path, "starting 24 workers"))
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = finish(proc, timeout=60)
    assert code == 130, (code, out[-2000:], err[-3000:])
    assert results(tmp_path)["interrupted"] == "SIGINT"
    assert_clean(tmp_path, err)


def test_heal_cleans_what_a_killed_harness_left(tmp_path: Path) -> None:
    """Seen on main: ``kill -9`` left ``leasecheck-clocks-*`` (and a Postgres folder) in the temp folder.
    Now both live in the run directory, and ``leasecheck heal RUN_DIR`` removes them."""
    proc = leasecheck(tmp_path, "--target", "postgres", "--nemesis", "clock-bump", "--nemesis-interval", "0.3",
                      "--ttl", "300", "--time-limit", "300", "--seed", "5")
    wait_for(proc, "a clock skew in a growing history", history_has(tmp_path, 50, nemesis="clock-skew"))
    proc.send_signal(signal.SIGKILL)
    finish(proc, timeout=30)
    d = run_dir(tmp_path)
    assert d is not None and (d / "clocks").is_dir() and (d / "postgres" / "data").is_dir()
    # the postmaster dies with the harness (PR_SET_PDEATHSIG); wait for it, by its pid file
    wait_for(None, "the server gone", lambda: server_gone(d), timeout=30)
    heal = subprocess.run([sys.executable, "-m", "leasecheck", "heal", str(d)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert heal.returncode == 0, heal.stderr
    assert not (d / "clocks").exists() and not (d / "postgres" / "data").exists() and not (d / "postgres").is_symlink()
    assert (d / "history.jsonl").is_file() and ((d / "postgres" / "postgres.log").is_file() or (d / "postgres.log").is_file())
    assert sorted(p.name for p in private_tmp(tmp_path).iterdir()) == []


def server_gone(d: Path) -> bool:
    """Is the run's postmaster gone (so heal may remove its data)?"""
    from leasecheck.rundir.files import _postmaster_alive

    return not _postmaster_alive(d / "postgres" / "data")


def test_remove_leftovers_keeps_the_record(tmp_path: Path) -> None:
    for name in ("clocks/0.clock", "postgres/data/PG_VERSION", "postgres/postgres.log", "history.jsonl"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert remove_leftovers(tmp_path) == ["clocks", "postgres/data"]
    assert (tmp_path / "postgres" / "postgres.log").exists() and (tmp_path / "history.jsonl").exists()
