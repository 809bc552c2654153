"""A history checked split by node (and read in byte ranges, on several processes) gets the single check's verdict.

``check_source`` checks a big file in partitions (``leasecheck.checker.partitioned``),
reading its byte ranges side by side when it has several jobs. These tests force
the split on small histories, with every number of partitions and ranges, and
hold everything to the in-memory path: the verdict's JSON, the cited ops, the
coverage, the warnings; and on bad input, the same one-line error. The generated
histories mix several simulated runs (valid, with a planted anomaly, under another
header's rules), nemesis events and a truncated tail; the mutated ones come from
``test_bad_input``'s mutations. A few tests run real worker processes: what they
import, that a worker's failure and Ctrl-C end the check cleanly, and that the
temporary folder is always removed.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner
from combined import combine, many_runs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutants import byte_mutants, json_mutants, note
from paths import EXAMPLES
from sim import PLANTERS, SimConfig, dump, simulate

from leasecheck.checker import Verdict, check_source, partitioned, split
from leasecheck.checker.jobs import WorkerFailed, Workers
from leasecheck.checker.windows import Window
from leasecheck.cli import main
from leasecheck.histories import HistoryError
from leasecheck.histories.format import Event

MS = 1_000_000


def windows(events: Sequence[Event]) -> tuple[list[Window], list[Window]]:
    """Fault windows from any nemesis events: every event opens a store fault of 30 ms and skews its victims' clocks."""
    store = [Window(e.time, e.time + 30 * MS) for e in events]
    victims = [frozenset(v for v in (e.value if isinstance(e.value, list) else []) if type(v) is int) for e in events]
    skewed = [Window(e.time, None if i % 3 == 2 else e.time + 50 * MS, vs) for i, (e, vs) in enumerate(zip(events, victims))]
    return store, skewed


def outcome(path: Path, **kw: Any) -> Verdict | str:
    """The verdict, or the one line a bad file gets."""
    try:
        return check_source(path, windows=windows, budget=10, **kw)
    except HistoryError as e:
        return str(e)


def assert_same(single: Verdict | str, parts: Verdict | str) -> None:
    if isinstance(single, str) or isinstance(parts, str):
        assert single == parts
        return
    assert parts.to_json() == single.to_json()
    assert parts.cited == single.cited
    assert parts.coverage == single.coverage
    assert parts.header == single.header
    assert parts.warnings == single.warnings


def held_to_single(path: Path, splits: Sequence[tuple[int, int]], jobs: int = 1) -> Verdict | str:
    """Check ``path`` in memory and with every (partitions, byte ranges) of ``splits``: the same outcome."""
    single = outcome(path, jobs=1)
    for partitions, chunks in splits:
        note(f"{partitions} partitions, {chunks} byte ranges, {jobs} jobs")
        assert_same(single, outcome(path, jobs=jobs, partitions=partitions, chunks=chunks))
    return single


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("partitioned")


#: (partitions, byte ranges); 10,000 ranges puts every line in a range of its own, so every op spans ranges
SPLITS = st.lists(st.tuples(st.integers(1, 7), st.integers(1, 9) | st.just(10_000)), min_size=1, max_size=3)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history=many_runs(), splits=SPLITS)
def test_split_verdict_is_the_single_verdict(folder: Path, history: bytes, splits: list[tuple[int, int]]) -> None:
    path = folder / "many.jsonl"
    path.write_bytes(history)
    held_to_single(path, splits)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(case=st.one_of(json_mutants(), byte_mutants()), splits=SPLITS)
def test_bad_input_gets_the_same_line(folder: Path, case: tuple[bytes, bytes, list[str]], splits: list[tuple[int, int]]) -> None:
    """A mutated file: the same error (file, line, words), or the same verdict when it is still well formed."""
    _, mutant, done = case
    note("; ".join(done))
    path = folder / "mutant.jsonl"
    path.write_bytes(mutant)
    held_to_single(path, splits)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history=many_runs(), data=st.data())
