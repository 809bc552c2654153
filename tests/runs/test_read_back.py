"""Every node read back once the store is back (issue 34, item 4): what the history never read cleanly is named.

The rule (leasecheck/verdict/read_back.py) on hand-made histories, then real runs: a Redis backend under
``kill-store`` whose closing reads meet the store down, and a clean SQLite run that lists no node.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path

import pytest

from leasecheck.histories import read_history
from leasecheck.histories.format import NEMESIS, Event
from leasecheck.run.runner import Run, RunOptions, run
from leasecheck.verdict.read_back import ReadBack, read_back_gap

MS = 1_000_000


def _feed(*events: tuple[int, object, str, str, str | None, dict[str, object]]) -> ReadBack:
    rb = ReadBack()
    for i, (t, p, typ, f, node, value) in enumerate(events):
        rb.feed(Event(index=i, time=t * MS, process=p, type=typ, f=f, node=node, value=value))  # type: ignore[arg-type]
    return rb


def test_a_node_is_read_back_by_a_clean_ok_read_after_its_last_write() -> None:
    rb = _feed(
        (0, 1, "invoke", "commit", "a", {"epoch": 1, "result": "r"}), (1, 1, "ok", "commit", "a", {}),
        (2, 2, "invoke", "read", "a", {}), (3, 2, "ok", "read", "a", {"status": "SUCCEEDED", "epoch": 1}),
        (4, 1, "invoke", "commit", "b", {"epoch": 1, "result": "r"}), (5, 1, "ok", "commit", "b", {}),
        (6, 3, "invoke", "read", "b", {}), (7, 3, "info", "read", "b", {"error": "ConnectionError"}),  # failed: unread
        (8, 4, "invoke", "read", "c", {}), (9, 4, "ok", "read", "c", {"status": "READY"}),
        (10, 5, "invoke", "renew", "c", {"epoch": 1}), (11, 5, "fail", "renew", "c", {"reason": "stale"}),  # after the read
    )
    assert rb.unread() == ["b", "c"]
    rb.feed(Event(index=12, time=12 * MS, process=6, type="invoke", f="read", node="b", value={}))
    rb.feed(Event(index=13, time=13 * MS, process=6, type="ok", f="read", node="b", value={"status": "SUCCEEDED"}))
    assert rb.unread() == ["c"]  # read again, cleanly: read back


def test_a_read_a_store_fault_met_is_not_clean_and_one_after_the_heal_is() -> None:
    kill, start = {"fault": "kill-store", "victims": ["store"]}, {"fault": "kill-store", "victims": ["store"]}
    rb = _feed(
        (0, 1, "invoke", "commit", "a", {"epoch": 1, "result": "r"}), (1, 1, "ok", "commit", "a", {}),
        (2, 2, "invoke", "read", "a", {}), (3, NEMESIS, "info", "kill", None, kill),
        (4, 2, "ok", "read", "a", {"status": "SUCCEEDED", "epoch": 1}),  # answered, but the store was killed meanwhile
        (5, 3, "invoke", "read", "a", {}), (6, 3, "ok", "read", "a", {"status": "SUCCEEDED", "epoch": 1}),  # still out
    )
    assert rb.unread() == ["a"]
    rb.feed(Event(index=6, time=7 * MS, process=NEMESIS, type="info", f="start", node=None, value=start))
    rb.feed(Event(index=7, time=8 * MS, process=4, type="invoke", f="read", node="a", value={}))
    rb.feed(Event(index=8, time=9 * MS, process=4, type="ok", f="read", node="a", value={"status": "SUCCEEDED"}))
    assert rb.unread() == []
    assert read_back_gap(0, 1) is None and read_back_gap(1, 3) is None  # a few unread of many: named, not unknown
    assert read_back_gap(2, 2) == ("no node was read back cleanly after its last write (2 of 2 unread: every closing read "
                                   "failed or met a store fault), so no lost write could be proven")


def _reads(run_dir: Path) -> dict[str, list[str]]:
    _, ops, _ = read_history(run_dir / "history.jsonl")
    out: dict[str, list[str]] = defaultdict(list)
    for op in sorted(ops, key=lambda o: o.invoke_time):
        if op.f in ("read", "read-resource"):
            out[op.node].append(f"{op.f} {op.type}")
    return out


def test_a_node_whose_final_read_failed_is_read_again_once_the_store_answers(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A Redis run under kill-store whose store is down again as the final phase begins (killed for real, restarted a second
    after the final reads begin, on a thread): the first final read fails, the node is read again until the store answers, and
    results.json names no node, since every one was read back in the end."""
    real = Run._read_every_node

    def store_down_at_the_final_phase(self: Run) -> None:
        assert self.env is not None and self.env.server is not None
        self.env.server.kill()
        threading.Timer(self.timing.expiry_wait_s + 1.0, self.env.server.restart).start()  # after the final reads began
        real(self)

    monkeypatch.setattr(Run, "_read_every_node", store_down_at_the_final_phase)
    result = run(RunOptions(target="redis", nemesis=("kill-store",), seed=4, time_limit=6, nemesis_interval=1.5,
                            store=str(tmp_path / "store")))
    results = json.loads((result.run_dir / "results.json").read_text())
    reads = _reads(result.run_dir)
    failed = {node: types for node, types in reads.items() if any(t.endswith(" info") for t in types)}
    assert failed, "no final read met the store down"
    for node, types in failed.items():  # read again after its failure, and cleanly in the end
        assert types[-1] == "read ok", (node, types)
    assert results["unread_nodes"] == [] and results["unread_count"] == 0
    assert result.verdict.valid is True, results["reason"]


def test_a_clean_run_names_no_unread_node(tmp_path: Path) -> None:
    result = run(RunOptions(target="sqlite", seed=2, time_limit=5, store=str(tmp_path / "store")))
    results = json.loads((result.run_dir / "results.json").read_text())
    assert results["unread_nodes"] == [] and results["unread_count"] == 0
    assert results["valid"] is True
