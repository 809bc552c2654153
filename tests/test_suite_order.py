"""The suite's own order (tests/schedule.py): longest modules first, each module whole and in its own order; the
pure tier (tests/tiers.py) beside the rest in CI, guarded, failing the suite fast."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from schedule import DURATIONS, known_durations, longest_modules_first, module_of
from tiers import PURE, in_tier


@dataclass
class Item:
    nodeid: str


def test_modules_go_longest_first_whole_and_in_their_own_order() -> None:
    items = [Item(n) for n in ("a.py::1", "a.py::2", "b.py::1", "c.py::1", "b.py::2", "d.py::1")]
    durations = {"a.py::1": 1.0, "a.py::2": 1.0, "b.py::1": 0.5, "b.py::2": 9.0, "c.py::1": 4.0}
    ordered = [i.nodeid for i in longest_modules_first(items, durations)]  # type: ignore[arg-type]
    # b (9.5 s) whole, c (4), a (2), then d, unknown, last
    assert ordered == ["b.py::1", "b.py::2", "c.py::1", "a.py::1", "a.py::2", "d.py::1"]


def test_the_stored_durations_name_this_suite_s_modules() -> None:
    """A stale file only costs time, but one that names no module of ours orders nothing: keep it current."""
    known = known_durations()
    assert known, f"{DURATIONS} is missing: python -m pytest -n 3 --store-durations"
    root = Path(__file__).resolve().parent.parent
    assert all((root / module_of(nodeid)).exists() for nodeid in known), "durations of modules gone"
    assert known_durations(root / "no-such-file.json") == {}
    assert json.loads(DURATIONS.read_text()) == dict(sorted(known.items()))


def test_the_tiers_split_the_suite_and_the_pure_tier_names_real_modules() -> None:
    tests = Path(__file__).resolve().parent
    modules = sorted(p.name for p in tests.glob("test_*.py"))
    assert set(PURE) <= set(modules) and len(set(PURE)) == len(PURE)
    for name in modules:  # every module in exactly one tier
        assert in_tier(str(tests / name), "pure") != in_tier(str(tests / name), "rest")
    assert in_tier(__file__, "pure") and not in_tier(str(tests / "test_run.py"), "pure")


def test_a_pure_tier_test_that_starts_a_process_fails(starts_nothing: None) -> None:
    """The guard every pure-tier test runs under (``--tier pure``): a process start is the test's failure."""
    with pytest.raises(AssertionError, match="pure tier started a process"):
        subprocess.run(["true"], check=False)
    with pytest.raises(AssertionError, match="pure tier started a process"):
        os.fork()
