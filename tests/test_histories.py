"""The history format's reader and writer: every rule, the line it names, and crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from leasecheck.checker import check_source
from leasecheck.histories import Header, HistoryError, HistoryReader, HistoryWriter, read_history

HEADER = {"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 0}


def ev(i: int, t: int, p: object, typ: str, f: str, node: str | None = "n", value: object = None) -> dict:
    e: dict = {"index": i, "time": t, "process": p, "type": typ, "f": f}
    if node is not None:
        e["node"] = node
    e["value"] = {} if value is None else value
    return e


def lines(*events: dict, header: dict | None = None) -> list[str]:
    return [json.dumps(HEADER if header is None else header)] + [json.dumps(e) for e in events]


CLAIM = [ev(0, 0, 1, "invoke", "claim", value={"owner": "w1"}), ev(1, 5, 1, "ok", "claim", value={"epoch": 1})]


def error_of(src: list[str]) -> HistoryError:
    with pytest.raises(HistoryError) as e:
        read_history(src, name="h.jsonl")
    return e.value


@pytest.mark.parametrize(
    "src, line, words",
    [
        ([], 1, "empty"),
        (['{"index": 0}'], 1, "missing header"),
        ([json.dumps(ev(0, 0, 1, "invoke", "claim"))], 1, "line 1 is an event"),
        ([json.dumps({**HEADER, "version": 2})], 1, "version"),
        ([json.dumps({k: v for k, v in HEADER.items() if k != "ttl_ms"})], 1, "ttl_ms"),
        ([json.dumps({**HEADER, "clock_uncertainty_ms": -1})], 1, "clock_uncertainty_ms"),
        (lines(CLAIM[0]) + ["{not json"], 3, "bad JSON"),
        (lines(CLAIM[0], ev(2, 5, 1, "ok", "claim", value={"epoch": 1})), 3, "index gap"),
        (lines(CLAIM[0], ev(0, 5, 1, "ok", "claim", value={"epoch": 1})), 3, "repeats"),
        (lines(ev(0, 9, 1, "invoke", "claim"), ev(1, 5, 1, "ok", "claim", value={"epoch": 1})), 3, "backwards"),
        (lines(ev(0, 0, 1, "ok", "claim", value={"epoch": 1})), 2, "no invoke"),
        (lines(CLAIM[0], ev(1, 1, 1, "invoke", "read")), 3, "outstanding"),
        (lines(ev(0, 0, 1, "invoke", "lock")), 2, "unknown f"),
        (lines(CLAIM[0], ev(1, 1, 1, "done", "claim")), 3, "unknown type"),
        (lines(CLAIM[0], ev(1, 1, 1, "info", "claim"), ev(2, 2, 1, "invoke", "read")), 4, "reused"),
        (lines(ev(0, 0, "x", "invoke", "claim")), 2, "process"),
        (lines(ev(0, 0, 1.5, "invoke", "claim")), 2, "process"),
        (lines(ev(0, 0, 1, "invoke", "claim", node=None)), 2, "node"),
        (lines(ev(0, 0, 1, "invoke", "renew", value={})), 2, "epoch"),
        (lines(ev(0, 0, 1, "invoke", "renew", value={"epoch": "7"})), 2, "epoch"),
        (lines(CLAIM[0], ev(1, 1, 1, "ok", "read", value={"epoch": 1})), 3, "does not match"),
        (lines(CLAIM[0], ev(1, 1, 1, "ok", "claim", node="m", value={"epoch": 1})), 3, "does not match"),
        (lines(CLAIM[0], ev(1, 1, 1, "ok", "claim", value={})), 3, "epoch"),
        (lines(CLAIM[0], ev(1, 1, 1, "fail", "claim", value={"reason": "nope"})), 3, "reason"),
        (lines(CLAIM[0], ev(1, 1, 1, "fail", "claim")), 3, "reason"),
        (lines(ev(0, 0, 1, "invoke", "read"), ev(1, 1, 1, "ok", "read", value={"status": "DONE"})), 3, "status"),
        (lines(ev(0, True, 1, "invoke", "claim")), 2, "time"),
        (lines(CLAIM[0], "[1, 2]"), 3, "object"),
    ],
)
def test_each_rule_is_enforced_and_names_its_line(src: list, line: int, words: str) -> None:
    src = [s if isinstance(s, str) else json.dumps(s) for s in src]
    e = error_of(src)
    assert e.line == line
    assert words.lower() in e.message.lower()
    assert str(e).startswith(f"h.jsonl:{line}: ")
    assert "\n" not in str(e)


def test_valid_history_pairs_ops_and_keeps_nemesis_events() -> None:
    src = lines(
        CLAIM[0],
        ev(1, 1, "nemesis", "info", "pause", node=None, value={"victims": [1]}),
        ev(2, 5, 1, "ok", "claim", value={"epoch": 1}),
        ev(3, 6, 2, "invoke", "read"),
        ev(4, 7, 1, "invoke", "commit", value={"epoch": 1, "result": "r"}),
    )
    reader = HistoryReader(src)
    ops = list(reader.ops())
    assert [(o.index, o.f, o.type, o.epoch) for o in ops] == [
        (0, "claim", "ok", 1), (3, "read", "info", None), (4, "commit", "info", 1)
    ]
    assert ops[0].invoke_time == 0 and ops[0].complete_time == 5 and ops[0].complete_index == 2
    assert ops[1].complete_time is None  # never completed: info
    assert [e.f for e in reader.nemesis] == ["pause"]
    assert reader.header.ttl_ms == 1000 and reader.events == 5


def test_blank_lines_are_skipped() -> None:
    src = lines(*CLAIM)
    src.insert(2, "   ")
    _, ops, _ = read_history(src)
    assert len(ops) == 1


def test_truncated_last_line_is_a_warning_not_an_error(tmp_path: Path) -> None:
    whole = "\n".join(lines(*CLAIM, ev(2, 9, 2, "invoke", "read"), ev(3, 10, 2, "ok", "read", value={"status": "RUNNING", "epoch": 1, "owner": "w1"}))) + "\n"
    p = tmp_path / "h.jsonl"
    p.write_text(whole[:-15])
    v = check_source(p)
    assert v.valid is True
    assert f"{p}:5: truncated" in v.warnings[0]
    assert "1 op(s) never completed" in v.warnings[1]
    assert v.stats["ops"] == 2  # the read whose completion was cut is an info op


def test_a_bad_line_that_ends_in_newline_is_an_error_even_when_last(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text("\n".join(lines(*CLAIM)) + '\n{"index": 2, "ti\n')
    with pytest.raises(HistoryError) as e:
        check_source(p)
    assert e.value.line == 4


def test_writer_round_trip(tmp_path: Path) -> None:
    clock = iter(range(0, 10_000, 100)).__next__
    p = tmp_path / "h.jsonl"
    with HistoryWriter(p, Header(1000, 50, {"target": "sqlite", "seed": 7}), clock=clock) as w:
        assert w.invoke(1, "claim", "n", {"owner": "w1"}) == 0
        w.nemesis("pause", {"victims": [2]})
        w.complete(1, "ok", {"epoch": 1})
        w.invoke(1, "commit", "n", {"epoch": 1, "result": "r"})
        w.complete(1, "ok")
        with pytest.raises(ValueError):
            w.complete(1, "ok")
    header, ops, _ = read_history(p)
    assert header.meta == {"target": "sqlite", "seed": 7} and header.clock_uncertainty_ms == 50
    assert [(o.f, o.type, o.invoke_time, o.complete_time) for o in ops] == [("claim", "ok", 100, 300), ("commit", "ok", 400, 500)]
    assert check_source(p).valid is True


WRITER_LOOP = textwrap.dedent(
    """
    import sys
    from leasecheck.histories import Header, HistoryWriter
    w = HistoryWriter(sys.argv[1], Header(1000, 0))
    i = 0
    while True:
        node = f"n{i}"
        w.invoke(1, "claim", node, {"owner": "w"})
        w.complete(1, "ok", {"epoch": 1})
        if i == 50:
            print("ready", flush=True)
        i += 1
    """
)


def test_history_survives_a_killed_writer(tmp_path: Path) -> None:
    """SIGKILL the writing process at an arbitrary point: the file is still checkable."""
    p = tmp_path / "h.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER_LOOP, str(p)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    v = check_source(p)
    assert v.valid is True
    assert v.stats["ops"] >= 51
