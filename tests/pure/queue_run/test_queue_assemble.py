"""The queue run's history assembly and task plan: pure functions, checked on hand-made recordings.

What matters here is soundness: a claim's invoke at the job's enqueue time (the
library took it later), a commit completed only at a read that showed its
result, a fault naming every execution of the worker it hit. A history
assembled from a zombie whose result the library stored over the newer
execution's must be invalid, with the ops that prove it; the same recording
without the overwrite must be valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leasecheck.checker import check_source
from leasecheck.histories import Header, HistoryWriter
from leasecheck.histories.format import EffectFence
from leasecheck.queue_run.assemble import FIRST_EXECUTION, READER, Entry, assemble
from leasecheck.queue_run.watcher import Read
from leasecheck.targets.queues.base import JobState
from leasecheck.targets.queues.task import Plan, steps

MS = 1_000_000


def ev(x: str, t_ms: int, type_: str, f: str, value: dict[str, Any], slot: int = 0, **extra: Any) -> dict[str, Any]:
    return {"x": x, "slot": slot, "t": t_ms * MS, "type": type_, "f": f, "node": "j1", "value": value, **extra}


def execution(x: str, epoch: int | None, start: int, slot: int, stall: int = 0) -> list[dict[str, Any]]:
    """A claim at ``start`` ms, two effects, a commit invoked at the end; ``stall`` ms between the effects.
    ``epoch`` None: an execution named by its id (the token ``x``)."""
    lease: dict[str, Any] = {"epoch": epoch} if epoch is not None else {"epoch": None, "token": x}
    t = start
    out = [ev(x, t, "ok", "claim", lease, slot, owner=f"w{slot}")]
    out += [ev(x, t + 1, "invoke", "effect", {**lease, "payload": "1"}, slot), ev(x, t + 2, "ok", "effect", {}, slot)]
    t += 2 + stall
    out += [ev(x, t + 1, "invoke", "effect", {**lease, "payload": "2"}, slot), ev(x, t + 2, "ok", "effect", {}, slot)]
    out += [ev(x, t + 3, "invoke", "commit", {**lease, "result": x}, slot)]
    return out


def write(tmp: Path, entries: list[Entry], fence: EffectFence = "token") -> Path:
    path = tmp / "history.jsonl"
    writer = HistoryWriter(path, Header(1000, 50, {}, effect_fence=fence, lease_expiry="queue"), start_ns=0)
    for e in entries:
        if e.process == "nemesis":
            writer.nemesis(e.f, e.value, at=e.t)
        elif e.type == "invoke":
            assert isinstance(e.process, int)
            writer.invoke(e.process, e.f, e.node or "", e.value, at=e.t)
        else:
            assert isinstance(e.process, int)
            writer.complete(e.process, e.type, e.value, at=e.t)
    writer.close()
    return path


def read(t_ms: int, result: str) -> Read:
    return Read("j1", t_ms * MS, (t_ms + 1) * MS, JobState("SUCCEEDED", result))


def test_a_claim_is_invoked_at_the_enqueue_and_a_commit_completes_at_the_read_of_its_result() -> None:
    entries = assemble({"j1": 5 * MS}, execution("a", 1, 100, slot=0), [read(200, "a")], [])
    mine = [e for e in entries if e.process == FIRST_EXECUTION]
    assert (mine[0].type, mine[0].f, mine[0].t) == ("invoke", "claim", 5 * MS)
    assert (mine[-1].type, mine[-1].f, mine[-1].t) == ("ok", "commit", 201 * MS)
    reads = [e for e in entries if e.process == READER and e.type == "ok"]
    assert reads[0].value == {"status": "SUCCEEDED", "epoch": 1, "owner": "w0", "result": "a"}


def test_a_commit_whose_result_was_never_read_stays_open() -> None:
    entries = assemble({"j1": 0}, execution("a", 1, 100, slot=0), [], [])
    assert [e.f for e in entries if e.process == FIRST_EXECUTION][-1] == "commit"
    assert [e.type for e in entries if e.process == FIRST_EXECUTION][-1] == "invoke"


def test_a_fault_names_every_execution_of_the_worker_it_hit() -> None:
    events = execution("a", 1, 100, slot=0) + execution("b", 2, 300, slot=1) + execution("c", 3, 500, slot=0)
    entries = assemble({"j1": 0}, events, [], [(50 * MS, "pause", {"fault": "pause", "victims": [0]})])
    (pause,) = [e for e in entries if e.process == "nemesis"]
    assert pause.value["victims"] == [0, FIRST_EXECUTION, FIRST_EXECUTION + 2]
    assert pause.value["workers"] == [0]


def test_an_execution_that_goes_on_past_an_info_op_goes_on_as_a_process_of_its_own(tmp_path: Path) -> None:
    """A heartbeat the broker's restart cut off is ``info`` (it may have reached the store); the history ends a process
    there, so the execution's rest (its later effect and commit, the same lease) is a new process of the same worker:
    the history reads (it failed "process 1002 is reused after an info completion" under SAQ's kill-store), a fault
    on the worker names both, and the execution's zombie write is still judged."""
    a = execution("a", 1, 100, slot=0, stall=2000)
    heartbeat = [ev("a", 150, "invoke", "renew", {"epoch": 1}), ev("a", 151, "info", "renew", {"reason": "error"})]
    a = sorted(a + heartbeat, key=lambda e: e["t"])
    events = a + execution("b", 2, 1000, slot=1)
    entries = assemble({"j1": 0}, events, [read(1100, "b"), read(2300, "a")],
                       [(50 * MS, "pause", {"fault": "pause", "victims": [0]})])
    later = [e for e in entries if e.type == "invoke" and e.f in ("effect", "commit") and e.value.get("epoch") == 1
             and e.t > 151 * MS]
    assert later and {e.process for e in later} == {FIRST_EXECUTION + 2}, [(e.process, e.f, e.t) for e in later]
    (pause,) = [e for e in entries if e.process == "nemesis"]
    assert pause.value["victims"] == [0, FIRST_EXECUTION, FIRST_EXECUTION + 2]
    verdict = check_source(write(tmp_path, entries))  # a history the reader takes
    assert verdict.valid is False and {"stale-effect", "stale-commit"} <= {a.kind for a in verdict.anomalies}


def test_a_zombie_result_stored_over_the_newer_one_is_invalid_and_cited(tmp_path: Path) -> None:
    # a (epoch 1) stalls; b (epoch 2) runs the job again and its result is read; then a wakes, its effect is
    # accepted (an unfenced resource) and the library stores its result over b's
    events = execution("a", 1, 100, slot=0, stall=2000) + execution("b", 2, 1000, slot=1)
    history = write(tmp_path, assemble({"j1": 0}, events, [read(1100, "b"), read(2300, "a")], []))
    verdict = check_source(history)
    assert verdict.valid is False
    kinds = {a.kind for a in verdict.anomalies}
    assert kinds <= {"stale-effect", "stale-commit", "duplicate-commit", "lost-commit", "non-linearizable"}
    assert "stale-commit" in kinds and "stale-effect" in kinds
    stale = next(a for a in verdict.anomalies if a.kind == "stale-commit")
    assert stale.ops, stale


def test_a_zombie_effect_of_a_queue_without_attempt_numbers_is_caught_whichever_took_the_job_first(tmp_path: Path) -> None:
    # executions named by ids, both claims invoked at the enqueue: which the library granted first is unknown. The
    # zombie (a) writes after b started, and b writes after a started: whichever was granted first, the other's
    # grant made a later write of it stale under the documented mode's rule ("lease")
    events = execution("a", None, 100, slot=0, stall=2000) + execution("b", None, 1000, slot=1)
    history = write(tmp_path, assemble({"j1": 0}, events, [read(1100, "b")], []), fence="lease")
    verdict = check_source(history)
    assert verdict.valid is False, verdict
    (stale,) = [a for a in verdict.anomalies if a.kind == "stale-effect"]
    assert len(stale.ops) == 4
    last = verdict.cited[stale.ops[-1]]
    assert (last.f, last.process) == ("effect", FIRST_EXECUTION)  # the zombie's late effect, cited last
    # without the zombie's late writes the same two executions are fine (an at-least-once queue runs a job twice)
    early = [e for e in events if not (e["x"] == "a" and e["t"] > 1000 * MS)]
    assert check_source(write(tmp_path, assemble({"j1": 0}, early, [read(1100, "b")], []), fence="lease")).valid is True


def test_the_coverage_of_a_queue_without_attempt_numbers_counts_the_zombie_the_checker_proves(tmp_path: Path) -> None:
    # the zombie (a) wakes and writes while b runs (b wrote, b's commit not yet invoked): the checker proves the stale
    # effect whichever was granted first; coverage, by direct loops and by indexed sweeps, counts that zombie's effect
    # in the same phase, and `leasecheck check` never says it never happened (both claims invoked at the enqueue)
    from click.testing import CliRunner

    from leasecheck.checker.coverage import node_coverage
    from leasecheck.cli import main
    from leasecheck.histories import read_history
    from leasecheck.verdict.run_verdict import fault_windows

    events = execution("a", None, 100, slot=0, stall=901) + execution("b", None, 1000, slot=1)
    history = write(tmp_path, assemble({"j1": 0}, events, [read(1100, "b")], []), fence="lease")
    verdict = check_source(history, windows=fault_windows)
    assert [a.kind for a in verdict.anomalies] == ["stale-effect"]
    assert verdict.coverage is not None and verdict.coverage["zombie-effect-while-new-runs"] == 1
    header, ops, _ = read_history(history)
    nodes = [[op for op in ops if op.node == "j1"]]
    assert node_coverage(header, nodes, small_ops=0)["zombie-effect-while-new-runs"] == 1  # the sweeps, the same
    out = CliRunner().invoke(main, ["check", str(history)], catch_exceptions=False).output
    never = out.split("never:")[-1]
    assert "stale-effect" in out and "zombie-effect-while-new-runs" not in never, out
    # what a queue's own workers cannot bring about is not asked of it: no release, no read by an execution, no claim
    # timed against a ttl (its claims are bounded by the enqueue alone)
    assert "coverage: 1/6 situations reached" in out and "claim-while-held" not in never and "zombie-read" not in never, out


def test_a_zombie_result_of_a_queue_without_attempt_numbers_is_caught(tmp_path: Path) -> None:
    # executions named by ids, both claims invoked at the enqueue: which the library granted first is unknown; but
    # b's result was read, then a's: b's commit had taken effect, and a's commit cannot follow it (SUCCEEDED is final)
    events = execution("a", None, 100, slot=0, stall=2000) + execution("b", None, 1000, slot=1)
    history = write(tmp_path, assemble({"j1": 0}, events, [read(1100, "b"), read(2300, "a")], []), fence="lease")
    verdict = check_source(history)
    assert verdict.valid is False, verdict
    assert {a.kind for a in verdict.anomalies} & {"duplicate-commit", "lost-commit", "non-linearizable"}
    # the zombie's commit never read: its late effects are the only finding
    kinds = {a.kind for a in check_source(write(tmp_path, assemble({"j1": 0}, events, [read(1100, "b")], []),
                                                fence="lease")).anomalies}
    assert kinds == {"stale-effect"}


def test_the_same_jobs_without_a_zombie_are_valid(tmp_path: Path) -> None:
    events = execution("a", 1, 100, slot=0) + execution("b", 1, 100, slot=1)
    for e in events[len(events) // 2:]:
        e["node"] = "j2"
    reads = [read(300, "a"), Read("j2", 302 * MS, 303 * MS, JobState("SUCCEEDED", "b"))]
    history = write(tmp_path, assemble({"j1": 0, "j2": 0}, events, reads, []))
    assert check_source(history).valid is True


def test_an_execution_stalls_only_as_the_seed_says() -> None:
    plan = Plan(seed=7, mode="documented", ttl_ms=1000, stall_rate=0.5)
    first = [steps(plan, f"j{i}", 1, heartbeat=False) for i in range(200)]
    stalled = [s for s in first if any(step.what == "stall" for step in s)]
    assert 60 < len(stalled) < 140  # about half
    assert first == [steps(plan, f"j{i}", 1, heartbeat=False) for i in range(200)]  # the same every time
    assert not any(step.what == "stall" for i in range(200) for step in steps(plan, f"j{i}", 2, heartbeat=False))
    for s in stalled:
        (stall,) = [step.arg for step in s if step.what == "stall"]
        assert 1.5 <= stall <= 3.0  # past the library's timeout
        whats = [step.what for step in s]
        assert whats.index("effect") < whats.index("stall") < len(whats) - 1 - whats[::-1].index("effect")  # between the effects
    beats = steps(plan, "j0", 1, heartbeat=True)
    assert [step.what for step in beats].count("renew") == 2


def test_a_completion_the_library_loses_afterwards_is_a_lost_commit(tmp_path: Path) -> None:
    # the job succeeded (its result read), then the library reported it failed: a stale execution's refusal
    # stored over the completion (arq's fenced mode, seen)
    events = execution("a", 1, 100, slot=0)
    reads = [read(200, "a"), Read("j1", 300 * MS, 301 * MS, JobState("FAILED", None))]
    entries = assemble({"j1": 0}, events, reads, [])
    failed = [e for e in entries if e.process == READER and e.type == "ok"][-1]
    assert failed.value == {"status": "READY", "reported": "FAILED"}
    verdict = check_source(write(tmp_path, entries))
    assert [a.kind for a in verdict.anomalies] == ["lost-commit"]


def test_a_library_that_stores_no_result_completes_the_only_execution_that_had_returned(tmp_path: Path) -> None:
    # procrastinate, pgqueuer: a job's state says it succeeded, not who finished it
    done = Read("j1", 300 * MS, 301 * MS, JobState("SUCCEEDED", None))
    alone = assemble({"j1": 0}, execution("a", 1, 100, slot=0), [done], [])
    last = [e for e in alone if e.process == FIRST_EXECUTION][-1]
    assert (last.type, last.f, last.t) == ("ok", "commit", 301 * MS)
    assert [e for e in alone if e.process == READER][-1].value == {"status": "SUCCEEDED", "epoch": 1, "owner": "w0",
                                                                   "inferred": "a"}
    assert check_source(write(tmp_path, alone)).valid is True
    # two executions had returned: nobody can tell which finished it; both commits stay open, the status alone read
    events = execution("a", 1, 100, slot=0) + execution("b", 2, 150, slot=1)
    both = assemble({"j1": 0}, events, [done], [])
    assert not [e for e in both if e.f == "commit" and e.type == "ok"]
    assert [e for e in both if e.process == READER][-1].value == {"status": "SUCCEEDED"}


def test_the_same_seed_stalls_the_same_jobs_in_every_run() -> None:
    plan = Plan(seed=3, mode="documented", ttl_ms=1000)
    assert [steps(plan, f"lcaaaa0001-j{i:04d}", 1, heartbeat=False) for i in range(20)] == \
        [steps(plan, f"lcbbbb0002-j{i:04d}", 1, heartbeat=False) for i in range(20)]
