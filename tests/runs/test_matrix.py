"""``leasecheck matrix``: the spec, its cells, the shards, and real matrices run end to end.

The end-to-end tests run real, short SQLite runs as the matrix's own
subprocesses: the smoke spec (examples/matrix/smoke.toml) must come out as
expected with exit 0; a spec with wrong expectations must exit 1 with the
mismatch in the table and in JUnit; an environment that fails is that cell's
error (exit 4), not a crashed matrix; SIGTERM stops the running cells and
never exits 0. The shards are checked to cover the product exactly once.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from junit_schema import properties, read
from paths import REPO

from leasecheck.ci.matrix import shard
from leasecheck.ci.spec import Cell, SpecError, load_spec
from leasecheck.cli import main
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.outcomes import Expectation

SMOKE = REPO / "examples" / "matrix" / "smoke.toml"
NIGHTLY = REPO / "examples" / "matrix" / "nightly.toml"

#: the smoke spec's run settings, for specs written by the tests
QUICK = """
[defaults]
seeds = [1]
time-limit = 4
ttl = 300
nemesis-interval = 0.8
nodes = 10
evidence-wait = 20
"""


def spec_file(tmp_path: Path, body: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def matrix(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leasecheck", "matrix", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


# ------------------------------------------------------------------ the spec


def test_cells_are_the_product_in_canonical_order(tmp_path: Path) -> None:
    path = spec_file(tmp_path, """
name = "demo"
[defaults]
seeds = [3, 1]
time-limit = 5
ttl = 300

[[entry]]
targets = ["sqlite-ttl-only", "sqlite"]
nemesis = ["pause,kill", "none"]
nodes = 7