def test_bad_input_in_a_history_of_many_runs(folder: Path, history: bytes, data: st.DataObject) -> None:
    """Lines swapped, dropped, repeated or re-timed in a history of many nodes and processes, read in byte ranges."""
    lines = history.split(b"\n")
    for _ in range(data.draw(st.integers(1, 2))):
        i = data.draw(st.integers(1, max(1, len(lines) - 2)))
        j = data.draw(st.integers(1, max(1, len(lines) - 2)))
        what = data.draw(st.sampled_from(["swap", "drop", "repeat", "retime"]))
        note(f"{what} line {i + 1} (and {j + 1})")
        if what == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif what == "drop":
            del lines[i]
        elif what == "repeat":
            lines.insert(j, lines[i])
        else:
            try:
                obj = json.loads(lines[i])
                obj["time"] = 0
                lines[i] = json.dumps(obj).encode()
            except (ValueError, TypeError):
                pass
    path = folder / "shuffled.jsonl"
    path.write_bytes(b"\n".join(lines))
    held_to_single(path, data.draw(SPLITS))


def _ev(p: Any, typ: str, f: str, node: str | None = "n", value: Any = None, dt: int = 1) -> dict[str, Any]:
    return {"dt": dt, "process": p, "type": typ, "f": f, "node": node, "value": {} if value is None else value}


_CLAIM = {"owner": "w"}
_OK_CLAIM = {"epoch": 1}
#: small histories, valid or breaking one rule a byte range cannot judge alone; cut everywhere, they must read the same
ACROSS: dict[str, list[dict[str, Any]]] = {
    "valid, ops spanning ranges": [
        _ev(1, "invoke", "claim", value=_CLAIM), _ev(2, "invoke", "read"), _ev("nemesis", "info", "pause", None, [1]),
        _ev(1, "ok", "claim", value=_OK_CLAIM), _ev(2, "ok", "read", value={"status": "RUNNING", "epoch": 1, "owner": "w"}),
        _ev(1, "invoke", "commit", value={"epoch": 1, "result": "r"}), _ev(3, "invoke", "read"), _ev(1, "ok", "commit"),
    ],
    "info completion, then the process never again": [
        _ev(1, "invoke", "claim", value=_CLAIM), _ev(2, "invoke", "claim", value=_CLAIM), _ev(1, "info", "claim", value="gone"),
        _ev(2, "fail", "claim", value={"reason": "held"}), _ev(3, "invoke", "read"),
    ],
    "completion with no invoke": [_ev(1, "invoke", "read"), _ev(1, "ok", "read", value={"status": "READY"}), _ev(1, "ok", "read")],
    "completion of a process never seen": [_ev(1, "invoke", "read"), _ev(2, "ok", "read", value={"status": "READY"})],
    "completion after info": [_ev(1, "invoke", "read"), _ev(1, "info", "read"), _ev(2, "invoke", "read"), _ev(1, "ok", "read")],
    "invoke after info": [_ev(1, "invoke", "read"), _ev(1, "info", "read"), _ev(2, "invoke", "read"), _ev(1, "invoke", "read")],
    "invoke while outstanding": [_ev(1, "invoke", "read"), _ev(2, "invoke", "read"), _ev(1, "invoke", "read")],
    "invoke while outstanding, then its own completion, then the first's": [
        _ev(1, "invoke", "claim", value=_CLAIM), _ev(2, "invoke", "read"), _ev(1, "invoke", "read"),
        _ev(1, "ok", "read", value={"status": "READY"}), _ev(1, "ok", "claim", value=_OK_CLAIM),
    ],
    "two completions of one invoke": [
        _ev(1, "invoke", "claim", value=_CLAIM), _ev(2, "invoke", "read"), _ev(1, "ok", "claim", value=_OK_CLAIM),
        _ev(1, "fail", "claim", value={"reason": "held"}),
    ],
    "completion f differs": [_ev(1, "invoke", "claim", value=_CLAIM), _ev(2, "invoke", "read"), _ev(1, "ok", "read", value={"status": "READY"})],
    "completion node differs": [_ev(1, "invoke", "read"), _ev(2, "invoke", "read"), _ev(1, "ok", "read", "m", {"status": "READY"})],
    "completion value wrong for its invoke's f": [_ev(1, "invoke", "claim", value=_CLAIM), _ev(2, "invoke", "read"), _ev(1, "ok", "claim")],
    "time goes back": [_ev(1, "invoke", "read", dt=5), _ev(2, "invoke", "read"), _ev(1, "ok", "read", value={"status": "READY"}, dt=-2)],
    "index repeats": [_ev(1, "invoke", "read"), _ev(2, "invoke", "read"), {"index": 1}, _ev(3, "invoke", "read")],
    "index gap": [_ev(1, "invoke", "read"), _ev(2, "invoke", "read"), {"index": 4}, _ev(3, "invoke", "read")],
    "first time negative": [_ev(1, "invoke", "read", dt=-3), _ev(2, "invoke", "read")],
    "truncated last line": [_ev(1, "invoke", "read"), _ev(1, "ok", "read", value={"status": "READY"}), {"cut": 9}],
}


