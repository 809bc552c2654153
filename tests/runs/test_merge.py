"""The recorder's merge of the workers' stamped streams, and the recovery of a harness killed mid-run.

Workers stamp their own events (CLOCK_MONOTONIC) and send them without waiting;
the harness writes them in time order once no live worker can still send an
earlier one (:mod:`leasecheck.run.merge`). Each worker also logs what it stamps, so
that a harness SIGKILLed mid-run leaves a history that ``leasecheck check RUN_DIR``
completes from the logs (:mod:`leasecheck.rundir.worker_logs`).
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import subprocess
import time
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest
from harness import check_cli, harness_child, wait_for_paused_worker, wait_gone

from leasecheck.histories import Header, HistoryWriter, read_history
from leasecheck.histories.format import HISTORY_END, NEMESIS
from leasecheck.histories.reader import file_cut
from leasecheck.run import recorder as recorder_module
from leasecheck.run.deliveries import Deliveries
from leasecheck.run.merge import Merge
from leasecheck.run.pipe_words import ASKS, EVENTS, WORDS, Word
from leasecheck.run.recorder import Recorder
from leasecheck.run.worker_pipe import Hub, Recording
from leasecheck.rundir.worker_logs import JOURNAL, WORKERS_DIR, Journal, WorkerLog, recover


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def assert_well_formed(path: Path) -> list[dict[str, Any]]:
    """Indices contiguous from 0, times non-decreasing, and the reader accepts it."""
    events = _events(path)
    assert [e["index"] for e in events] == list(range(len(events)))
    times = [e["time"] for e in events]
    assert times == sorted(times), times
    read_history(path)
    return events


#: the last event of a history its writer finished (format v1's extension): the writer's close() writes it
END = (NEMESIS, "info", HISTORY_END)


def finished(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events before the history-end event, which must be the last and the only one."""
    assert (events[-1]["process"], events[-1]["type"], events[-1]["f"]) == END and events[-1]["value"] == {}, events[-1]
    assert [e["f"] for e in events].count(HISTORY_END) == 1
    return events[:-1]


def _recorder(tmp_path: Path) -> tuple[Recorder, HistoryWriter, list[Any]]:
    died: list[Any] = []
    writer = HistoryWriter(tmp_path / "history.jsonl", Header(1000, 10, {}))
    recorder = Recorder(writer, Deliveries(random.Random(1), 5, 0.0, 1.0, lambda nodes: None), died.append)
    recorder.go.set()
    return recorder, writer, died


def _worker(recorder: Recorder) -> tuple[Any, Any]:
    """A fake worker's pipe, registered and past its first ``next`` (as a real one is when it stamps)."""
    ours, theirs = Pipe()
    recorder.add(ours, len(recorder.slots), None)
    theirs.send(("next",))
    recorder._handle(ours)
    theirs.recv()
    return ours, theirs


def test_events_are_written_in_time_order_once_no_live_stream_can_precede_them(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "history.jsonl", Header(1000, 10, {}), start_ns=time.monotonic_ns())
    merge = Merge(writer)
    a, b = merge.stream(), merge.stream()
    a.blocked = b.blocked = False  # both past their first answer, at time 0
    a.bound = b.bound = 0
    merge.push(a, 10, 0, "invoke", "claim", "n", {"owner": "a"})
    merge.push(a, 20, 0, "ok", "claim", "n", {"epoch": 1, "token": 1})
    merge.push(b, 15, 1, "invoke", "read", "n", {})
    assert merge.flush() == 2  # a@10 and b@15; a@20 waits: b may still send something before it
    merge.push(b, 30, 1, "ok", "read", "n", {"status": "RUNNING", "epoch": 1})
    assert merge.flush() == 1  # a@20; b@30 waits for a
    b.blocked = True  # b asks the hub something: whatever it sends next comes after the answer
    merge.end(a)  # a's worker is gone with no op in flight
    assert merge.flush() == 1 and merge.buffered == 0
    writer.close()
    events = finished(assert_well_formed(tmp_path / "history.jsonl"))
    assert [(e["process"], e["type"], e["time"]) for e in events] == [
        (0, "invoke", 10), (1, "invoke", 15), (0, "ok", 20), (1, "ok", 30),
    ]


