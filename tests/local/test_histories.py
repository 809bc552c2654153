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


def END(i: int) -> dict:
    """The history-end event at index ``i`` (what ``HistoryWriter.close`` writes last)."""
    return ev(i, 5 + i, "nemesis", "info", "history-end", node=None)


PROMISED = {**HEADER, "end_marker": True}
CUT = "the last line is cut (the writer stopped mid-write): a cut history is never valid"
NEVER_FINISHED = ('the history ends without its history-end event (line 1 promises one, "end_marker": true): '
                  "its writer never finished it, and a cut history is never valid")


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
        ([json.dumps({**HEADER, "effect_fence": "resource"})], 1, "effect_fence"),
        ([json.dumps({**HEADER, "effect_fence": None})], 1, "effect_fence"),
        ([json.dumps({**HEADER, "effect_fence": ["lease"]})], 1, "effect_fence"),
        ([json.dumps({**HEADER, "lease_expiry": "forever"})], 1, "lease_expiry"),
        ([json.dumps({**HEADER, "lease_expiry": None})], 1, "lease_expiry"),
        ([json.dumps({**HEADER, "end_marker": "yes"})], 1, "end_marker"),
        ([json.dumps({**HEADER, "end_marker": 1})], 1, "end_marker"),
        (lines(*CLAIM, END(2), ev(3, 9, 2, "invoke", "read")), 5, "after the history-end event of line 4"),
        (lines(*CLAIM, END(2), END(3)), 5, "after the history-end event of line 4"),
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


def test_a_cut_last_line_makes_the_verdict_unknown_naming_the_line(tmp_path: Path) -> None:
    """Before: the cut line was dropped with a warning and the verdict was valid (exit 0)."""
    whole = "\n".join(lines(*CLAIM, ev(2, 9, 2, "invoke", "read"), ev(3, 10, 2, "ok", "read", value={"status": "RUNNING", "epoch": 1, "owner": "w1"}))) + "\n"
    p = tmp_path / "h.jsonl"
    p.write_text(whole[:-15])
    v = check_source(p)
    assert v.valid == "unknown" and v.exit_code == 2
    assert v.cut == v.reason == f"{p}:5: {CUT}"
    assert v.to_json()["cut"] == v.to_json()["reason"] == v.cut
    assert v.warnings == [f"{p}: 1 op(s) never completed (the run may have been cut short); they count as info"]
    assert v.stats["ops"] == 2  # the read whose completion was cut is an info op


def test_a_cut_history_that_proves_an_anomaly_stays_invalid_and_says_it_was_cut(tmp_path: Path) -> None:
    """A proof in a prefix holds in the whole: exit 1, never 0, and the cut is said too."""
    dup = [*CLAIM, ev(2, 6, 2, "invoke", "claim", value={"owner": "w2"}), ev(3, 7, 2, "ok", "claim", value={"epoch": 1})]
    p = tmp_path / "h.jsonl"
    p.write_text("\n".join(lines(*dup, ev(4, 9, 3, "invoke", "read")))[:-10])
    v = check_source(p)
    assert v.valid is False and "duplicate-epoch" in {a.kind for a in v.anomalies} and v.exit_code == 1
    assert v.cut == f"{p}:6: {CUT}" and v.reason is None and v.to_json()["cut"] == v.cut


