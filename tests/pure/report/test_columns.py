"""The report's columnar reader agrees with the checker's reader, op for op, and rejects what it rejects."""

from __future__ import annotations

from pathlib import Path

import pytest
from paths import EXAMPLES

from leasecheck.histories import HistoryError, HistoryReader, read_history
from leasecheck.report.columns import F_NAMES, OUTCOMES, REASONS, read_columns

GOOD = sorted(p for p in EXAMPLES.glob("*.jsonl") if not p.name.startswith("bad-input-"))
BAD = sorted(EXAMPLES.glob("bad-input-*.jsonl"))


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_columns_hold_every_op_as_the_reader_reads_it(path: Path) -> None:
    _, ops, reader = read_history(path)
    cols = read_columns(path)
    assert cols.n == len(ops)
    by_index = {op.index: op for op in ops}
    assert sorted(by_index) == list(cols.index)  # invoke order
    for i, index in enumerate(cols.index):
        op = by_index[index]
        assert cols.process[i] == op.process
        assert F_NAMES[cols.f[i]] == op.f
        assert cols.nodes[cols.node[i]] == op.node
        assert OUTCOMES[cols.outcome[i]] == op.type
        assert cols.start_ns[i] == op.invoke_time
        if op.type == "info":  # the reader drops an info's time (it may land later); the report draws it
            assert (cols.end_ns[i] == -1) == (op.complete_index is None)
            assert cols.end_ns[i] == -1 or cols.end_ns[i] >= op.invoke_time
        else:
            assert cols.end_ns[i] == op.complete_time
        assert (REASONS[cols.reason[i]] if cols.reason[i] >= 0 else None) == (op.result.get("reason") if op.type == "fail" else None)
        assert cols.epoch[i] == (op.epoch if type(op.epoch) is int else -1)
    assert bool(cols.warnings) == bool(reader.warnings or reader.cut_line is not None)  # a cut line: the report warns


def test_fault_bands_pair_each_start_with_its_heal() -> None:
    cols = read_columns(EXAMPLES / "nemesis-pause-resume.jsonl")
    _, _, reader = read_history(EXAMPLES / "nemesis-pause-resume.jsonl")
    starts = [e for e in reader.nemesis if e.f == "pause"]
    heals = [e for e in reader.nemesis if e.f == "resume"]
    assert [(b.kind, b.start_ns, b.end_ns) for b in cols.faults] == [
        ("pause", s.time, h.time) for s, h in zip(starts, heals)
    ]
    assert cols.faults, "the example pauses a worker"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_input_names_the_line_the_reader_names(path: Path) -> None:
    with pytest.raises(HistoryError) as theirs, HistoryReader(path) as reader:
        list(reader.ops())
    if theirs.value.line is None:
        pytest.fail(f"the reader names no line for {path.name}")
    try:
        read_columns(path)
    except HistoryError as ours:
        assert ours.line == theirs.value.line, str(ours)
        assert str(ours).startswith(str(path)), str(ours)
    else:
        pytest.fail(f"read_columns accepted {path.name}, which the reader rejects: {theirs.value}")


def test_a_worker_kill_ends_when_its_replacement_starts(tmp_path: Path) -> None:
    """The runner's ``start`` with ``replaces`` heals the kill of that process, and no other fault."""
    import json

    events = [
        {"process": "nemesis", "type": "info", "f": "kill", "value": {"fault": "kill", "victims": [1]}, "time": 100},
        {"process": "nemesis", "type": "info", "f": "start", "value": {"victims": [3], "replaces": 2}, "time": 150},  # a crash's
        {"process": "nemesis", "type": "info", "f": "start", "value": {"victims": [4], "replaces": 1}, "time": 200},
        {"process": "nemesis", "type": "info", "f": "kill", "value": {"fault": "kill", "victims": [4]}, "time": 300},
    ]
    header = {"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 0}
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [header] + [{"index": i, **e} for i, e in enumerate(events)]))
    cols = read_columns(path)
    assert [(b.kind, b.start_ns, b.end_ns, b.victims) for b in cols.faults] == [("kill", 100, 200, (1,)), ("kill", 300, None, (4,))]