def test_a_completion_goes_with_the_workers_next_message_in_one_write(tmp_path: Path) -> None:
    """A worker holds its completion until its next invoke (one log write, one message) or any word to
    the hub; the hub unpacks the batch in order, and the history is what unbatched sends would give."""
    recorder, writer, _ = _recorder(tmp_path)
    ours, theirs = _worker(recorder)
    (tmp_path / "logs").mkdir()
    hub = Hub(theirs, Recording(str(tmp_path / "logs"), writer._start, recorder.slots[ours].process), 0)
    log = tmp_path / "logs" / "worker-0.jsonl"
    writes: list[int] = []
    real_write = os.write
    hub.log.write_bytes = lambda lines: writes.append(lines.count(b"\n")) or real_write(hub.log._fd, lines)  # type: ignore[method-assign, union-attr]
    hub.invoke("claim", "n", {"owner": "w0"})
    recorder._handle(ours)
    hub.complete("claim", "n", "ok", {"epoch": 1})
    assert not ours.poll(0) and len(log.read_text().splitlines()) == 1  # held: not sent, not logged
    hub.invoke("renew", "n", {"epoch": 1})
    assert writes == [1, 2]  # the completion and the next invoke: one write
    msg = ours.recv()
    assert msg[0] == "batch" and msg[1][0] == "complete" and msg[2][0] == "invoke"
    recorder._answer(recorder.slots[ours], ours, msg)
    hub.complete("renew", "n", "ok", {})
    hub.tell("done", "n")  # any word to the hub carries it too
    recorder._handle(ours)
    hub.invoke("commit", "n", {"epoch": 1, "result": "r"})
    recorder._handle(ours)
    hub.complete("commit", "n", "fail", {"reason": "expired"})
    hub.flush()  # before a sleep, a crash, the end
    assert not hub._held and [e["type"] for e in map(json.loads, log.read_text().splitlines())] == [
        "invoke", "ok", "invoke", "ok", "invoke", "fail"]
    recorder._handle(ours)
    assert recorder.merge.drain() == 6
    writer.close()
    events = finished(assert_well_formed(tmp_path / "history.jsonl"))
    assert [(e["f"], e["type"]) for e in events] == [
        ("claim", "invoke"), ("claim", "ok"), ("renew", "invoke"), ("renew", "ok"), ("commit", "invoke"), ("commit", "fail")]
    assert recorder.tally.ok == 2 and recorder.tally.fail == 1


