"""The suite's own order (tests/support/schedule.py): longest modules first, each module whole and in its own order; the
pure tier (tests/support/tiers.py) beside the rest in CI, guarded, failing the suite fast."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import REPO, TESTS
from schedule import DURATIONS, known_durations, longest_modules_first, module_of
from tiers import FOLDERS, NOT_ROOMS, TIERS, in_tier, tier_of


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
    assert all((REPO / module_of(nodeid)).exists() for nodeid in known), "durations of modules gone"
    assert known_durations(REPO / "no-such-file.json") == {}
    assert json.loads(DURATIONS.read_text()) == dict(sorted(known.items()))


def test_every_test_module_is_in_one_tier_folder_and_the_pure_folders_mirror_the_rooms() -> None:
    """tests/README.md's layout, held: no test module outside a tier folder (nor in support/), each in exactly one
    tier; pure/'s folders are rooms of the package (or its root modules, the benchmarks, the suite)."""
    import leasecheck

    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 90, modules
    for path in modules:
        folder = tier_of(path)
        assert folder is not None, f"{path.relative_to(TESTS)}: a test module goes into a tier folder ({', '.join(FOLDERS)})"
        assert [t for t in TIERS if in_tier(path, t)] == [folder] + ([] if folder == "pure" else ["rest"]), path
    helpers = [p.name for p in TESTS.glob("*.py") if p.name != "conftest.py"]
    assert not helpers, f"helpers go into tests/support/: {helpers}"
    package = Path(leasecheck.__file__).resolve().parent
    rooms = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    pure = {p.parent.relative_to(TESTS / "pure").parts[0] for p in (TESTS / "pure").rglob("test_*.py")}
    assert pure - set(NOT_ROOMS) <= rooms, pure - rooms
    assert in_tier(__file__, "pure") and not in_tier(TESTS / "runs" / "test_run.py", "pure")
    assert not in_tier(TESTS / "support" / "sim.py", "rest"), "a helper is in no tier"


def test_a_pure_tier_test_that_starts_a_process_fails(starts_nothing: None) -> None:
    """The guard every pure-tier test runs under (``--tier pure``): a process start is the test's failure."""
    with pytest.raises(AssertionError, match="pure tier started a process"):
        subprocess.run(["true"], check=False)
    with pytest.raises(AssertionError, match="pure tier started a process"):
        os.fork()
