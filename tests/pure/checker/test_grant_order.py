"""Staleness by grant order on fenced nodes whose epochs repeat or go back (issue 25, item 3).

leasecheck/checker/kinds_grant.py: on a node with a proven duplicate-epoch or epoch-regression, an ok renew,
commit or effect (``effect_fence: "lease"``) invoked after a newer grant had completed is stale, cited as
[its lease's claim, the newer claim, the op], even when epoch order passes it; epoch-order findings there say
"by epoch order"; a correct store never meets the rule; and the checker that follows a run says what the whole
history says.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from paths import EXAMPLES
from sim import MS, _Planter, render, sim_histories

from leasecheck.checker import check_source
from leasecheck.checker.kinds_grant import non_increasing_since
from leasecheck.checker.leases import int_epoch
from leasecheck.checker.online import follow
from leasecheck.checker.precedence import MaxBefore
from leasecheck.histories import Op, read_history

BY_GRANT = "Judged by grant order"
BY_EPOCH = "Judged by epoch order"


def tiny(*rows: tuple[float, Any, str, str, Any], effect_fence: str = "lease") -> list[str]:
    """A one-node history: (time ms, process, type, f, value) rows in file order (ttl 1 s, so no timing kind)."""
    header = {"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 0,
              "effect_fence": effect_fence}
    lines = [json.dumps(header) + "\n"]
    for i, (t, p, ty, f, v) in enumerate(rows):
        lines.append(json.dumps({"index": i, "time": int(t * MS), "process": p, "type": ty, "f": f, "node": "n0",
                                 "value": v}) + "\n")
    return lines


def op_rows(t: float, p: int, f: str, value: dict[str, Any], result: dict[str, Any] | None = None,
            type_: str = "ok") -> list[tuple[float, Any, str, str, Any]]:
    return [(t, p, "invoke", f, value), (t + 1, p, type_, f, result or {})]


def claim(t: float, p: int, epoch: int) -> list[tuple[float, Any, str, str, Any]]:
    return op_rows(t, p, "claim", {"owner": f"w{p}"}, {"epoch": epoch})


def carried(f: str, epoch: int) -> dict[str, Any]:
    return {"epoch": epoch, **({"payload": "x"} if f == "effect" else {"result": "r"} if f == "commit" else {})}


def found(lines: list[str]) -> list[tuple[str, list[int], str]]:
    return [(a.kind, list(a.ops), a.explanation) for a in check_source(lines).anomalies]


def stale(lines: list[str]) -> list[tuple[str, list[int], str]]:
    return [a for a in found(lines) if a[0].startswith("stale-")]


# -- the corpus ---------------------------------------------------------------------------------------


def test_the_older_holders_effect_after_a_duplicate_epoch_is_stale_by_grant_order() -> None:
    v = check_source(str(EXAMPLES / "stale-effect-by-grant-after-duplicate-epoch.jsonl"))
    got = {(a.kind, tuple(a.ops)): a.explanation for a in v.anomalies}
    assert set(got) == {("duplicate-epoch", (0, 5)), ("epoch-regression", (0, 5)), ("stale-effect", (0, 5, 10))}
    text = got["stale-effect", (0, 5, 10)]
    assert BY_GRANT in text and "duplicate-epoch" in text and "op 5 repeats epoch 1" in text
    assert 'effect_fence "lease"' in text


def test_after_an_epoch_regression_each_finding_names_its_order() -> None:
    """The newer holder's renew is stale by epoch order (and says so); the older holder's commit by grant order."""
    v = check_source(str(EXAMPLES / "stale-commit-by-grant-after-epoch-regression.jsonl"))
    got = {(a.kind, tuple(a.ops)): a.explanation for a in v.anomalies}
    assert set(got) == {("epoch-regression", (0, 3)), ("stale-renew", (0, 5)), ("stale-commit", (0, 3, 8))}
    assert BY_EPOCH in got["stale-renew", (0, 5)] and "grant order" in got["stale-renew", (0, 5)]
    assert BY_GRANT in got["stale-commit", (0, 3, 8)]
    assert "op 3 got epoch 5, not above 7: an epoch-regression" in got["stale-commit", (0, 3, 8)]


def test_a_node_whose_epochs_increase_reads_as_before() -> None:
    v = check_source(str(EXAMPLES / "stale-commit-after-takeover.jsonl"))
    assert [(a.kind, a.ops) for a in v.anomalies] == [("stale-commit", [3, 8])]
    assert "order" not in v.anomalies[0].explanation


def test_an_op_concurrent_with_the_newer_grant_is_a_near_miss() -> None:
    v = check_source(str(EXAMPLES / "duplicate-epoch-zombie-effect-concurrent-near-miss.jsonl"))
    assert sorted((a.kind, a.ops) for a in v.anomalies) == [("duplicate-epoch", [0, 3]), ("epoch-regression", [0, 3])]


@pytest.mark.parametrize("name", ["stale-effect-by-grant-after-duplicate-epoch.jsonl",
                                  "stale-commit-by-grant-after-epoch-regression.jsonl"])
def test_the_run_follower_tells_the_grant_order_finding_at_once(name: str) -> None:
    verdict, proofs = follow(EXAMPLES / name, probe_every=1)
    assert verdict.to_json() == check_source(str(EXAMPLES / name)).to_json()
    early = [p.anomaly for p in proofs if p.early and BY_GRANT in p.anomaly.explanation]
    assert early and all(a in verdict.anomalies for a in early)


# -- the rule, op by op --------------------------------------------------------------------------------


@pytest.mark.parametrize("f", ["renew", "commit", "effect"])
def test_the_zombie_of_a_repeated_epoch_is_stale(f: str) -> None:
    """The issue's first case: A granted 5, B (invoked after A's grant) granted 5 again, A's op with 5 accepted."""
    lines = tiny(*claim(0, 1, 5), *claim(10, 2, 5), *op_rows(20, 1, f, carried(f, 5)))
    assert [(k, ops) for k, ops, _ in stale(lines)] == [(f"stale-{f}", [0, 2, 4])]
    assert BY_GRANT in stale(lines)[0][2] and "a duplicate-epoch" in stale(lines)[0][2]