def test_a_racer_still_waiting_when_its_node_is_raced_again_goes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A racing claim waits for its rival's; if the node is handed out as a new race before the rival claims,
    the first racer goes to the store at once. (It used to wait for an answer that never came, until the
    run's wind-down killed it: seen as a worker that "did not exit within 13 s".)"""
    recorder, writer, _ = _recorder(tmp_path)
    (a, a_w), (b, _), (c, c_w), (d, d_w) = (_worker(recorder) for _ in range(4))
    monkeypatch.setattr(recorder.deliveries, "next", lambda: "n")
    far = time.monotonic() + 3600
    recorder.races.racers["n"] = ({a, b}, far)  # a and b were both handed node n at once
    a_w.send(("invoke", "claim", "n", {"owner": "a"}, writer.now(), True))
    recorder._handle(a)
    assert not a_w.poll(0), "the first racer waits for its rival's claim"
    recorder.races.twin = (c, "n", far)  # n comes round again as a duplicate, held for a second worker
    d_w.send(("next",))
    recorder._handle(d)
    assert c_w.recv() == ("race", "n") and d_w.recv() == ("race", "n")
    assert a_w.poll(5) and a_w.recv() is True, "the earlier racer was never let go"
    for conn, w, owner in ((c, c_w, "c"), (d, d_w, "d")):  # the new race runs as races do
        w.send(("invoke", "claim", "n", {"owner": owner}, writer.now(), True))
        recorder._handle(conn)
    assert c_w.poll(5) and c_w.recv() is True and d_w.poll(5) and d_w.recv() is True


def test_a_paused_worker_holds_the_file_back_but_not_what_the_hub_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker silent mid-op (SIGSTOPped) holds the watermark; the others' ops are counted and their
    leases known at once, and written when it speaks again. A worker waiting for an answer holds nothing."""
    recorder, writer, _ = _recorder(tmp_path)
    (pa, a), (pb, b), (pc, c) = _worker(recorder), _worker(recorder), _worker(recorder)
    now = writer.now
    a.send(("invoke", "effect", "n1", {"epoch": 1, "token": 1, "payload": "x"}, now(), False))
    recorder._handle(pa)  # ... and a is paused before its completion
    for i in range(3):
        b.send(("invoke", "claim", f"m{i}", {"owner": "w1"}, now(), False))
        recorder._handle(pb)
        b.send(("complete", "ok", {"epoch": 1, "token": 1}, now()))
        recorder._handle(pb)
    c.send(("await", "n1", 1, "while-new-runs", 60.0))  # c waits for the hub: it holds nothing back
    recorder._handle(pc)
    recorder.merge.flush()
    assert writer.events == 1  # only a's invoke: a may still send a completion stamped before b's events
    assert recorder.tally.ok == 3 and recorder.takeovers.holders() == {1}  # answered from what was received
    assert recorder.merge.laggards() == [recorder.slots[pa].stream]
    assert len(recorder._listened()) == 3
    monkeypatch.setattr(recorder_module, "MAX_BUFFERED", 3)  # past the bound, the recorder listens to the laggard alone
    assert recorder._listened() == [pa]
    a.send(("complete", "ok", {}, now()))  # a resumes
    recorder._handle(pa)
    b.send(("idle", now() + 10**9))
    recorder._handle(pb)
    recorder.merge.flush()
    assert writer.events == 8 and recorder.merge.buffered == 0
    writer.close()
    events = finished(assert_well_formed(tmp_path / "history.jsonl"))
    assert [e["process"] for e in events] == [0, 1, 1, 1, 1, 1, 1, 0]


def test_a_killed_workers_open_op_is_recorded_info_and_its_process_retired(tmp_path: Path) -> None:
    recorder, writer, died = _recorder(tmp_path)
    (pa, a), (pb, b) = _worker(recorder), _worker(recorder)
    a.send(("invoke", "commit", "n1", {"epoch": 1, "token": 1, "result": "r"}, writer.now(), False))
    recorder._handle(pa)
    a.close()  # SIGKILLed with its commit in flight
    recorder._handle(pa)
    assert [s.process for s in died] == [0] and not died[0].alive and pa not in recorder.slots  # forgotten
    b.send(("invoke", "read", "n1", {}, writer.now(), False))  # b goes on: the dead stream no longer holds it
    recorder._handle(pb)
    recorder.merge.flush()
    recorder.merge.drain()
    writer.close()
    events = assert_well_formed(tmp_path / "history.jsonl")
    assert [(e["process"], e["type"], e["f"]) for e in events] == [
        (0, "invoke", "commit"), (0, "info", "commit"), (1, "invoke", "read"), END,
    ]
    assert events[1]["value"] == {"error": "worker process died"}
    assert recorder.tally.info == 1


def _run_folder(tmp_path: Path) -> tuple[Path, HistoryWriter, Merge]:
    run = tmp_path / "run"
    run.mkdir()
    writer = HistoryWriter(run / "history.jsonl", Header(1000, 10, {}), start_ns=0)
    return run, writer, Merge(writer, Journal(run / WORKERS_DIR))


def _killed(writer: HistoryWriter, merge: Merge) -> None:
    """The harness dies (SIGKILL): its journal's lock goes, and its history is never finished (no history-end)."""
    merge.journal.close()  # type: ignore[union-attr]
    writer.abandon()


def assert_never_finished(history: Path) -> None:
    """Recovery adds what the logs hold, never the history-end event: a recovered history is never valid."""
    lines = history.read_bytes().splitlines()
    assert b'"' + HISTORY_END.encode() + b'"' not in history.read_bytes()
    assert file_cut(history) == (
        f'{history}:{len(lines)}: the history ends without its history-end event (line 1 promises one, '
        '"end_marker": true): its writer never finished it, and a cut history is never valid')


def test_recovery_appends_what_only_the_logs_hold_in_time_order(tmp_path: Path) -> None:
    run, writer, merge = _run_folder(tmp_path)
    logs = [WorkerLog(run / WORKERS_DIR, slot) for slot in (0, 1)]
    written = [  # (slot, time, process, type, f, node, value): logged, sent and merged
        (0, 10, 0, "invoke", "claim", "n", {"owner": "w0"}),
        (0, 20, 0, "ok", "claim", "n", {"epoch": 1, "token": 1}),
        (1, 25, 1, "invoke", "commit", "m", {"epoch": 3, "token": 3, "result": "r"}),
    ]
    for slot, t, p, typ, f, node, value in written:
        logs[slot].write(t, p, typ, f, node, value)
        if typ == "invoke":
            writer.invoke(p, f, node, value, at=t)
        else:
            writer.complete(p, typ, value, at=t)
    merge.journal.nemesis(30, "pause", {"victims": [1]})  # type: ignore[union-attr]
    # what the harness had not written when it was killed: in a pipe, in its buffer, or never sent
    logs[1].write(40, 1, "ok", "commit", "m", {})
    logs[0].write(35, 0, "invoke", "effect", "n", {"epoch": 1, "token": 1, "payload": "p"})
    logs[1].write(50, 1, "invoke", "read", "m", {})
    with open(run / WORKERS_DIR / "worker-1.jsonl", "ab") as f:
        f.write(b'{"time": 60, "process": 1, "ty')  # killed mid-write
    with open(run / "history.jsonl", "ab") as f:
        f.write(b'{"index": 3, "time": 3')  # the harness, too
    assert recover(run) is None  # the harness is alive (its journal holds the lock): hands off
    _killed(writer, merge)
    assert recover(run) == 4
    events = assert_well_formed(run / "history.jsonl")
    assert [(e["time"], e["process"], e["type"], e["f"]) for e in events[3:]] == [
        (30, "nemesis", "info", "pause"), (35, 0, "invoke", "effect"), (40, 1, "ok", "commit"), (50, 1, "invoke", "read"),
    ]
    assert_never_finished(run / "history.jsonl")
    assert not (run / WORKERS_DIR).exists()
    assert recover(run) is None  # done once


def test_recovery_keeps_the_info_of_a_worker_the_harness_saw_die(tmp_path: Path) -> None:
    """A worker killed after it logged its completion, before it sent it: the history's info stands."""
    run, writer, merge = _run_folder(tmp_path)
    log = WorkerLog(run / WORKERS_DIR, 0)
    log.write(10, 0, "invoke", "claim", "n", {"owner": "w0"})
    writer.invoke(0, "claim", "n", {"owner": "w0"}, at=10)
    log.write(20, 0, "ok", "claim", "n", {"epoch": 1, "token": 1})  # logged, never sent: SIGKILL
    writer.complete(0, "info", {"error": "worker process died"}, at=30)
    _killed(writer, merge)
    assert recover(run) == 0
    assert [e["type"] for e in assert_well_formed(run / "history.jsonl")] == ["invoke", "info"]
    assert_never_finished(run / "history.jsonl")


def test_recovery_leaves_a_finished_history_as_it_is(tmp_path: Path) -> None:
    """A history with its history-end event was finished by its writer: nothing may follow its end, even when
    the worker logs are still there (a harness killed after its close(), before it removed them)."""
    run, writer, merge = _run_folder(tmp_path)
    log = WorkerLog(run / WORKERS_DIR, 0)
    log.write(10, 0, "invoke", "claim", "n", {"owner": "w0"})
    writer.invoke(0, "claim", "n", {"owner": "w0"}, at=10)
    log.write(20, 0, "ok", "claim", "n", {"epoch": 1, "token": 1})  # logged, never merged
    merge.journal.close()  # type: ignore[union-attr]
    writer.close()
    before = (run / "history.jsonl").read_bytes()
    assert recover(run) is None
    assert (run / "history.jsonl").read_bytes() == before and file_cut(run / "history.jsonl") is None
    assert [e["type"] for e in finished(assert_well_formed(run / "history.jsonl"))] == ["invoke"]


def test_the_lock_is_the_harness_alive(tmp_path: Path) -> None:
    journal = Journal(tmp_path / WORKERS_DIR)
    fd = os.open(tmp_path / WORKERS_DIR / JOURNAL, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        journal.close()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_a_harness_sigkilled_mid_run_leaves_a_history_the_worker_logs_complete(tmp_path: Path) -> None:
    """Kill -9 the harness while a worker is paused (the merge is held back): check RUN_DIR recovers and judges it."""
    store = tmp_path / "store"
    with harness_child(
        "run", "--target", "sqlite", "--nemesis", "pause", "--nemesis-interval", "0.5", "--time-limit", "120",
        "--ttl", "300", "--seed", "7", "--store", str(store), "--json",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    ) as h:
        history, h.kids = wait_for_paused_worker(h.proc, store, events=200)
        h.proc.send_signal(signal.SIGKILL)
        h.proc.wait(10)
        assert not wait_gone(h.kids, 8.0)
    run = history.parent
    assert (run / WORKERS_DIR).is_dir()
    logged = sum(len(p.read_bytes().splitlines()) for p in (run / WORKERS_DIR).glob("*.jsonl"))
    before = len(history.read_bytes().splitlines()) - 1
    code, verdict, err = check_cli(run)
    # never 3 (the recovered history is well formed), never 1 (a correct backend), never 0: its harness never
    # finished it, and a cut history is never valid (docs/contracts/run-verdict.md), so unknown naming its last line
    assert code == 2 and verdict["valid"] == "unknown", (code, verdict, err)
    assert verdict["reason"] == verdict["cut"] and "its writer never finished it" in verdict["cut"], verdict
    assert "recovered" in err
    after = assert_well_formed(history)
    assert before <= len(after) <= before + logged
    assert_never_finished(history)
    assert not (run / WORKERS_DIR).exists()
    again = check_cli(run)  # and again, with nothing left to recover: the same verdict, the history unchanged
    assert again[0] == 2 and again[1]["cut"] == verdict["cut"] and "recovered" not in again[2]
    assert len(assert_well_formed(history)) == len(after)


def test_every_word_a_worker_says_has_an_answer_and_a_word_never_declared_is_refused(tmp_path: Path) -> None:
    """The pipe's words are declared once (run/pipe_words.py): the recorder answers each (a batch is unpacked), and a
    message whose word is not declared fails at once rather than being dropped."""
    recorder, _, _ = _recorder(tmp_path)
    assert set(recorder._answers) | {Word.BATCH} == set(WORDS)
    assert set(WORDS) >= ASKS and set(WORDS) >= EVENTS
    ours, theirs = _worker(recorder)
    theirs.send(("lunch", "n"))
    with pytest.raises(KeyError):
        recorder._handle(ours)
    theirs.send((Word.IDLE, 10**12))  # a declared word, answered: the stream may be written past that time
    recorder._handle(ours)
    assert recorder.slots[ours].stream.bound == 10**12
