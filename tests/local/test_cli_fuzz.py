"""The CLI under random options and random bad paths: an exit code of the contract, never a traceback.

docs/contracts/exit-codes.md's exit codes are what a CI gate acts on: 0 valid, 1 anomalies, 2
unknown, 3 bad input or usage, 4 the environment failed or leasecheck crashed.
Whatever a user (or an empty CI variable) types, every command must end in one
of them, saying why in a line, and never with a bare traceback. Most examples run
in-process (click's CliRunner, fast); a few run the console script as a
subprocess, which is what sees a traceback printed by a worker process.

``run`` is driven with one fuzzed option at a time over a tiny, fault-free SQLite
run, so that an example that happens to be valid still ends in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import EXAMPLES

from leasecheck.cli import main

CODES = {0, 1, 2, 3, 4}
VALID = EXAMPLES / "clean-run-three-nodes-four-workers.jsonl"

#: option values: empty, blank, numbers of every sign and size, words, separators, odd characters
junk = st.one_of(
    st.sampled_from(["", " ", ",", "0", "-1", "1e309", "nan", "inf", "-0", "0.0001", "none", "None", "x:y", ":", "::", "a,b,,"]),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
)

#: paths that are not histories, not run folders, or not there at all
BAD_PATHS = [
    "", ".", "/", "/proc/x", "/proc/self/status", "/dev/null", "/nonexistent/dir", "README.md", "store/latest",
    str(EXAMPLES), str(EXAMPLES / "bad-input-index-gap.jsonl"), "does/not/exist.jsonl", "-", "a b",
    "garbage.jsonl", "empty.jsonl", "rundir", "faultsdir", "loop",
]
paths = st.one_of(st.sampled_from(BAD_PATHS), st.text(alphabet="abc./-_~ ", max_size=10))


def scratch() -> tempfile.TemporaryDirectory[str]:
    """A working directory with a file of garbage, an empty file, a run folder with a bad history, a symlink loop."""
    tmp = tempfile.TemporaryDirectory(prefix="leasecheck-fuzz-")
    root = Path(tmp.name)
    (root / "garbage.jsonl").write_bytes(b"\xff\xfe{not json\n")
    (root / "empty.jsonl").write_text("")
    (root / "rundir").mkdir()
    (root / "rundir" / "history.jsonl").write_text('{"format": "leasecheck-history", "version": 1}\n{}\n')
    (root / "rundir" / "results.json").write_text('{"status": "error"')
    (root / "faultsdir").mkdir()
    (root / "faultsdir" / "faults.json").write_text('{"active": [{"kind": "pause", "pids": "x"}, 3]}')
    (root / "loop").symlink_to(root / "loop")
    (root / "README.md").write_text("# not a folder\n")
    return tmp


def invoke(args: list[str]) -> tuple[int, str]:
    """Run the CLI in-process in a scratch directory; the exit code and stderr."""
    with scratch() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            r = CliRunner().invoke(main, args, catch_exceptions=False)
        finally:
            os.chdir(cwd)
    return r.exit_code, r.stderr


def assert_contract(code: int, stderr: str, args: list[str]) -> None:
    assert code in CODES, (args, code, stderr)
    assert "Traceback" not in stderr, (args, stderr)
    if code in (3, 4):
        assert stderr.strip(), (args, "a refusal must say why")


@settings(max_examples=60)
@given(
    files=st.lists(paths, min_size=1, max_size=3),
    budget=st.one_of(st.none(), junk),
    engine=st.one_of(st.none(), st.sampled_from(["auto", "search"]), junk),
    flags=st.lists(st.sampled_from(["--json", "--explain", "--nope", "-h"]), max_size=2),
)
def test_check_keeps_the_contract(files: list[str], budget: str | None, engine: str | None, flags: list[str]) -> None:
    args = ["check", *flags, *files]
    if budget is not None:
        args += ["--budget", budget]
    if engine is not None:
        args += ["--engine", engine]
    code, err = invoke(args)
    assert_contract(code, err, args)
    if "-h" not in flags and all(f in BAD_PATHS[:13] + ["garbage.jsonl", "empty.jsonl", "rundir", "loop"] for f in files):
        assert code in (3, 4), (args, code)  # nothing there is a history: never a verdict


#: ``run`` options and values that end quickly even when valid (tiny limits, SQLite, no server to start)
RUN_OPTIONS = {
    "--target": st.one_of(st.sampled_from(["sqlite", "sqlite-ttl-only", "nope", "x:y", "leasecheck.targets.base:Target",
                                           "leasecheck.targets.base:Lease", "os:path", "leasecheck.cli:main", ":"]), junk),
    "--url": st.one_of(st.sampled_from(["/proc/x", "/dev/null", "README.md", "loop", "rundir", "redis://127.0.0.1:1"]), junk),
    "--nemesis": st.one_of(st.sampled_from(["none", "pause", "kill", "partition", "clock-store", "docker-pause",
                                            "pause,,kill", "pause,nope", "clock-bump"]), junk),
    "--nemesis-interval": junk.filter(lambda v: not _number_between(v, 0.0001, 1e6)),
    "--time-limit": st.one_of(st.sampled_from(["0.2", "0.3"]), junk.filter(lambda v: not _number_between(v, 0.5, 1e308))),
    "--evidence-wait": junk.filter(lambda v: not _number_between(v, 0.5, 1e308)),
    "--concurrency": st.one_of(st.sampled_from(["1", "2"]), junk.filter(lambda v: not _number_between(v, 3, 1e308))),
    "--ttl": junk.filter(lambda v: not _number_between(v, 200, 1e308)),
    "--nodes": junk.filter(lambda v: not _number_between(v, 100, 1e308)),
    "--dup-rate": junk,
    "--rate": junk,
    "--seed": junk,
    "--store": st.one_of(st.sampled_from(BAD_PATHS), junk),
    "--clock-uncertainty": junk.filter(lambda v: not _number_between(v, 1000, 1e308)),
    "--store-skew": junk,
    "--env": st.one_of(st.sampled_from(["local", "docker"]), junk),
}


def _number_between(value: str, low: float, high: float) -> bool:
    try:
        return low <= float(value) <= high
    except ValueError:
        return False


@settings(max_examples=25)
@given(data=st.data(), option=st.sampled_from(sorted(RUN_OPTIONS)), json=st.booleans())
def test_run_keeps_the_contract(data: st.DataObject, option: str, json: bool) -> None:
    value = data.draw(RUN_OPTIONS[option], label=option)
    base = {"--time-limit": "0.2", "--nemesis": "none", "--concurrency": "1", "--ttl": "50", "--nodes": "3",
            "--target": "sqlite", "--store": "store"}
    if option == "--env" and value == "docker":
        value = "local"  # a docker run starts containers: not a fail-fast example
    base[option] = value
    args = ["run", *(x for kv in base.items() for x in kv), *(["--json"] if json else [])]
    code, err = invoke(args)
    assert_contract(code, err, args)
    assert code != 1, (args, "a fault-free run of the reference backend cannot prove an anomaly")


@settings(max_examples=20)
@given(path=st.one_of(st.none(), paths))
def test_heal_keeps_the_contract(path: str | None) -> None:
    args = ["heal"] if path is None else ["heal", path]
    code, err = invoke(args)
    assert_contract(code, err, args)


@settings(max_examples=10)
@given(flags=st.lists(st.one_of(st.sampled_from(["--json", "--markdown", "-h", "--nope"]), junk), max_size=2))
def test_listing_commands_keep_the_contract(flags: list[str]) -> None:
    for command in ("targets", "nemeses"):
        args = [command, *flags]
        code, err = invoke(args)
        assert_contract(code, err, args)


def test_the_console_script_keeps_the_contract_on_real_failures(tmp_path: Path) -> None:
    """A few cases as a real process: tracebacks a worker or the interpreter prints reach this stderr."""
    (tmp_path / "file").write_text("not a folder")
    cases: list[tuple[list[str], int]] = [
        (["run", "--store", str(tmp_path / "file"), "--time-limit", "0.2"], 3),  # a file for a folder: the user's mistake
        (["run", "--store", "/proc/x", "--time-limit", "0.2"], 4),
        (["run", "--target", "leasecheck.targets.base:Target"], 3),
        (["run", "--nemesis", ""], 3),
        (["run", "--url", "/proc/x/db.sqlite3", "--time-limit", "0.2", "--nemesis", "none", "--store", str(tmp_path / "s")], 4),
        (["check", str(tmp_path)], 3),
        (["check", str(tmp_path / "file")], 3),
        (["heal", str(tmp_path / "file")], 3),
        (["check", str(VALID), "--budget", "nan"], 3),
    ]
    for args, expected in cases:
        r = subprocess.run([sys.executable, "-m", "leasecheck", *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert r.returncode == expected, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr, (args, r.stderr)