@pytest.mark.parametrize("f", ["renew", "commit", "effect"])
def test_after_a_regression_the_older_holder_is_stale_and_the_newer_by_epoch_order(f: str) -> None:
    """The issue's second case: A granted 7, B granted 5; B's op with 5 is stale by epoch order, A's with 7 by grant."""
    lines = tiny(*claim(0, 1, 7), *claim(10, 2, 5), *op_rows(20, 2, "renew", {"epoch": 5}),
                 *op_rows(30, 1, f, carried(f, 7)))
    got = {(k, tuple(ops)): text for k, ops, text in stale(lines)}
    assert ("stale-renew", (0, 4)) in got and BY_EPOCH in got["stale-renew", (0, 4)]
    assert (f"stale-{f}", (0, 2, 6)) in got and BY_GRANT in got[f"stale-{f}", (0, 2, 6)]


def test_the_newer_holders_op_with_the_repeated_epoch_is_not_stale() -> None:
    """B's own op belongs to B's grant (its own process's), and no grant came after it."""
    lines = tiny(*claim(0, 1, 5), *claim(10, 2, 5), *op_rows(20, 2, "commit", carried("commit", 5)))
    assert stale(lines) == []


def test_an_op_of_no_claimer_belongs_to_the_latest_grant_of_its_epoch() -> None:
    """A process that claimed nothing gets the benefit of the doubt: the latest grant of its epoch, here B's."""
    lines = tiny(*claim(0, 1, 5), *claim(10, 2, 5), *op_rows(20, 3, "renew", {"epoch": 5}))
    assert stale(lines) == []


def test_an_op_invoked_before_the_newer_grant_completed_is_not_stale() -> None:
    lines = tiny(*claim(0, 1, 5), (10, 2, "invoke", "claim", {"owner": "w2"}), (11, 1, "invoke", "renew", {"epoch": 5}),
                 (12, 2, "ok", "claim", {"epoch": 5}), (13, 1, "ok", "renew", {}))
    assert stale(lines) == []


def test_a_concurrent_duplicate_is_no_newer_grant() -> None:
    """Two racing claims both granted 5: neither was invoked after the other's grant, so neither is newer."""
    lines = tiny((0, 1, "invoke", "claim", {"owner": "w1"}), (1, 2, "invoke", "claim", {"owner": "w2"}),
                 (2, 1, "ok", "claim", {"epoch": 5}), (3, 2, "ok", "claim", {"epoch": 5}),
                 *op_rows(10, 1, "commit", carried("commit", 5)))
    assert [k for k, _, _ in found(lines)] == ["duplicate-epoch"]


def test_an_op_stale_by_epoch_order_is_reported_once_by_epoch_order() -> None:
    """A granted 5, B granted 3 after it, C granted 9: A's commit with 5 is stale both ways; one finding, by epoch."""
    lines = tiny(*claim(0, 1, 5), *claim(10, 2, 3), *claim(20, 3, 9), *op_rows(30, 1, "commit", carried("commit", 5)))
    commits = [(ops, text) for k, ops, text in stale(lines) if k == "stale-commit"]
    assert len(commits) == 1
    assert commits[0][0] == [4, 6] and BY_EPOCH in commits[0][1]