[[entry]]
name = "broken"
target = "sqlite-fence-at-commit"
nemesis = [["pause"]]
seeds = [2]
time_limit = 9
expect = "invalid"
kinds = ["stale-effect"]
""")
    spec = load_spec(path)
    assert spec.name == "demo"
    assert [(c.target, c.nemesis, c.seed) for c in spec.cells] == [
        # by target, then the sorted fault set ("" for none, "kill,pause"), then seed; the spec's order does not count
        ("sqlite", (), 1), ("sqlite", (), 3), ("sqlite", ("pause", "kill"), 1), ("sqlite", ("pause", "kill"), 3),
        ("sqlite-fence-at-commit", ("pause",), 2),
        ("sqlite-ttl-only", (), 1), ("sqlite-ttl-only", (), 3),
        ("sqlite-ttl-only", ("pause", "kill"), 1), ("sqlite-ttl-only", ("pause", "kill"), 3),
    ]
    first, broken = spec.cells[0], spec.cells[4]
    # defaults merged under the entry's own options; names as leasecheck run spells them; a cell expected valid fails fast
    # and goes on until covered
    assert dict(first.options) == {"time-limit": 5, "ttl": 300, "nodes": 7, "fail-fast": True, "until-covered": True}
    assert dict(broken.options) == {"time-limit": 9, "ttl": 300}
    assert first.expected == Expectation("valid", (), "spec")
    assert broken.expected == Expectation("invalid", ("stale-effect",), "spec") and broken.entry == "broken"
    assert broken.argv(Path("/s"))[1:] == ["-P", "-m", "leasecheck", "run", "--target", "sqlite-fence-at-commit", "--nemesis", "pause",
                                           "--time-limit", "9", "--ttl", "300", "--seed", "2", "--store", "/s", "--json"]
    assert first.run_args()[:4] == ["--target", "sqlite", "--nemesis", "none"]
    assert spec.cells[2].run_args()[:4] == ["--target", "sqlite", "--nemesis", "pause,kill"]  # the spec's own order


def test_the_example_specs_are_valid() -> None:
    smoke = load_spec(SMOKE)
    assert {(c.target, c.expected.verdict) for c in smoke.cells} == {("sqlite", "valid"), ("sqlite-ttl-only", "invalid")}
    assert len(smoke.cells) == 4
    nightly = load_spec(NIGHTLY, check_runs=False)  # its postgres/redis faults need servers only to run, not to read
    broken = [c for c in nightly.cells if c.expected.verdict == "invalid"]
    reference = [c for c in nightly.cells if c.expected.verdict == "valid"]
    assert broken and reference
    assert {c.target for c in reference} >= {"sqlite", "postgres", "redis"}


BAD_SPECS = {
    "not-toml": ("[defaults\nseeds = [1]", "not valid TOML"),
    "no-entries": ("[defaults]\nseeds = [1]\n", "no entries"),
    "unknown-top-key": ("entries = 3\n[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]", "unknown key 'entries'"),
    "unknown-option": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]\ntll=300", "entry 1 (sqlite): unknown option 'tll'"),
    "option-out-of-range": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]\nttl=5", "entry 1 (sqlite): "),
    "seed-in-spec": ("[defaults]\nseed=3\n[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]", "[defaults]: 'seed' cannot be set"),
    "unknown-target": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]\n[[entry]]\nname='typo'\ntarget='sqlit'\n"
                       "nemesis=['pause']\nseeds=[1]", "entry 2 (typo): sqlit under pause: unknown target 'sqlit'"),
    "unknown-fault": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause,pauze']\nseeds=[1]", "entry 1 (sqlite): sqlite under pause,pauze:"),
    "fault-the-store-cannot-get": ("[[entry]]\ntarget='sqlite'\nnemesis=['kill-store']\nseeds=[1]", "sqlite has no store server"),
    "no-seeds": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']", "entry 1 (sqlite): no seeds"),
    "seeds-not-a-list": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=3", "seeds = 3"),
    "nemesis-not-a-list": ("[[entry]]\ntarget='sqlite'\nnemesis='pause'\nseeds=[1]", "give a list of nemesis sets"),
    "empty-nemesis-set": ("[[entry]]\ntarget='sqlite'\nnemesis=['']\nseeds=[1]", "names no fault"),
    "bad-expect": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]\nexpect='broken'", "expect = 'broken'"),
    "unknown-kind": ("[[entry]]\ntarget='sqlite-ttl-only'\nnemesis=['pause']\nseeds=[1]\nexpect='invalid'\nkinds=['stale']",
                     "'stale' is no anomaly kind"),
    "kinds-without-invalid": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]\nkinds=['stale-commit']",
                              "need expect = \"invalid\""),
    "target-and-targets": ("[[entry]]\ntarget='sqlite'\ntargets=['sqlite']\nnemesis=['pause']\nseeds=[1]", "exactly one of them"),
    "duplicate-cell": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause,kill']\nseeds=[1]\n[[entry]]\ntarget='sqlite'\n"
                       "nemesis=['kill,pause']\nseeds=[1]\nttl=500", "entry 2 (sqlite): sqlite / kill,pause / seed 1 is also a cell of entry 1"),
    "flag-not-bool": ("[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]\nurl=3.5\nconcurrency=true", "concurrency = True"),
}


@pytest.mark.parametrize("body, message", BAD_SPECS.values(), ids=BAD_SPECS.keys())
def test_bad_spec_is_exit_3_with_one_line_naming_file_and_entry(tmp_path: Path, body: str, message: str) -> None:
    path = spec_file(tmp_path, body, "night.toml")
    code, out, err = cli("matrix", str(path), "--store", str(tmp_path / "store"))
    assert code == 3, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"leasecheck matrix: {path}: "), err
    assert message in lines[0], err
    assert not (tmp_path / "store").exists()  # nothing started


def test_missing_spec_file_is_exit_3(tmp_path: Path) -> None:
    code, _, err = cli("matrix", str(tmp_path / "nope.toml"))
    assert code == 3 and "nope.toml: cannot read it" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["0/4", "5/4", "1/0", "x", "2"])
def test_bad_shard_is_exit_3(value: str) -> None:
    code, _, err = cli("matrix", str(SMOKE), "--shard", value, "--dry-run")
    assert code == 3 and "--shard" in err and len(err.strip().splitlines()) == 1, err


def test_json_and_markdown_together_are_refused() -> None:
    code, _, err = cli("matrix", str(SMOKE), "--json", "--markdown", "--dry-run")
    assert code == 3 and "--json and --markdown" in err


# ------------------------------------------------------------------ shards


def _assert_partition(cells: list[Cell], n: int) -> None:
    shards = [shard(cells, i, n) for i in range(1, n + 1)]
    flat = [c.key for s in shards for c in s]
    assert sorted(flat, key=repr) == sorted((c.key for c in cells), key=repr), f"N={n}: not every cell exactly once"
    assert len(flat) == len(set(flat))
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1, sizes  # balanced
    assert shards == [shard(list(reversed(cells)), i, n) for i in range(1, n + 1)]  # the spec's order does not matter


def test_shards_cover_the_product_exactly_once_for_every_n(tmp_path: Path) -> None:
    path = spec_file(tmp_path, """
