"""``leasecheck summary``: run folders from several stores merged into one table, judged against expectations.

Two real runs in two stores (the SQLite reference, valid; its TTL-only variant,
invalid) are summarised as they are, with expectations from a spec, from the
expected.json a matrix leaves, and after the damage a CI artifact does (the
``latest`` symlink turned into a copy, a results.json cut short).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from junit_schema import read

from leasecheck.ci.table import html_page, shared_folder
from leasecheck.cli import main
from leasecheck.verdict.outcomes import Expectation, Row, write_expected

QUICK = ["--time-limit", "4", "--ttl", "300", "--nemesis-interval", "0.8", "--nodes", "10", "--evidence-wait", "20"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Store ``a``: sqlite seed 1 (valid); store ``b``: sqlite-ttl-only seed 1 (invalid). Both runs at once."""
    base = tmp_path_factory.mktemp("stores")
    procs = {
        name: subprocess.Popen([sys.executable, "-m", "leasecheck", "run", "--target", target, "--seed", "1", *QUICK,
                                "--store", str(base / name), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, target in (("a", "sqlite"), ("b", "sqlite-ttl-only"))
    }
    dirs = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == (0 if name == "a" else 1), err
        dirs[name] = Path(json.loads(out)["run_dir"])
    return {"a": base / "a", "b": base / "b", "run_a": dirs["a"], "run_b": dirs["b"]}


def fresh(stores: dict[str, Path], tmp_path: Path) -> tuple[Path, Path]:
    """Copies of the two stores (symlinks kept) that a test may change."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(stores["a"], a, symlinks=True)
    shutil.copytree(stores["b"], b, symlinks=True)
    return a, b


def cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["summary", *args], catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def rows_of(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


SPEC = """
[defaults]
seeds = [1]
[[entry]]
target = "sqlite"
nemesis = ["pause"]
[[entry]]
target = "sqlite-ttl-only"
nemesis = ["pause"]
expect = "invalid"
kinds = ["stale-commit"]
"""


def test_two_stores_without_expectations(stores: dict[str, Path]) -> None:
    """No expectation anywhere: a run is expected valid, so the caught bug is a mismatch (exit 1)."""
    code, out, err = cli(str(stores["a"]), str(stores["b"]), "--json")
    assert code == 1, err
    rows = rows_of(out)
    assert [(r["target"], r["seed"], r["verdict"], r["match"]) for r in rows] == [
        ("sqlite", 1, "valid", True), ("sqlite-ttl-only", 1, "invalid", False)]
    ttl = rows[1]
    results = json.loads((stores["run_b"] / "results.json").read_text())
    assert ttl["kinds"] and set(ttl["kinds"]) == set(results["stats"]["anomalies"])
    assert ttl["anomalies_counted"] == sum(results["stats"]["anomalies"].values())
    assert ttl["expected"] == {"verdict": "valid", "kinds": [], "source": "default"}
    first = ttl["first_anomaly"]
    assert first["ops"] == min((a["ops"] for a in results["anomalies"]), key=lambda ops: (max(ops), ops))
    assert ttl["seconds"] == results["run"]["seconds"]
    assert ttl["run_dir"] == str(stores["run_b"]) and ttl["report"] == str(stores["run_b"] / "report.html")
    assert "--seed 1" in ttl["command"] and "--json" not in ttl["command"]


def test_a_valid_run_whose_history_was_cut_since_is_unknown_naming_the_line(stores: dict[str, Path], tmp_path: Path) -> None:
    """A cut history is never valid, whoever reads the run folder: summary re-reads the end of a history whose
    results.json says valid (a copy that stopped half way, a disk that filled) and says unknown, naming the line."""
    a, _ = fresh(stores, tmp_path)
    run = a / stores["run_a"].relative_to(stores["a"])
    history = run / "history.jsonl"
    data = history.read_bytes()
    cut_at = len(data) // 2
    history.write_bytes(data[:cut_at])
    # the cut line, or, cut right after a newline, the last whole line (where the promised history-end is missing)
    line = data[:cut_at].count(b"\n") + (0 if data[cut_at - 1:cut_at] == b"\n" else 1)
    code, out, err = cli(str(a), "--json")
    assert code == 2, err
    (row,) = rows_of(out)
    assert row["verdict"] == "unknown" and row["match"] is False
    assert row["reason"].startswith(f"{history}:{line}: ") and "a cut history is never valid" in row["reason"]
    history.write_bytes(data)  # whole again: valid as judged
    code, out, _ = cli(str(a), "--json")
    assert code == 0 and rows_of(out)[0]["verdict"] == "valid"


def test_spec_supplies_the_expectations(stores: dict[str, Path], tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    code, out, err = cli(str(stores["a"]), str(stores["b"]), "--spec", str(spec), "--markdown")
    assert code == 0, out + err
    assert "2 runs: 2 as expected" in out
    assert re.search(r"\| sqlite-ttl-only \| pause \| 1 \| invalid \| invalid \(stale-commit\) \| yes \| [a-z-, ]*stale-commit", out), out
    # a cell of the spec with no run is an error row: the shard that should have run it is gone
    spec.write_text(SPEC.replace("seeds = [1]", "seeds = [1, 2]"))
    code, out, _ = cli(str(stores["a"]), str(stores["b"]), "--spec", str(spec), "--json")
    assert code == 4
    missing = [r for r in rows_of(out) if r["verdict"] == "missing"]
    assert sorted((r["target"], r["seed"]) for r in missing) == [("sqlite", 2), ("sqlite-ttl-only", 2)]
    assert all(r["outcome"] == "error" and not r["match"] for r in missing)


def test_expected_json_left_in_the_run_folder_is_used(stores: dict[str, Path], tmp_path: Path) -> None:
    a, b = fresh(stores, tmp_path)
    [run_b] = (b / "sqlite-ttl-only").iterdir()
    write_expected(run_b, Expectation("invalid", ("stale-commit",)))
    code, out, _ = cli(str(a), str(b), "--json")
    assert code == 0
    assert [r["expected"]["source"] for r in rows_of(out)] == ["default", "expected.json"]
    write_expected(run_b, Expectation("invalid", ("stuck-lease",)))  # a kind this run never shows
    code, out, _ = cli(str(a), str(b), "--json")
    assert code == 1
    [row] = [r for r in rows_of(out) if not r["match"]]
    assert row["outcome"] == "failure" and row["message"].endswith("never found: stuck-lease")


def test_latest_is_not_counted_twice_even_as_a_copy(stores: dict[str, Path], tmp_path: Path) -> None:
    """``store/latest`` is a symlink; a CI artifact turns it into a copy of the run. Either way: one row per run."""
    a, b = fresh(stores, tmp_path)
    assert (b / "latest").is_symlink()
    code, out, _ = cli(str(b / "latest"), str(b), str(a), "--json")
    assert code == 1
    assert [Path(r["run_dir"]).parent.name for r in rows_of(out)] == ["sqlite", "sqlite-ttl-only"]  # by its own path
    copied = tmp_path / "artifact"
    shutil.copytree(b, copied, symlinks=False)
    assert not (copied / "latest").is_symlink() and (copied / "latest" / "results.json").is_file()
    code, out, _ = cli(str(copied), str(a), "--json")
    rows = rows_of(out)
    assert len(rows) == 2 and "latest" not in Path(rows[1]["run_dir"]).parts


def test_unreadable_and_failed_runs_are_one_line_error_rows(stores: dict[str, Path], tmp_path: Path) -> None:
    a, b = fresh(stores, tmp_path)
    [run_a] = (a / "sqlite").iterdir()
    (run_a / "results.json").write_text('{"valid": tru')  # cut short
    failed = b / "postgres" / "20260101T000000.000000Z"
    failed.mkdir(parents=True)
    (failed / "results.json").write_text(json.dumps({"status": "error", "reason": "postgres would not start:\nport in use",
                                                     "run_dir": str(failed), "history": False}))
    (failed / "test.json").write_text(json.dumps({"options": {"target": "postgres", "nemesis": ["kill"]}, "seed": 4}))
    code, out, err = cli(str(a), str(b))
    assert code == 4, out + err
    assert "Traceback" not in out + err
    code, out, _ = cli(str(a), str(b), "--json")
    errors = {r["target"]: r for r in rows_of(out) if r["verdict"] == "error"}
    assert errors["sqlite"]["reason"].startswith("results.json is unreadable: ") and "\n" not in errors["sqlite"]["reason"]
    assert errors["postgres"]["reason"] == "postgres would not start: port in use"
    assert (errors["postgres"]["seed"], errors["postgres"]["nemesis"]) == (4, ["kill"])


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                (self.hrefs if tag == "a" else self.external).append(value)


def test_html_and_junit_outputs(stores: dict[str, Path], tmp_path: Path) -> None:
    a, b = fresh(stores, tmp_path)
    page = tmp_path / "site" / "index.html"
    page.parent.mkdir()
    junit = tmp_path / "summary.xml"
    code, _, err = cli(str(a), str(b), "--html", str(page), "--junit", str(junit))
    assert code == 1, err
    text = page.read_text()
    links = _Links()
    links.feed(text)
    assert not links.external and "http" not in text  # self-contained: nothing fetched
    assert len(links.hrefs) == 2
    linked = set()
    for href in links.hrefs:
        assert href.startswith("../"), href  # relative: the artifact can move as a whole
        target = (page.parent / href).resolve()
        assert target.exists(), href
        linked.add(target.parent if target.name == "report.html" else target)  # the report, or the folder before it exists
    assert linked == {next((a / "sqlite").iterdir()).resolve(), next((b / "sqlite-ttl-only").iterdir()).resolve()}
    assert "expected valid, got" not in text and re.search(r"invalid: [a-z-, ]*stale-commit", text)  # default: no "expected"
    _, cases = read(junit)
    assert [c.outcome for c in cases] == ["pass", "failure"]
    assert "stale-commit" in cases[1].message and ", ops [" in cases[1].text


def test_nothing_to_summarise_is_exit_3(tmp_path: Path) -> None:
    code, _, err = cli(str(tmp_path))
    assert code == 3 and "no run folders" in err
    code, _, err = cli(str(tmp_path / "nope"))
    assert code == 3 and "no such file" in err and len(err.strip().splitlines()) == 1


def test_the_html_page_names_each_run_folder_from_the_folder_they_share(tmp_path: Path) -> None:
    """CI downloads put runs deep in a workspace: the shared prefix is said once, the cells hold the rest (full path as their title),
    and long cells may break (at separators first) so that the table fits the window (the browser test measures it)."""
    store = tmp_path / "artifacts" / "shard-3-of-8" / "store"
    runs = [store / "sqlite" / "20260101T000000.000000Z", store / "mypkg.lease:MyLease" / "20260101T000001.000000Z"]
    rows = [Row(target, ("pause", "kill"), 1, "valid", run_dir=run) for target, run in zip(("sqlite", "mypkg.lease:MyLease"), runs)]
    page = html_page(rows, tmp_path / "summary.html")
    assert f'<p>run folders in <code class="path" id="run-folders">{store}</code></p>' in page
    shown = re.findall(r'<code class="path" title="([^"]*)">(.*?)</code>', page)
    assert [(title, text.replace("<wbr>", "")) for title, text in shown] == [(str(r), str(r.relative_to(store))) for r in runs]
    assert "mypkg.<wbr>lease:<wbr>MyLease" in page and "pause,<wbr>kill" in page  # break opportunities in names and lists
    assert "table { border-collapse: collapse; width: 100%; }" in page and "overflow-wrap: anywhere" in page
    assert shared_folder(rows[:1]) == runs[0].parent  # one run: its folder's folder
    assert shared_folder([Row("sqlite", (), 1, "valid", run_dir=Path("store/a")), Row("sqlite", (), 2, "valid", run_dir=runs[0])]) is None
