"""The docs cannot drift from the tool: generated parts regenerated, samples taken again, links and citations real.

- The blocks ``leasecheck.docgen`` generates (the ``run`` synopsis and its options, the
  fault table, the command-line reference) are regenerated from the CLI and the fault
  catalogue and must be the page's text.
- Every sample of a command's output (a ``console`` block with more than ``$`` lines) is
  marked ``<!-- sample: NAME -->``; this test runs the command it shows and every line of
  the sample must have the shape of a line the real output has (numbers, paths, run ids
  and the names of kinds, faults and fail reasons may differ: see :func:`shape`), so a
  page never shows a line the tool does not print.
- A block marked ``<!-- file: PATH -->`` is that file, word for word.
- No file cites ``DESIGN.md`` (it is not in the repository): the contracts are
  ``docs/contracts/``, and every ``docs/...md`` the code cites exists.
- Every page is in the nav of ``mkdocs.yml``, every nav entry is a page, and the
  README's links lead somewhere (``mkdocs build --strict`` in ``.ci/run`` checks the pages' own).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import REPO
from shapes import label, shape

from leasecheck import docgen

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
README = REPO / "README.md"
#: a run, the matrix or pytest in a child: generous, a loaded CI machine is slow
TIMEOUT_S = 600


def rel(p: Path) -> str:
    return str(p.relative_to(REPO))


# -- generated blocks ----------------------------------------------------------------------------------


def test_generated_blocks_are_what_the_code_generates() -> None:
    found = 0
    for page in [*PAGES, README, REPO / "tests" / "README.md"]:
        for name, text in docgen.blocks(page.read_text(encoding="utf-8")):
            found += 1
            assert text == docgen.render(name), (
                f"{rel(page)}: the generated block {name!r} differs from the code: run `python -m leasecheck.docgen`"
            )
    assert found >= 6, "the run synopsis, its options, the fault table and the CLI reference are generated blocks"


def test_the_run_synopsis_names_every_option_of_run() -> None:
    """Held without docgen's help: every option ``leasecheck run --help`` lists is in the synopsis and its table."""
    from click.testing import CliRunner

    from leasecheck.cli import main

    helptext = CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output
    flags = set(re.findall(r"^\s+(--[a-z][a-z-]*)", helptext, re.M)) - {"--help"}
    assert len(flags) >= 20, flags
    page = (DOCS / "running.md").read_text()
    blocks = dict(docgen.blocks(page))
    usage, table = blocks["usage run"], blocks["options run"]
    for flag in sorted(flags):
        assert re.search(rf"\[{flag}[ \]]", usage), f"docs/running.md's synopsis lacks {flag}"
        assert f"| `{flag}`" in table, f"docs/running.md's option table lacks {flag}"
    assert "--nemesis pause,kill" not in usage, "the synopsis shows values, not a non-default --nemesis"