[defaults]
seeds = [1, 2, 3, 4]
[[entry]]
targets = ["sqlite", "sqlite-ttl-only", "sqlite-fence-at-commit"]
nemesis = ["pause", "kill", "pause,kill"]
""")
    cells = load_spec(path).cells
    assert len(cells) == 36
    for n in range(1, len(cells) + 5):  # including N larger than the product: the extra shards are empty
        _assert_partition(cells, n)


def test_shards_through_the_cli_cover_the_spec(tmp_path: Path) -> None:
    """``--dry-run --shard I/N --json`` for every I of a few N: each cell of the spec listed exactly once."""
    everything = [(c.target, c.nemesis, c.seed) for c in load_spec(SMOKE).cells]
    for n in (1, 3, 4, 7):
        listed = []
        for i in range(1, n + 1):
            code, out, err = cli("matrix", str(SMOKE), "--shard", f"{i}/{n}", "--dry-run", "--json", "--store", str(tmp_path / "s"))
            assert code == 0, err
            listed += [(o["target"], tuple(o["nemesis"]), o["seed"]) for o in map(json.loads, out.splitlines())]
        assert sorted(listed) == sorted(everything), n
    assert not (tmp_path / "s").exists()  # a dry run starts nothing


keys = st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.frozensets(st.sampled_from(["pause", "kill", "clock-bump"])),
                 st.integers(0, 50))


@given(st.sets(keys, max_size=40), st.integers(1, 45))
def test_shards_partition_any_product(cell_keys: set[tuple[str, frozenset[str], int]], n: int) -> None:
    cells = [Cell("e", t, tuple(sorted(f)), s, (), Expectation()) for t, f, s in cell_keys]
    _assert_partition(cells, n)


# ------------------------------------------------------------------ real matrices


def test_smoke_spec_end_to_end(tmp_path: Path) -> None:
    """The smoke spec with --jobs 2: every cell as expected, exit 0, expectations left in the run folders, JUnit clean."""
    r = matrix(str(SMOKE), "--jobs", "2", "--store", "store", "--junit", "junit.xml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    got = sorted((o["target"], o["seed"], o["verdict"], o["match"]) for o in rows)
    assert got == [("sqlite", 1, "valid", True), ("sqlite", 2, "valid", True),
                   ("sqlite-ttl-only", 1, "invalid", True), ("sqlite-ttl-only", 2, "invalid", True)]
    for o in rows:
        run_dir = Path(o["run_dir"])
        assert run_dir.parent.parent == tmp_path / "store"
        expected = json.loads(RunFolder(run_dir).expected.read_text())
        assert expected["verdict"] == ("valid" if o["target"] == "sqlite" else "invalid")
        assert expected["spec"] == str(SMOKE)
        results = json.loads((run_dir / "results.json").read_text())
        assert results["seed"] == o["seed"] and results["nemesis"] == ["pause"]
        if o["verdict"] == "invalid":
            assert "stale-commit" in o["kinds"] and o["first_anomaly"]["ops"]
    assert "4 runs: 4 as expected" in r.stderr  # the table (on stderr with --json)
    root, cases = read(tmp_path / "junit.xml")
    assert [c.name for c in cases] == ["sqlite / pause / seed 1", "sqlite / pause / seed 2",
                                       "sqlite-ttl-only / pause / seed 1", "sqlite-ttl-only / pause / seed 2"]
    assert all(c.outcome == "pass" for c in cases)
    assert root.get("tests") == "4" and root.get("failures") == "0" and root.get("errors") == "0"
    assert properties(root)["spec"] == str(SMOKE)


def test_wrong_expectations_exit_1_with_the_mismatch_in_table_and_junit(tmp_path: Path) -> None:
    """The TTL-only variant expected valid, and the reference expected to be caught: both are failures."""
    path = spec_file(tmp_path, QUICK + """
[[entry]]
target = "sqlite-ttl-only"
nemesis = ["pause"]