def test_a_promised_end_that_never_came_is_unknown_naming_the_last_line(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text("\n".join(lines(*CLAIM, header=PROMISED)) + "\n")
    v = check_source(p)
    assert v.valid == "unknown" and v.cut == v.reason == f"{p}:3: {NEVER_FINISHED}"
    p.write_text("\n".join(lines(*CLAIM, END(2), header=PROMISED)) + "\n")
    v = check_source(p)
    assert v.valid is True and v.cut is None and v.reason is None and "cut" not in v.to_json()
    assert v.stats["events"] == 3 and v.stats["nemesis_events"] == 0  # the end is an event, not a fault


def test_a_history_that_promised_nothing_is_judged_by_its_lines_alone(tmp_path: Path) -> None:
    """An older or third-party history without "end_marker": cut between two whole lines it cannot be told
    from a finished one (what the marker is for); its history-end event, if it has one, still ends it."""
    p = tmp_path / "h.jsonl"
    p.write_text("\n".join(lines(*CLAIM)) + "\n")
    assert check_source(p).valid is True
    p.write_text("\n".join(lines(*CLAIM, END(2))) + "\n")
    assert check_source(p).valid is True


def test_the_reader_says_where_it_was_cut_only_once_the_ops_are_read() -> None:
    reader = HistoryReader(lines(*CLAIM, END(2), header=PROMISED))
    ops = list(reader.ops())
    assert len(ops) == 1 and reader.cut is None and reader.end_line == 4 and reader.lines == 4
    assert reader.nemesis == [] and reader.events == 3
    reader = HistoryReader(lines(*CLAIM, header=PROMISED), name="h.jsonl")
    list(reader.ops())
    assert reader.cut == f"h.jsonl:3: {NEVER_FINISHED}" and reader.end_line is None


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
    assert header.effect_fence == "lease"
    assert json.loads(p.read_text().splitlines()[0])["effect_fence"] == "lease"  # written even at its default
    assert header.lease_expiry == "deadline" and "lease_expiry" not in json.loads(p.read_text().splitlines()[0])
    assert [(o.f, o.type, o.invoke_time, o.complete_time) for o in ops] == [("claim", "ok", 100, 300), ("commit", "ok", 400, 500)]
    assert check_source(p).valid is True
    written = [json.loads(x) for x in p.read_text().splitlines()]
    assert written[0]["end_marker"] is True and header.end_marker is True  # every writer promises its end
    assert written[-1] == {"index": 5, "time": 600, "process": "nemesis", "type": "info", "f": "history-end", "value": {}}


def test_the_writer_finishes_on_close_with_ops_open_and_abandons_on_an_exception(tmp_path: Path) -> None:
    """An interrupted run closes its history (its open ops count as info); a harness that fails abandons it."""
    p = tmp_path / "h.jsonl"
    with HistoryWriter(p, Header(1000, 50)) as w:
        w.invoke(1, "claim", "n", {"owner": "w1"})
    v = check_source(p)
    assert v.valid is True and v.stats["info"] == 1 and v.cut is None
    assert w.closed
    w.close()  # closing twice writes nothing more
    assert json.loads(p.read_text().splitlines()[-1])["f"] == "history-end"
    with pytest.raises(RuntimeError), HistoryWriter(p, Header(1000, 50)) as w:
        w.invoke(1, "claim", "n", {"owner": "w1"})
        w.complete(1, "ok", {"epoch": 1})
        raise RuntimeError("the harness failed")
    assert w.closed
    v = check_source(p)
    assert v.valid == "unknown" and v.cut == f"{p}:3: {NEVER_FINISHED}"
    w.abandon()
    w.close()  # closed already: nothing is written after the fact
    assert check_source(p).cut == v.cut


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
    """SIGKILL the writing process at an arbitrary point: the file is still checkable, and never valid
    (before: valid, exit 0), naming the line it ends on."""
    p = tmp_path / "h.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER_LOOP, str(p)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    v = check_source(p)
    assert v.valid == "unknown"
    assert v.stats["ops"] >= 51
    n = len(p.read_bytes().splitlines())
    assert v.cut in (f"{p}:{n}: {CUT}", f"{p}:{n}: {NEVER_FINISHED}"), v.cut


# ------------------------------------------------------------------------ effect_fence


@pytest.mark.parametrize("fence", ["lease", "token"])
def test_effect_fence_round_trips_and_stays_out_of_meta(tmp_path: Path, fence: str) -> None:
    p = tmp_path / "h.jsonl"
    with HistoryWriter(p, Header(1000, 0, {"target": "x"}, effect_fence=fence)) as w:  # type: ignore[arg-type]
        w.invoke(1, "claim", "n", {"owner": "w1"})
        w.complete(1, "ok", {"epoch": 1})
    header, _, _ = read_history(p)
    assert header.effect_fence == fence
    assert header.meta == {"target": "x"}
    assert header.to_json()["effect_fence"] == fence


def test_effect_fence_defaults_to_lease_when_absent() -> None:
    header, _, _ = read_history(lines(*CLAIM))
    assert header.effect_fence == "lease"
    assert "effect_fence" not in header.meta


def test_a_header_cannot_be_built_with_another_effect_fence() -> None:
    """The runner writes the target's declaration: a typo there stops the run, not the reader later."""
    with pytest.raises(ValueError, match="effect_fence"):
        Header(1000, 0, effect_fence="fenced")  # type: ignore[arg-type]


def test_cli_rejects_an_unknown_effect_fence_with_one_line_and_exit_3(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    p.write_text("\n".join(lines(*CLAIM, header={**HEADER, "effect_fence": "storage"})) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", str(p), "--json"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert err.count("\n") == 0, err
    assert err.startswith(f"{p}:1: ") and "effect_fence" in err and "'storage'" in err, err


ZOMBIE_EFFECT = [
    *CLAIM,
    ev(2, 2_000_000_000, 2, "invoke", "claim", value={"owner": "w2"}),
    ev(3, 2_000_000_005, 2, "ok", "claim", value={"epoch": 2}),
    ev(4, 2_000_000_010, 1, "invoke", "effect", value={"epoch": 1, "payload": "late"}),
    ev(5, 2_000_000_015, 1, "ok", "effect"),
]


@pytest.mark.parametrize(("fence", "valid"), [(None, False), ("lease", False), ("token", True)])
def test_the_header_picks_the_stale_effect_rule(fence: str | None, valid: bool) -> None:
    """A zombie's effect after the newer claim, before any newer effect: the header decides."""
    header = HEADER if fence is None else {**HEADER, "effect_fence": fence}
    v = check_source(lines(*ZOMBIE_EFFECT, header=header))
    assert v.valid is valid
    if not valid:
        assert [(a.kind, a.ops) for a in v.anomalies] == [("stale-effect", [2, 4])]
        assert 'effect_fence "lease"' in v.anomalies[0].explanation


def test_a_lock_without_a_deadline_is_not_judged_by_the_ttl() -> None:
    """``lease_expiry: "holder"``: a claim granted right after another (its holder died) and a claim refused
    long after the last renew (its holder is stopped) are what such a lock promises; a stale commit is not."""
    ms = 1_000_000

    def history(expiry: str | None) -> list[str]:
        header = {**HEADER, "ttl_ms": 1000, "clock_uncertainty_ms": 10, **({"lease_expiry": expiry} if expiry else {})}
        return [json.dumps(header)] + [json.dumps(e) for e in (
            ev(0, 0, 1, "invoke", "claim", value={"owner": "a"}), ev(1, 1 * ms, 1, "ok", "claim", value={"epoch": 1}),
            ev(2, 2 * ms, 2, "invoke", "claim", value={"owner": "b"}), ev(3, 3 * ms, 2, "ok", "claim", value={"epoch": 2}),
            ev(4, 5000 * ms, 3, "invoke", "claim", value={"owner": "c"}),
            ev(5, 5001 * ms, 3, "fail", "claim", value={"reason": "held"}),
        )]

    held = check_source(history("holder"))
    assert held.valid is True, held.to_json()
    timed = check_source(history(None))
    assert timed.valid is False and {a.kind for a in timed.anomalies} == {"overlapping-lease", "stuck-lease"}
    stale = history("holder") + [json.dumps(e) for e in (
        ev(6, 5002 * ms, 1, "invoke", "commit", value={"epoch": 1, "result": "r"}), ev(7, 5003 * ms, 1, "ok", "commit"),
    )]
    found = check_source(stale)
    assert found.valid is False and {a.kind for a in found.anomalies} == {"stale-commit"}
    assert found.anomalies[0].ops == [2, 6]