def _across(events: list[dict[str, Any]]) -> bytes:
    out = [json.dumps({"format": "leasecheck-history", "version": 1, "ttl_ms": 100, "clock_uncertainty_ms": 0})]
    t = 0
    index = 0
    cut = 0
    for e in events:
        if "cut" in e:
            cut = e["cut"]
            continue
        if "index" in e:  # the next event takes this index
            index = e["index"]
            continue
        t += e["dt"]
        ev = {"index": index, "time": t, **{k: v for k, v in e.items() if k != "dt" and v is not None}}
        index += 1
        out.append(json.dumps(ev))
    data = ("\n".join(out) + "\n").encode()
    return data[: len(data) - cut] if cut else data


@pytest.mark.parametrize("name", list(ACROSS))
def test_rules_that_span_byte_ranges_hold_wherever_the_file_is_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Every way of cutting the file into byte ranges of whole lines reads as the one-pass reader reads it."""
    path = tmp_path / "across.jsonl"
    path.write_bytes(_across(ACROSS[name]))
    starts = [0]
    for line in path.read_bytes().splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    header_end, lines = starts[1], starts[2:-1]  # the events' line starts after the first
    single = outcome(path, jobs=1)
    for mask in range(1 << len(lines)):
        cuts = [header_end] + [at for i, at in enumerate(lines) if mask >> i & 1] + [starts[-1]]
        monkeypatch.setattr(partitioned, "_bounds", lambda *_, cuts=cuts: cuts)
        assert_same(single, outcome(path, jobs=1, partitions=2, chunks=2))


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.jsonl")))
def test_every_example_checks_the_same_split(name: str) -> None:
    held_to_single(EXAMPLES / name, [(1, 1), (2, 3), (5, 8), (3, 10_000)])


def test_more_anomalies_than_listed_are_counted_across_partitions(tmp_path: Path) -> None:
    """Past 100 of a kind on a node only the count grows: ``anomalies_listed`` is recounted on the merged list."""
    header = {"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 0}
    events: list[dict[str, Any]] = []
    t = 0

    def op(p: int, f: str, node: str, value: dict[str, Any], result: dict[str, Any]) -> None:
        nonlocal t
        events.append({"time": t, "process": p, "type": "invoke", "f": f, "node": node, "value": value})
        events.append({"time": t + 1, "process": p, "type": "ok", "f": f, "node": node, "value": result})
        t += 2

    for n in range(4):
        node = f"n{n}"
        op(1, "claim", node, {"owner": "a"}, {"epoch": 1})
        op(2, "claim", node, {"owner": "b"}, {"epoch": 2})
        for _ in range(60 * n):  # n0 clean, n2 and n3 past the limit
            op(1, "commit", node, {"epoch": 1, "result": "r"}, {})
    path = tmp_path / "many-stale.jsonl"
    path.write_text("".join(dump(header, events)))
    single = held_to_single(path, [(2, 1), (3, 4), (4, 2)])
    assert isinstance(single, Verdict)
    assert single.stats["anomalies"]["stale-commit"] == 360
    assert single.stats["anomalies_listed"] < 360


def test_the_budget_is_one_bound_for_the_whole_history(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each partition gets what is left of one deadline, set once the reading ends."""
    from leasecheck.checker import in_memory

    seen: list[float | None] = []
    real = in_memory.check_nodes

    def spy(header: Any, by_node: Any, *, budget: float | None = None, engine: Any = "auto") -> Verdict:
        seen.append(budget)
        time.sleep(0.05)
        return real(header, by_node, budget=budget, engine=engine)

    monkeypatch.setattr(in_memory, "check_nodes", spy)
    path = folder / "budget.jsonl"
    path.write_bytes(combine([simulate(random.Random(s), SimConfig(nodes=3, ops=30)) for s in range(4)], random.Random(1)))
    check_source(path, jobs=1, partitions=5, budget=7.5)
    assert len(seen) >= 3
    assert all(b is not None and 0 <= b <= 7.5 for b in seen)
    assert all(later is not None and earlier is not None and later <= earlier - 0.04 for earlier, later in itertools.pairwise(seen))
    seen.clear()
    check_source(path, jobs=1, partitions=5, budget=None)
    assert seen and all(b is None for b in seen)