[[entry]]
target = "sqlite"
nemesis = ["pause"]
expect = "invalid"
kinds = ["stale-commit"]
""")
    r = matrix(str(path), "--jobs", "2", "--store", "store", "--junit", "junit.xml", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "2 runs: 0 as expected, 2 mismatched" in r.stdout
    assert "sqlite-ttl-only / pause / seed 1: expected valid, got invalid: " in r.stdout
    assert "sqlite / pause / seed 1: expected invalid (stale-commit), got valid" in r.stdout
    root, cases = read(tmp_path / "junit.xml")
    by = {c.name: c for c in cases}
    ttl = by["sqlite-ttl-only / pause / seed 1"]
    ref = by["sqlite / pause / seed 1"]
    # fails fast: its first kinds (a stale write, or the duplicate commit a zombie's late commit makes: by the seed and
    # the machine's pace, ci met both)
    assert ttl.outcome == "failure" and re.match(r"expected valid, got invalid: [a-z]+-[a-z-]+", ttl.message), ttl.message
    assert re.search(r"[a-z]+-[a-z-]+ on [0-9a-f]{12}/run-\d+/node-\d+, ops \[", ttl.text), ttl.text  # RUNID/run-N/node-I
    assert ref.outcome == "failure" and ref.message == "expected invalid (stale-commit), got valid: the expected anomalies were not found"
    assert root.get("failures") == "2"


def test_a_failed_environment_is_the_cells_error_not_a_crashed_matrix(tmp_path: Path) -> None:
    path = spec_file(tmp_path, """
[defaults]
seeds = [1, 2]
time-limit = 3
[[entry]]
target = "postgres"
url = "postgresql://leasecheck@127.0.0.1:1/none"
nemesis = ["pause"]
""")
    r = matrix(str(path), "--jobs", "2", "--store", "store", "--junit", "junit.xml", cwd=tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr
    _, cases = read(tmp_path / "junit.xml")
    assert len(cases) == 2
    for case in cases:
        assert case.outcome == "error" and "the environment failed" in case.message and "127.0.0.1" in case.message
    # the failed runs' folders still get their expectation (summary reads them later)
    assert len(list((tmp_path / "store").glob(f"postgres/*/{RunFolder.EXPECTED}"))) == 2


def test_sigterm_stops_the_cells_and_never_exits_0(tmp_path: Path) -> None:
    path = spec_file(tmp_path, """
[defaults]
seeds = [1, 2, 3]
time-limit = 60
[[entry]]
target = "sqlite"
nemesis = ["pause"]
""")
    proc = subprocess.Popen([sys.executable, "-m", "leasecheck", "matrix", str(path), "--store", "store", "--junit", "junit.xml"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "store").glob("sqlite/*/history.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the first cell should be running"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, alive
    _, cases = read(tmp_path / "junit.xml")
    assert [c.outcome for c in cases] == ["error", "skipped", "skipped"]
    assert "interrupted by SIGTERM" in cases[0].message
    assert "interrupted by SIGTERM: exit 143" in out
    [run_dir] = (tmp_path / "store" / "sqlite").iterdir()
    assert json.loads((run_dir / "results.json").read_text())["interrupted"] == "SIGTERM"
    assert json.loads((run_dir / "faults.json").read_text()) == {"active": []}  # the cell healed before it ended


def test_spec_error_wins_over_dry_run(tmp_path: Path) -> None:
    path = spec_file(tmp_path, "[[entry]]\ntarget='sqlite'\nnemesis=['pause']\nseeds=[1]\nnodes=0")
    with pytest.raises(SpecError, match="nodes"):
        load_spec(path)
    code, _, err = cli("matrix", str(path), "--dry-run")
    assert code == 3 and "entry 1 (sqlite)" in err


def test_the_github_workflow_runs_every_shard_of_an_existing_spec() -> None:
    """examples/github-actions/nightly.yml: shards 1..N of the nightly spec, merged by summary with its expectations."""
    workflow = (REPO / "examples" / "github-actions" / "nightly.yml").read_text()
    [spec] = re.findall(r"SPEC: (\S+)", workflow)
    assert (REPO / spec).is_file()
    [shards] = re.findall(r"shard: \[([\d, ]+)\]", workflow)
    numbers = [int(s) for s in shards.split(",")]
    runs = re.findall(r"leasecheck matrix \"\$SPEC\" --shard \$\{\{ matrix.shard \}\}/(\d+)(.*)", workflow)
    assert runs and all(int(n) == len(numbers) for n, _ in runs) and numbers == list(range(1, len(numbers) + 1))
    assert any("--store store --junit junit.xml" in rest for _, rest in runs)
    assert 'leasecheck summary nightly --spec "$SPEC" --markdown' in workflow and "$GITHUB_STEP_SUMMARY" in workflow
    assert "--html nightly/index.html" in workflow
    assert "redis-server postgresql libfaketime" in workflow  # the stores, as .ci/run installs them
