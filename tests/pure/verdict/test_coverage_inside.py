"""Faults inside every kind of operation (issue 34, item 2): ``paused-inside-OP`` and ``killed-inside-OP``.

Counted on hand-made histories: a worker pause or kill counts for the op its victim had in flight (invoked before
the fault's start, completed after it; for a kill, also one the harness closed ``info`` at the death), and near
misses count nothing: a pause between two ops, an op of another process, a pause of the store, an op invoked the
nanosecond after the fault's start.
"""

from __future__ import annotations

import pytest
from handwritten import MS, History

from leasecheck.checker.coverage_inside import split_stops
from leasecheck.checker.windows import KILLED, PAUSED, Window
from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS, SITUATIONS, inside_situation
from leasecheck.nemesis.catalogue import FAULTS
from leasecheck.verdict.run_verdict import fault_windows
from leasecheck.verdict.situations import applicable

INSIDE = [s for s in SITUATIONS if "-inside-" in s]
#: what an ok op of each kind answers (the reader wants it)
OK = {"claim": {"epoch": 1}, "read": {"status": "READY", "epoch": 0}, "read-resource": {"fence": 0, "accepted": []}}


def inside_counts(h: History) -> dict[str, int]:
    cov = h.coverage()
    return {s: cov[s] for s in INSIDE if cov[s]}


def paused_at(t: int, victim: int = 1, heal: int | None = 400 * MS, fault: str = "pause") -> list[tuple[int, str, dict]]:
    events = [(t, "pause", {"fault": fault, "victims": [victim]})]
    if heal is not None:
        events.append((heal, "resume", {"fault": fault, "victims": [victim]}))
    return events


def history(*nemesis: tuple[int, str, dict], ops: list[tuple[int, str, int, int | None, str]]) -> History:
    h = History()
    for process, f, start, end, typ in ops:
        value = {"owner": f"w{process}"} if f == "claim" else {} if f in ("read", "read-resource") else {"epoch": 1}
        h.op(process, f, start, end, typ, value, OK.get(f, {}) if typ == "ok" else {"reason": "held"} if typ == "fail" else {})
    for t, f, value in nemesis:
        h.nemesis(t, f, **value)
    return h


@pytest.mark.parametrize("f", INSIDE_FUNCTIONS)
def test_a_pause_inside_an_op_of_each_kind_counts_once(f: str) -> None:
    h = history(*paused_at(10 * MS), ops=[(1, f, 9 * MS, 300 * MS, "ok")])
    assert inside_counts(h) == {inside_situation("pause", f): 1}


@pytest.mark.parametrize("f", INSIDE_FUNCTIONS)
def test_a_kill_inside_an_op_of_each_kind_counts_once(f: str) -> None:
    kill = [(10 * MS, "kill", {"fault": "kill", "victims": [1]}), (11 * MS, "start", {"victims": [2], "replaces": 1})]
    never = history(*kill, ops=[(1, f, 9 * MS, None, "info")])
    assert inside_counts(never) == {inside_situation("kill", f): 1}


def test_an_info_op_is_in_flight_to_the_end_and_an_op_done_before_the_fault_is_not() -> None:
    """The harness may see a death (and close the open op ``info``) before the nemesis stamps its kill event: an
    ``info`` op's interval runs to the end of the history, as the reader has it. An op the fault found done is none."""
    kill = [(10 * MS, "kill", {"fault": "kill", "victims": [1]})]
    assert inside_counts(history(*kill, ops=[(1, "claim", 5 * MS, 9 * MS, "info")])) == {"killed-inside-claim": 1}
    assert inside_counts(history(*paused_at(10 * MS), ops=[(1, "claim", 5 * MS, 9 * MS, "info")])) == {"paused-inside-claim": 1}
    for typ in ("ok", "fail"):
        assert inside_counts(history(*kill, ops=[(1, "claim", 5 * MS, 9 * MS, typ)])) == {}
        assert inside_counts(history(*paused_at(10 * MS), ops=[(1, "claim", 5 * MS, 10 * MS - 1, typ)])) == {}


def test_near_misses_count_nothing() -> None:
    between = [(1, "claim", 1 * MS, 9 * MS, "ok"), (1, "renew", 11 * MS, 12 * MS, "ok")]
    assert inside_counts(history(*paused_at(10 * MS), ops=between)) == {}  # between two ops: none in flight
    assert inside_counts(history(*paused_at(10 * MS), ops=[(1, "claim", 10 * MS, 20 * MS, "ok")])) == {}  # invoked at the start
    assert inside_counts(history(*paused_at(10 * MS), ops=[(1, "claim", 5 * MS, 10 * MS - 1, "ok")])) == {}  # done before
    assert inside_counts(history(*paused_at(10 * MS, victim=2), ops=[(1, "claim", 5 * MS, 20 * MS, "ok")])) == {}  # another
    store = [(10 * MS, "pause", {"fault": "pause-store", "victims": ["store"]})]
    assert inside_counts(history(*store, ops=[(1, "claim", 5 * MS, 20 * MS, "ok")])) == {}  # the store's pause


def test_a_pause_whose_op_completes_at_its_start_and_two_pauses_of_one_op() -> None:
    assert inside_counts(history(*paused_at(10 * MS), ops=[(1, "effect", 5 * MS, 10 * MS, "fail")])) == {"paused-inside-effect": 1}
    two = [*paused_at(10 * MS, heal=20 * MS), *paused_at(30 * MS, heal=40 * MS)]
    assert inside_counts(history(*two, ops=[(1, "commit", 5 * MS, 50 * MS, "ok")])) == {"paused-inside-commit": 2}


def test_histories_without_fault_names_tell_a_worker_pause_by_its_victims() -> None:
    ops = [(1, "read", 5 * MS, 20 * MS, "ok")]
    assert inside_counts(history((10 * MS, "pause", {"victims": [1]}), ops=ops)) == {"paused-inside-read": 1}
    assert inside_counts(history((10 * MS, "pause", {"victims": ["store"]}), ops=ops)) == {}


def test_the_stop_windows_have_roles_and_leave_the_clock_windows_alone() -> None:
    h = history(*paused_at(10 * MS), (50 * MS, "clock-skew", {"fault": "clock-bump", "victims": [1], "delta_ms": -300}),
                (60 * MS, "clock-reset", {"fault": "clock-bump", "victims": [1]}), ops=[])
    from leasecheck.histories import HistoryReader

    reader = HistoryReader(h.lines())
    list(reader.ops())  # the nemesis events are gathered as the ops are read
    _, worker = fault_windows(reader.nemesis)
    clocks, stops = split_stops(worker)
    assert [(w.start, w.roles) for w in stops] == [(10 * MS, frozenset({PAUSED}))]
    assert [w.start for w in clocks] == [50 * MS]
    assert split_stops([Window(1, 2, frozenset({1}), frozenset({KILLED}))])[0] == []


def test_pause_and_kill_seek_their_situations_and_require_none() -> None:
    for fault, word in (("pause", "paused"), ("kill", "killed")):
        kind = FAULTS[fault]
        assert [s for s in kind.seeks if "-inside-" in s] == [f"{word}-inside-{f}" for f in INSIDE_FUNCTIONS]
        assert not any("-inside-" in s for s in kind.situations)
        assert set(kind.seeks) <= set(applicable((kind,)))