def test_the_epoch_order_note_waits_for_the_proof() -> None:
    """A stale op invoked before the node's epochs were shown not to increase reads as on any node."""
    lines = tiny(*claim(0, 1, 1), *claim(10, 2, 2), *op_rows(20, 1, "commit", carried("commit", 1)),
                 *claim(30, 3, 2))
    ((kind, ops, text),) = stale(lines)
    assert (kind, ops) == ("stale-commit", [2, 4]) and "order" not in text


def test_token_fenced_effects_are_not_judged_by_grant_order() -> None:
    """Under effect_fence "token" the resource knows only epochs: a repeated one it must accept (the duplicate
    is the store's, and is reported); the commit, judged by the store, is still stale by grant order."""
    rows = (*claim(0, 1, 5), *claim(10, 2, 5), *op_rows(20, 1, "effect", carried("effect", 5)),
            *op_rows(30, 1, "commit", carried("commit", 5)))
    assert [(k, ops) for k, ops, _ in stale(tiny(*rows, effect_fence="token"))] == [("stale-commit", [0, 2, 6])]
    assert sorted((k, ops) for k, ops, _ in stale(tiny(*rows))) == [("stale-commit", [0, 2, 6]), ("stale-effect", [0, 2, 4])]


def test_the_own_process_grant_is_the_latest_of_its_own() -> None:
    """A re-claims and is granted 5 again after B's grant: its op belongs to its own latest grant, after B's."""
    lines = tiny(*claim(0, 1, 5), *claim(10, 2, 5), *claim(20, 1, 5), *op_rows(30, 1, "renew", {"epoch": 5}))
    assert stale(lines) == []


# -- properties ----------------------------------------------------------------------------------------


def _nodes(lines: list[str]) -> dict[str, list[Op]]:
    _, ops, _ = read_history(lines)
    by: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        by[op.node].append(op)
    return by


@given(lines=sim_histories(fenced=True))
def test_a_correct_store_never_meets_the_rule(lines: list[str]) -> None:
    """Epochs strictly increase with grant order: no node is proven otherwise, nothing is judged by grant order."""
    note(render(lines))
    for nops in _nodes(lines).values():
        ok = [op for op in nops if op.type == "ok" and int_epoch(op)]
        assert non_increasing_since([op for op in ok if op.f == "claim"], MaxBefore(ok, key=lambda o: o.epoch)) is None
    verdict = check_source(lines)
    assert verdict.valid is True, [(a.kind, a.ops, a.explanation) for a in verdict.anomalies]


def _verify_grant_finding(kind: str, cited: list[Op]) -> None:
    """The three cited ops prove it: the lease's claim granted the op's epoch before the newer claim was invoked,
    the newer one completed before the op was invoked, and got an epoch no larger (the regression itself)."""
    lease, newer, op = cited
    assert kind == f"stale-{op.f}" and op.type == "ok"
    assert lease.f == newer.f == "claim" and lease.type == newer.type == "ok"
    assert lease.epoch == op.epoch and lease.complete_time < op.invoke_time
    assert lease.complete_time < newer.invoke_time and newer.complete_time < op.invoke_time
    assert newer.epoch <= lease.epoch


@given(lines=sim_histories(fenced=True), data=st.data())
def test_a_planted_zombie_after_a_repeated_or_lower_epoch_is_found_by_grant_order(lines: list[str],
                                                                                    data: st.DataObject) -> None:
    """After a simulated run: A granted E, B (invoked after it) granted E or lower, A's op with E accepted."""
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    pl = _Planter(lines, rng)
    node = pl.pick_node()
    e = pl.max_epoch(node) + 2
    a = pl.process()
    a_claim = pl.claim(node, e, process=a)
    pl.wait(pl.ttl + pl.cu + MS)
    b_claim = pl.claim(node, rng.choice([e, e - 1]))
    f = rng.choice(["renew", "commit", "effect"])
    v = pl.op(f, node, carried(f, e), "ok", process=a)
    planted = pl.lines()
    note(render(planted))
    verdict = check_source(planted)
    mine = [x for x in verdict.anomalies if v in x.ops and x.kind.startswith("stale-")]
    token = json.loads(planted[0]).get("effect_fence") == "token"
    if f == "effect" and token:
        assert mine == []
    else:
        assert [(x.kind, x.ops) for x in mine] == [(f"stale-{f}", [a_claim, b_claim, v])]
        assert BY_GRANT in mine[0].explanation
    _, ops, _ = read_history(planted)
    by_index = {op.index: op for op in ops}
    for x in verdict.anomalies:
        if BY_GRANT in x.explanation:
            _verify_grant_finding(x.kind, [by_index[i] for i in x.ops])
    online, proofs = follow(planted, probe_every=1)
    assert online.to_json() == verdict.to_json()
    assert all(p.anomaly in verdict.anomalies for p in proofs if p.early and not p.provisional)