# --------------------------------------------------------------------------------------
# when to split


def test_small_files_and_lines_stay_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(b"x" * 1000)
    assert split.plan(path, jobs=8) is None
    assert split.plan([b"{}"], jobs=8, partitions=3) is None
    assert split.plan(tmp_path / "missing.jsonl", jobs=8) is None


def test_a_big_file_is_split_to_bound_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:
        f.truncate(2_600 << 20)  # sparse: 10 M ops' worth of bytes on no disk
    one = split.plan(path, jobs=1)
    assert one is not None and one.chunks == 1 and one.partitions * split.PARTITION_BYTES >= 2_600 << 20
    two = split.plan(path, jobs=2)
    assert two is not None and two.jobs == 2 and two.chunks >= 2 and two.partitions >= one.partitions
    many = split.plan(path, jobs=64)
    assert many is not None and (2_600 << 20) / many.partitions * many.jobs <= 2 * split.IN_FLIGHT_BYTES
    medium = tmp_path / "medium.jsonl"
    with medium.open("wb") as f:
        f.truncate(split.PARALLEL_MIN_BYTES)
    assert split.plan(medium, jobs=1) is None  # in memory, on one core
    assert split.plan(medium, jobs=2) is not None  # worth a second core
    small = tmp_path / "small.jsonl"
    with small.open("wb") as f:
        f.truncate(split.FORKED_PARALLEL_MIN_BYTES)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(split, "forks", lambda: True)
        assert split.plan(small, jobs=2) is not None  # worth a second core that starts in milliseconds ...
        mp.setattr(split, "forks", lambda: False)
        assert split.plan(small, jobs=2) is None  # ... but not one that spawns (another thread runs here)


# --------------------------------------------------------------------------------------
# real worker processes


def test_spawned_workers_import_the_checker_and_nothing_else() -> None:
    probe = "__import__('time').sleep(0.3) or (__import__('os').getpid(), sorted(__import__('sys').modules))"
    with Workers[str, Any](2, fork=False) as workers:
        answers = workers.map(eval, [probe] * 4)
    theirs = [mods for pid, mods in answers if pid != os.getpid()]
    assert theirs, "no task ran in the worker"
    for mods in theirs:
        assert "leasecheck.cli" not in mods and "click" not in mods and "rich" not in mods
        assert "pytest" not in mods and "networkx" not in mods