def test_docgen_check_mode_names_a_stale_page(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("<!-- generated: faults -->\n| stale |\n<!-- end generated -->\n")
    (tmp_path / "README.md").write_text("# none\n")
    assert docgen.main(["--root", str(tmp_path), "--check"]) == 1
    assert docgen.main(["--root", str(tmp_path)]) == 0
    assert docgen.blocks(page.read_text()) == [("faults", docgen.faults())]
    assert docgen.main(["--root", str(tmp_path), "--check"]) == 0


# -- samples of real output ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    """One marked sample of output on a page: the command it shows and the lines under it."""

    name: str
    page: Path
    command: str
    lines: tuple[str, ...]


_SAMPLE = re.compile(r"<!-- sample: (?P<name>[\w-]+) -->\n```console\n(?P<body>.*?)\n```", re.S)
_CONSOLE = re.compile(r"^```console\n(?P<body>.*?)\n```", re.S | re.M)


def samples() -> list[Sample]:
    found = []
    for page in [*PAGES, README]:
        for m in _SAMPLE.finditer(page.read_text(encoding="utf-8")):
            first, *rest = m.group("body").splitlines()
            assert first.startswith("$ "), f"{rel(page)}: sample {m.group('name')} does not start with its command"
            found.append(Sample(m.group("name"), page, first[2:], tuple(rest)))
    return found


def _leasecheck(*args: str, cwd: Path, expect: tuple[int, ...]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS"))}
    r = subprocess.run([sys.executable, "-m", "leasecheck", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert r.returncode in expect, f"leasecheck {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def _run_sample(where: Path) -> str:
    """``leasecheck run --seed 42`` (30 s: the CLI's defaults reach every situation of the coverage line), with time
    to gather the evidence a valid verdict needs on a loaded machine."""
    return _leasecheck("run", "--seed", "42", "--evidence-wait", "60", cwd=where, expect=(0,))


def _matrix_smoke(where: Path) -> str:
    (where / "examples" / "matrix").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "examples" / "matrix" / "smoke.toml", where / "examples" / "matrix" / "smoke.toml")
    return _leasecheck("matrix", "examples/matrix/smoke.toml", "--jobs", "2", "--junit", "junit.xml", cwd=where, expect=(0,))


def _matrix_refused(where: Path) -> str:
    """A nightly spec whose 7th entry asks for a store fault on SQLite: refused before anything runs."""
    good = "".join(f'[[entry]]\nname = "reference {i}"\ntarget = "sqlite"\nnemesis = ["pause"]\nseeds = [{i}]\n\n' for i in range(1, 7))
    bad = '[[entry]]\nname = "broken sqlite"\ntarget = "sqlite-ttl-only"\nnemesis = ["pause,kill-store"]\nexpect = "invalid"\nseeds = [1]\n'
    (where / "nightly.toml").write_text('name = "nightly"\n\n' + good + bad)
    return _leasecheck("matrix", "nightly.toml", cwd=where, expect=(3,))


def _pytest_sample(where: Path) -> str:
    """The worked example of docs/pytest.md: its test file as the page has it, its AcmeLease a broken variant."""
    page = (DOCS / "pytest.md").read_text()
    test_file = re.search(r"```python\n(# test_acme_under_faults\.py\n.*?)```", page, re.S)
    assert test_file, "docs/pytest.md has no test_acme_under_faults.py block"
    (where / "test_acme_under_faults.py").write_text(test_file.group(1))
    (where / "acme_lease.py").write_text(
        "from leasecheck.targets.broken_sqlite import TtlOnlySqlite\n\n\n"
        "class AcmeLease(TtlOnlySqlite):\n    name = 'acme'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS"))}
    r = subprocess.run([sys.executable, "-m", "pytest", "--leasecheck-store", "store", "-p", "no:cacheprovider"],
                       cwd=where, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, f"the worked example's test did not fail: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def _check(*args: str) -> Callable[[Path], str]:
    return lambda where: _leasecheck("check", *args, cwd=REPO, expect=(1,))


@dataclass(frozen=True)
class Source:
    """How a sample's real output is made: the command the page must show, and what runs it."""

    command: str
    #: runs it in a scratch folder, and gives its output (stdout, then stderr)
    make: Callable[[Path], str]
    #: compare lines by their first words only (for output whose explanations vary with the anomalies found)
    loose: bool = False


SOURCES: dict[str, Source] = {
    "run": Source("leasecheck run --seed 42", _run_sample),
    "check": Source("leasecheck check histories/examples/stale-commit-after-takeover.jsonl",
                    _check("histories/examples/stale-commit-after-takeover.jsonl")),
    "check-explain": Source("leasecheck check histories/examples/stale-commit-after-takeover.jsonl --explain",
                            _check("histories/examples/stale-commit-after-takeover.jsonl", "--explain")),
    "matrix-smoke": Source("leasecheck matrix examples/matrix/smoke.toml --jobs 2 --junit junit.xml", _matrix_smoke),
    "matrix-refused": Source("leasecheck matrix nightly.toml", _matrix_refused),
    "pytest": Source("pytest --leasecheck-store store", _pytest_sample, loose=True),
    "run-fail-fast": Source("leasecheck run --target sqlite-fence-at-commit --fail-fast",
                            lambda where: _leasecheck("run", "--target", "sqlite-fence-at-commit", "--fail-fast", cwd=where,
                                                      expect=(1,)), loose=True),
}


@pytest.fixture(scope="module")
def real_output(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[str, Path]]:
    """Each source's real output and the folder it ran in, made once per module."""
    made: dict[str, tuple[str, Path]] = {}

    def get(name: str) -> tuple[str, Path]:
        if name not in made:
            where = tmp_path_factory.mktemp(name)
            made[name] = (SOURCES[name].make(where), where)
        return made[name]

    return get


def test_every_output_sample_is_marked_and_has_a_source() -> None:
    """A console block that shows output is a sample this test takes again; a block of commands alone is not."""
    for page in [*PAGES, README]:
        text = page.read_text(encoding="utf-8")
        marked = {m.start("body") for m in _SAMPLE.finditer(text)}
        for m in _CONSOLE.finditer(text):
            output = [line for line in m.group("body").splitlines() if line.strip() and not line.startswith("$ ")]
            if output:
                assert m.start("body") in marked, f"{rel(page)}: a console block shows output but is no marked sample: {output[0]!r}"
    names = {s.name for s in samples()}
    assert names <= SOURCES.keys(), f"samples with no source in this test: {names - SOURCES.keys()}"
    assert {"run", "matrix-smoke", "pytest", "check-explain"} <= names


def test_the_shape_of_a_line() -> None:
    assert shape("refusals    held 18, stale 62, terminal 3") == shape("refusals    stale 7, expired 1") == "refusals WS"
    assert shape("store       /tmp/x/store/sqlite/20261201T203212.590359Z") == "store PATH"
    assert shape("  stale-commit on node bb3579b4e906/run-2/node-1, ops [258, 264]:") == "WS on node H/run-N/node-N, ops [N]:"
    # a proof's ops, two or three: which kind of anomaly a run proves first varies with the run
    assert shape("first anomaly: duplicate-commit, ops [206, 234]") == shape("first anomaly: stale-commit, ops [188, 333, 375]")
    assert shape("┏━━━━┳━━━━━━━━┓") == "┏━┳━┓"
    assert shape("ops         1,123 (1,069 ok, 54 fail, 0 info)") != shape("ops       743")


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_samples_show_only_lines_the_tool_prints(name: str, real_output: Callable[[str], tuple[str, Path]]) -> None:
    shown = [s for s in samples() if s.name == name]
    assert shown, f"no page shows the sample {name!r}"
    source = SOURCES[name]
    real = real_output(name)[0].splitlines()
    shapes = {shape(line) for line in real}
    labels = {label(line) for line in real}
    for sample in shown:
        assert sample.command == source.command, f"{rel(sample.page)}: sample {name} shows `{sample.command}`, this test runs `{source.command}`"
        for line in sample.lines:
            if not line.strip() or line.strip() == "...":
                continue
            ok = shape(line) in shapes or (source.loose and label(line) in labels)
            assert ok, (f"{rel(sample.page)}: sample {name} shows a line `{source.command}` does not print:\n  {line}\n"
                        f"shaped: {shape(line)}\nthe real output:\n" + "\n".join(real))


def test_the_run_folder_listing_names_what_a_run_leaves(real_output: Callable[[str], tuple[str, Path]]) -> None:
    """docs/running.md's listing of a run folder: what a SQLite run always leaves is listed, and is there."""
    page = (DOCS / "running.md").read_text()
    listing = re.search(r"```\nstore/sqlite/[^\n]*/\n(.*?)```", page, re.S)
    assert listing, "docs/running.md has no run folder listing"
    listed = {line.split()[0] for line in listing.group(1).splitlines() if line.strip()}
    run_dir = (real_output("run")[1] / "store" / "latest").resolve()
    always = {"history.jsonl", "results.json", "test.json", "report.html", "leasecheck.log", "faults.json", "mp-tempdir", "lease.sqlite3"}
    assert always <= listed, always - listed
    for name in always:
        assert (run_dir / name).exists(), f"docs/running.md lists {name}, a run left none in {run_dir}"
    for name in ("latency", "rate"):
        assert f"{name}.png/.svg" in listed and (run_dir / f"{name}.png").exists() and (run_dir / f"{name}.svg").exists()


# -- quoted files, citations, the nav, links -----------------------------------------------------------

_FILE = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```\w*\n(?P<body>.*?)```", re.S)


def test_quoted_files_are_the_files() -> None:
    quoted = 0
    for page in PAGES:
        for m in _FILE.finditer(page.read_text()):
            quoted += 1
            assert m.group("body") == (REPO / m.group("path")).read_text(), f"{rel(page)}: its copy of {m.group('path')} differs"
    assert quoted


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    suffixes = {".py", ".md", ".go", ".js", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".sh", ""}
    return [REPO / n for n in listed if n and Path(n).suffix in suffixes and (REPO / n).is_file()]


def test_nothing_cites_a_design_document_outside_the_repository() -> None:
    """The contracts are in docs/contracts/: a citation of DESIGN.md points at a file nobody who clones can read."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    citing = []
    for path in _tracked_text_files():
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"DESIGN(\.md|'s)", line):
                citing.append(f"{rel(path)}:{n}: {line.strip()}")
    assert not citing, "cite the docs/contracts/ page instead:\n" + "\n".join(citing)


def test_every_docs_page_the_code_cites_exists() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    cited = 0
    for path in _tracked_text_files():
        for m in re.finditer(r"\bdocs/\w[\w/.-]*\.md", path.read_text(errors="replace")):
            cited += 1
            assert (REPO / m.group(0)).is_file(), f"{rel(path)} cites {m.group(0)}, which does not exist"
    assert cited


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def test_every_page_is_in_the_nav_and_every_entry_is_a_page() -> None:
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in PAGES if "_hooks" not in p.parts)
    assert sorted(nav) == pages


def _slug(heading: str) -> str:
    """A heading's anchor, as GitHub and MkDocs both make it for plain headings."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", text)


def test_the_readme_is_a_front_page_whose_links_lead_somewhere() -> None:
    text = README.read_text()
    assert 100 <= len(text.splitlines()) <= 200, "the README is a front page: what it is, the two commands, examples, links"
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", text)
    assert len(links) > 20
    for target, anchor in links:
        if "://" in target:
            continue
        path = REPO / target
        assert path.exists(), f"README.md links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, f"README.md links to {target}#{anchor}: no such heading"
    for page in sorted(p for p in PAGES if "_hooks" not in p.parts and "contracts" not in p.parts):
        if page.name != "index.md":
            assert f"docs/{page.relative_to(DOCS)}" in text, f"the README's map of the docs lacks {rel(page)}"