def test_workers_are_forked_only_where_no_other_thread_runs() -> None:
    """A fork copies locks other threads may hold: with a second thread alive the workers are spawned."""
    probe = "__import__('time').sleep(0.3) or (__import__('os').getpid(), 'pytest' in __import__('sys').modules)"
    for fork in (True, False):
        with Workers[str, Any](2, fork=fork) as workers:
            answers = workers.map(eval, [probe] * 4)
        theirs = [inherited for pid, inherited in answers if pid != os.getpid()]
        assert theirs, "no task ran in the worker"
        assert all(inherited is fork for inherited in theirs)  # a fork has this process's modules
    assert split.forks() is (threading.active_count() == 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert split.forks() is False
    finally:
        stop.set()


def test_a_task_that_raises_or_a_worker_that_dies_ends_the_map() -> None:
    with Workers[str, Any](2) as workers, pytest.raises(ValueError, match="invalid literal"):
        workers.map(eval, ["__import__('time').sleep(0.2)", "int('x')", "int('x')", "__import__('time').sleep(0.2)"])
    me = os.getpid()
    die = f"__import__('os')._exit(3) if __import__('os').getpid() != {me} else __import__('time').sleep(0.3)"
    with Workers[str, Any](2) as workers, pytest.raises(WorkerFailed, match="died"):
        workers.map(eval, [die] * 4)


def test_a_worker_sends_back_what_it_cannot_send(capfd: pytest.CaptureFixture[str]) -> None:
    """A result that cannot be pickled comes back as an error, and the worker prints nothing of its own."""
    with Workers[str, Any](2) as workers, pytest.raises((pickle.PicklingError, AttributeError, WorkerFailed)):
        workers.map(eval, ["__import__('time').sleep(0.3) or (lambda: 0)"] * 4)
    assert "Traceback" not in capfd.readouterr().err


def test_parallel_check_is_the_single_check(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(folder / "tmp"))
    (folder / "tmp").mkdir(exist_ok=True)
    rng = random.Random(7)
    runs = [simulate(rng, SimConfig(nodes=3, ops=40, crash_p=0.1)) for _ in range(6)]
    runs[2], _ = PLANTERS["stale-commit"](runs[2], rng)
    path = folder / "parallel.jsonl"
    path.write_bytes(combine(runs, rng, nemesis=3, cut=5))
    single = held_to_single(path, [(4, 3), (1, 2)], jobs=2)
    assert isinstance(single, Verdict) and single.valid is False and single.warnings
    bad = folder / "parallel-bad.jsonl"
    lines = path.read_bytes().split(b"\n")
    bad.write_bytes(b"\n".join(lines[:50] + lines[51:]))
    assert "index gap" in str(held_to_single(bad, [(3, 4)], jobs=2))
    assert list((folder / "tmp").iterdir()) == []  # every temporary folder removed


def test_cli_jobs(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(split, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(split, "FORKED_PARALLEL_MIN_BYTES", 0)
    rng = random.Random(3)
    path = folder / "cli.jsonl"
    path.write_bytes(combine([simulate(rng, SimConfig(nodes=3, ops=40)) for _ in range(5)], rng, nemesis=2))
    runner = CliRunner()
    one = runner.invoke(main, ["check", "--json", "--jobs", "1", str(path)], catch_exceptions=False)
    two = runner.invoke(main, ["check", "--json", "--jobs", "2", str(path)], catch_exceptions=False)
    assert one.exit_code == two.exit_code and one.exit_code in (0, 1)
    assert json.loads(one.stdout) == json.loads(two.stdout)
    bad = folder / "cli-bad.jsonl"
    bad.write_bytes(path.read_bytes().replace(b'"index":7,', b'"index":"7",', 1))
    r = runner.invoke(main, ["check", "--json", "--jobs", "2", str(bad)], catch_exceptions=False)
    assert r.exit_code == 3 and r.stderr.count("\n") == 1 and r.stderr.startswith(f"{bad}:9: ")
    r = runner.invoke(main, ["check", "--jobs", "0", str(path)], catch_exceptions=False)
    assert r.exit_code == 3


@pytest.mark.parametrize(
    ("sig", "whom", "code", "said"),
    [(signal.SIGINT, "group", 130, "aborted"), (signal.SIGTERM, "group", 143, ""), (signal.SIGTERM, "parent", 143, "")],
    ids=["ctrl-c", "sigterm-to-all", "sigterm-to-the-parent"],
)
def test_a_signal_ends_a_parallel_check_cleanly(tmp_path: Path, sig: signal.Signals, whom: str, code: int, said: str) -> None:
    """Ctrl-C (the foreground group) or a cancel (SIGTERM) mid-check: its exit code, no worker left, the temporary folder gone."""
    rng = random.Random(5)
    path = tmp_path / "big.jsonl"
    runs = [simulate(rng, SimConfig(nodes=3, ops=60, workers=4)) for _ in range(150)]
    path.write_bytes(combine(runs, rng))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    slow_check = (  # every partition takes far longer than the test needs to signal: the check is surely still running
        # Ctrl-C as a terminal's foreground process gets it, whatever this test's own parent left ignored
        # (a shell's background job inherits SIGINT ignored, and Python then keeps ignoring it)
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import sys; from leasecheck.checker import split; split.PARALLEL_MIN_BYTES = split.FORKED_PARALLEL_MIN_BYTES = 0; "
        "from leasecheck.checker import in_memory; real = in_memory.check_nodes\n"
        "def slow(*a, **k):\n    __import__('time').sleep(60); return real(*a, **k)\n"
        "in_memory.check_nodes = slow\n"
        "from leasecheck.cli import main; sys.argv[0] = 'leasecheck'; main()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", slow_check, "check", "--json", "--jobs", "2", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    me = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while not me.children() or not list(tmp.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    workers = me.children(recursive=True)
    time.sleep(0.3)
    if whom == "group":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, (out, err)
    assert err.strip() == said and "Traceback" not in err
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive
    assert list(tmp.iterdir()) == []
