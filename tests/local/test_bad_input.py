"""Whatever file it is given, ``leasecheck check`` answers with an exit code and a line.

Valid histories of the simulated store (tests/support/sim.py) are mutated at random, at
the byte level (flips, insertions, deletions, truncation) and at the JSON level
(keys deleted or retyped, lines swapped, duplicated or dropped, index / time /
process / type / f / node / values changed, header removed or broken), and fed
to the real CLI in-process. The contract (docs/contracts/exit-codes.md):

* exit 3 with exactly one line on stderr, ``FILE:LINE: message`` naming the
  (1-based; the header is line 1) line that breaks format v1, or ``FILE: message``
  for a problem of the whole file; or
* when the mutation still left a well-formed history, exit 0 / 1 / 2 with the
  verdict as one JSON object on stdout;
* never any other exit code, never a traceback.

A few runs of the installed ``leasecheck`` console script prove the same outside
the test process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import event, given, settings
from hypothesis import strategies as st
from mutants import BASES, byte_mutants, json_lines, json_mutants, note
from sim import render

from leasecheck.cli import main
from leasecheck.histories import HistoryError, read_history

# enough examples for a few thousand files in the "ci" profile, and about 10x fewer in "dev"
EXAMPLES = settings.default.max_examples * 5
BUDGET = "2"  # seconds of search per history: mutated histories must not make this file slow


# --------------------------------------------------------------------------------------
# running the CLI and judging its answer


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """The real entry point, in-process: (exit code, stdout, stderr). Exceptions propagate."""
    runner = CliRunner()
    if isinstance(main, click.Command):
        r = runner.invoke(main, args, catch_exceptions=False)
        return r.exit_code, r.stdout, r.stderr
    with runner.isolation() as (out, err, _):
        try:
            main(args)
            code: Any = 0
        except SystemExit as e:
            code = e.code
    assert isinstance(code, int) or code is None, f"exit with a non-integer code {code!r}"
    return code or 0, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")


def _first_diff_line(a: bytes, b: bytes) -> int | None:
    """The 1-based number of the first line (split on \\n only, as the reader does) that differs."""
    la, lb = a.split(b"\n"), b.split(b"\n")
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return i + 1
    return None if len(la) == len(lb) else min(len(la), len(lb)) + 1


_VALID_FOR_EXIT = {0: True, 1: False, 2: "unknown"}


def judge(path: Path, original: bytes, mutant: bytes, code: int, out: str, err: str) -> None:
    """Assert the CLI's answer obeys the contract, and agrees with the reader."""
    note(f"exit {code}\nstdout: {out[:2000]}\nstderr: {err[:2000]}")
    assert "Traceback" not in out and "Traceback" not in err, "a traceback reached the user"
    assert code in (0, 1, 2, 3), f"exit code {code}"
    try:
        read_history(path)
        reader_error: HistoryError | None = None
    except HistoryError as e:
        reader_error = e
    if code == 3:
        lines = err.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0].strip(), f"exit 3 needs exactly one line on stderr, got {err!r}"
        m = re.match(re.escape(str(path)) + r"(?::(\d+))?: \S", lines[0])
        assert m, f"stderr must be 'FILE:LINE: message', got {lines[0]!r}"
        n_lines = len(mutant.split(b"\n"))
        if m.group(1) is not None:
            line = int(m.group(1))
            assert 1 <= line <= n_lines, f"line {line} is not in the file ({n_lines} lines)"
        if reader_error is not None:
            want = str(reader_error)
            assert lines[0] == want, f"the CLI says {lines[0]!r}, the reader says {want!r}"
            first = _first_diff_line(original, mutant)
            if reader_error.line is not None:
                assert first is not None and reader_error.line >= first, (
                    f"reader blames line {reader_error.line}, but the file is unchanged up to line {first}"
                )
        return
    assert reader_error is None, f"the reader rejects the file ({reader_error}) but the CLI exits {code}"
    try:
        obj = json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"exit {code} without one JSON object on stdout: {out[:500]!r}")
    assert isinstance(obj, dict) and obj.get("valid") == _VALID_FOR_EXIT[code], f"exit {code} with valid={obj.get('valid')!r}"
    assert isinstance(obj.get("anomalies"), list) and isinstance(obj.get("stats"), dict)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad-input")


def _check(workdir: Path, case: tuple[bytes, bytes, list[str]]) -> None:
    original, mutant, done = case
    note("; ".join(done))
    try:
        note(render(mutant.decode().splitlines(keepends=True)))
    except Exception:
        note(repr(mutant[:3000]))
    path = workdir / "history.jsonl"
    path.write_bytes(mutant)
    code, out, err = run_cli(["check", "--json", "--budget", BUDGET, str(path)])
    judge(path, original, mutant, code, out, err)
    event(f"exit {code}")


# --------------------------------------------------------------------------------------
# the properties


def test_bases_are_valid_files(workdir: Path) -> None:
    for i, base in enumerate(BASES):
        path = workdir / f"base{i}.jsonl"
        path.write_bytes(base)
        code, out, err = run_cli(["check", "--json", str(path)])
        judge(path, base, base, code, out, err)
        assert code == (0 if i < 8 else 1), (i, out, err)


@settings(max_examples=EXAMPLES)
@given(case=byte_mutants())
def test_byte_mutations(workdir: Path, case: tuple[bytes, bytes, list[str]]) -> None:
    _check(workdir, case)


@settings(max_examples=EXAMPLES)
@given(case=json_mutants())
def test_json_mutations(workdir: Path, case: tuple[bytes, bytes, list[str]]) -> None:
    _check(workdir, case)


@settings(max_examples=EXAMPLES // 2)
@given(case=st.one_of(json_mutants(), byte_mutants()), more=st.data())
def test_mixed_mutations(workdir: Path, case: tuple[bytes, bytes, list[str]], more: st.DataObject) -> None:
    """A JSON-level mutant then broken at the byte level (or the other way round)."""
    original, mutant, done = case
    if more.draw(st.booleans()) and mutant:
        pos = more.draw(st.integers(0, len(mutant) - 1))
        mutant = mutant[:pos] + bytes([mutant[pos] ^ more.draw(st.integers(1, 255))]) + mutant[pos + 1 :]
        done = [*done, f"flip byte {pos}"]
    _check(workdir, (original, mutant, done))


# --------------------------------------------------------------------------------------
# well-formed but odd: what the reader lets through, the checker must judge without crashing


def _h(*events: tuple[Any, ...], ttl: Any = 100, cu: Any = 0) -> bytes:
    """A history from (time ms, process, type, f, node, value) tuples."""
    objs: list[Any] = [{"format": "leasecheck-history", "version": 1, "ttl_ms": ttl, "clock_uncertainty_ms": cu}]
    for i, (t, p, typ, f, node, value) in enumerate(events):
        objs.append({"index": i, "time": int(t * 1_000_000), "process": p, "type": typ, "f": f, "node": node, "value": value})
    return json_lines(objs)


def _claim(t: float, p: int, result: dict[str, Any], node: str = "n", owner: Any = "w") -> list[tuple[Any, ...]]:
    return [(t, p, "invoke", "claim", node, {"owner": owner}), (t + 1, p, "ok", "claim", node, result)]


def _op(t: float, p: int, f: str, value: dict[str, Any], typ: str = "ok", result: Any = None, node: str = "n") -> list[tuple[Any, ...]]:
    return [(t, p, "invoke", f, node, value), (t + 1, p, typ, f, node, {} if result is None else result)]


ODD = {
    "fenced node, one claim with a null epoch": _h(*_claim(0, 1, {"epoch": 1}), *_claim(200, 2, {"epoch": None})),
    "null-epoch claim first, then an integer one": _h(*_claim(0, 1, {"epoch": None, "token": "t"}), *_claim(200, 2, {"epoch": 2})),
    "unfenced lease, read shows an integer epoch": _h(
        *_claim(0, 1, {"epoch": None, "token": "t"}), *_op(5, 2, "read", {}, result={"status": "RUNNING", "epoch": 5, "owner": "w"})
    ),
    "unfenced lease renewed with an integer epoch": _h(*_claim(0, 1, {"epoch": None, "token": "t"}), *_op(5, 1, "renew", {"epoch": 1})),
    "fenced lease, effect and commit with null epochs": _h(
        *_claim(0, 1, {"epoch": 1}),
        *_op(5, 1, "effect", {"epoch": None, "payload": "x"}),
        *_op(10, 1, "commit", {"epoch": None, "token": "t", "result": "r"}),
    ),
    "claim returns epoch 0 and a negative epoch": _h(*_claim(0, 1, {"epoch": 0}), *_claim(200, 2, {"epoch": -3})),
    "huge epochs": _h(*_claim(0, 1, {"epoch": 2**64}), *_claim(200, 2, {"epoch": 2**70}), *_op(205, 2, "renew", {"epoch": 2**70})),
    "ttl 0 and uncertainty above the ttl": _h(*_claim(0, 1, {"epoch": 1}), *_claim(1, 2, {"epoch": 2}), ttl=0, cu=500),
    "fractional ttl": _h(*_claim(0, 1, {"epoch": 1}), *_op(1, 3, "claim", {"owner": "v"}, "fail", {"reason": "held"}), ttl=0.5, cu=0.25),
    "tokens and owners of every JSON type": _h(
        *_claim(0, 1, {"epoch": None, "token": {"a": [1]}}, owner={"x": 1}),
        *_op(5, 1, "renew", {"epoch": None, "token": {"a": [1]}}),
        *_claim(300, 2, {"epoch": None, "token": [1, 2]}, owner=[1]),
        *_op(305, 2, "commit", {"epoch": None, "token": [1, 2], "result": {"r": None}}),
        *_op(310, 3, "read", {}, result={"status": "SUCCEEDED", "epoch": None, "owner": [1], "result": {"r": None}}),
    ),
    "read without epoch, owner or result": _h(*_op(0, 1, "read", {}, result={"status": "SUCCEEDED"})),
    "read shows READY with an owner and a result": _h(
        *_claim(0, 1, {"epoch": 1}), *_op(5, 2, "read", {}, result={"status": "READY", "epoch": 1, "owner": "w", "result": 3})
    ),
    "fenced and unfenced nodes side by side": _h(
        *_claim(0, 1, {"epoch": 1}, node="a"), *_claim(0.5, 2, {"epoch": None, "token": "t"}, node="b"),
        *_op(5, 1, "commit", {"epoch": 1, "result": "r"}, node="a"), *_op(6, 2, "commit", {"epoch": None, "token": "t", "result": "r"}, node="b"),
    ),
    "info and open ops only": _h(
        (0, 1, "invoke", "claim", "n", {"owner": "w"}), (1, 1, "info", "claim", "n", None),
        (2, 2, "invoke", "commit", "n", {"epoch": 7, "result": "r"}), (3, 3, "invoke", "release", "n", {"epoch": None, "token": "z"}),
    ),
    "everything at one instant": _h(
        *[(0, 1, "invoke", "claim", "n", {"owner": "w"}), (0, 1, "ok", "claim", "n", {"epoch": 1})],
        *[(0, 2, "invoke", "claim", "n", {"owner": "v"}), (0, 2, "ok", "claim", "n", {"epoch": 2})],
        *[(0, 1, "invoke", "commit", "n", {"epoch": 1, "result": "r"}), (0, 1, "ok", "commit", "n", {})],
        *[(0, 3, "invoke", "claim", "n", {"owner": "u"}), (0, 3, "fail", "claim", "n", {"reason": "held"})],
    ),
    "nemesis events of every shape": _h(
        (0, "nemesis", "info", "pause", None, None), (1, "nemesis", "invoke", "partition", "n", {"a": [1]}),
        (2, "nemesis", "ok", "heal", None, [1, "x"]), *_claim(3, 1, {"epoch": 1}),
    ),
}


@pytest.mark.parametrize("name", list(ODD))
def test_odd_but_well_formed_histories(workdir: Path, name: str) -> None:
    path = workdir / "odd.jsonl"
    path.write_bytes(ODD[name])
    code, out, err = run_cli(["check", "--json", "--budget", BUDGET, str(path)])
    judge(path, b"", ODD[name], code, out, err)


# --------------------------------------------------------------------------------------
# the installed console script: no traceback reaches the user


def _script() -> list[str]:
    exe = shutil.which("leasecheck")
    return [exe] if exe else [sys.executable, "-c", "from leasecheck.cli import main; main()"]


def _run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_script(), *args], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize(
    "name, content, line",
    [
        ("garbage.jsonl", b"\x00\xff not json at all\n", 1),
        ("empty.jsonl", b"", 1),
        ("event-first.jsonl", BASES[0].split(b"\n", 1)[1], 1),
        ("bad-line-3.jsonl", b"\n".join(BASES[0].split(b"\n")[:2] + [b'{"index": 1, "time": "soon"}']) + b"\n", 3),
        ("utf8.jsonl", BASES[0].replace(b'"claim"', b'"cl\xffim"', 1), None),
    ],
)
def test_console_script_rejects_bad_files(tmp_path: Path, name: str, content: bytes, line: int | None) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    p = _run_script("check", "--json", str(path))
    assert "Traceback" not in p.stderr + p.stdout
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip("\n").split("\n")
    assert len(lines) == 1, p.stderr
    prefix = f"{path}:" if line is None else f"{path}:{line}: "
    assert lines[0].startswith(prefix), lines[0]


def test_console_script_missing_file_and_usage_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    p = _run_script("check", str(missing))
    assert "Traceback" not in p.stderr + p.stdout
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert p.stderr.strip("\n").count("\n") == 0 and p.stderr.startswith(f"{missing}:"), p.stderr
    for args in (["check"], ["check", "--no-such-option", str(missing)], ["check", "--budget", "soon", str(missing)], ["no-such-command"]):
        p = _run_script(*args)
        assert "Traceback" not in p.stderr + p.stdout, args
        assert p.returncode == 3, (args, p.returncode, p.stderr)


def test_console_script_valid_and_invalid(tmp_path: Path) -> None:
    for base, want in ((BASES[0], 0), (BASES[8], 1)):
        path = tmp_path / f"h{want}.jsonl"
        path.write_bytes(base)
        p = _run_script("check", "--json", str(path))
        assert "Traceback" not in p.stderr + p.stdout
        assert p.returncode == want, (p.returncode, p.stdout, p.stderr)
        assert json.loads(p.stdout)["valid"] is (want == 0)


# --------------------------------------------------------------------------------------
# lists: an option that takes several names refuses an empty or repeated one (leasecheck/lists.py), before anything starts

#: (arguments, the one line on stderr): every list option of every command; `check` and `summary` take none
BAD_LISTS: dict[str, tuple[list[str], str]] = {
    "run --nemesis, an empty last item": (["run", "--nemesis", "pause,,"], "leasecheck run: Error: --nemesis pause,,: an empty item (the 2nd)"),
    "run --nemesis, an empty first item": (["run", "--nemesis", ",kill"], "leasecheck run: Error: --nemesis ,kill: an empty item (the 1st)"),
    "run --nemesis, blank between": (["run", "--nemesis", "pause, ,kill"], "leasecheck run: Error: --nemesis pause, ,kill: an empty item (the 2nd)"),
    "run --nemesis, a fault twice": (["run", "--nemesis", "pause,pause"], "leasecheck run: Error: --nemesis pause,pause: pause is named twice"),
    "run --nemesis, twice with spaces": (["run", "--nemesis", "kill, pause, kill"],
                                         "leasecheck run: Error: --nemesis kill, pause, kill: kill is named twice"),
    "run --require, twice": (["run", "--require", "claim-while-held", "--require", "claim-while-held"],
                             "leasecheck run: Error: --require claim-while-held --require claim-while-held: claim-while-held is named twice"),
    "run --require, empty": (["run", "--require", "claim-while-held", "--require", " "],
                             "leasecheck run: Error: --require claim-while-held --require ' ': an empty item (the 2nd)"),
    "audit --seeds, an empty item": (["audit", "filelock", "--seeds", "1,,2"], "leasecheck audit: Error: --seeds 1,,2: an empty item (the 2nd)"),
    "audit --seeds, a seed twice": (["audit", "filelock", "--seeds", "3,1,3"], "leasecheck audit: Error: --seeds 3,1,3: 3 is named twice"),
    "audit --seeds, one seed spelled twice": (["audit", "filelock", "--seeds", "1,01"], "leasecheck audit: Error: --seeds 1,01: 1 is named twice"),
    "audit --seeds, empty": (["audit", "filelock", "--seeds", ""], "leasecheck audit: Error: --seeds '': names nothing"),
    "audit --mode, twice": (["audit", "filelock", "--mode", "documented", "--mode", "documented"],
                            "leasecheck audit: Error: --mode documented --mode documented: documented is named twice"),
    "audit --fault, twice": (["audit", "filelock", "--fault", "pause", "--fault", "pause"],
                             "leasecheck audit: Error: --fault pause --fault pause: pause is named twice"),
}


@pytest.mark.parametrize("args, line", BAD_LISTS.values(), ids=BAD_LISTS.keys())
def test_a_list_option_with_an_empty_or_repeated_item_is_exit_3_in_one_line(tmp_path: Path, args: list[str], line: str) -> None:
    store = tmp_path / "store"
    r = CliRunner().invoke(main, [*args, "--store", str(store)], prog_name="leasecheck", catch_exceptions=False)
    assert r.exit_code == 3, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.strip("\n").splitlines() == [f"{line} (see {line.split(':')[0]} --help)"], r.stderr
    assert not store.exists()  # refused before anything started


def _spec(entry: str) -> str:
    return f"[[entry]]\n{entry}\n"


#: a matrix spec's lists: (its [[entry]] body, what follows "FILE: entry 1 (LABEL): " on the one line)
BAD_SPEC_LISTS: dict[str, tuple[str, str]] = {
    "a nemesis set with an empty item": ("target='sqlite'\nnemesis=['pause,,']\nseeds=[1]", "nemesis set 'pause,,': an empty item (the 2nd)"),
    "a nemesis set naming a fault twice": ("target='sqlite'\nnemesis=['pause,pause']\nseeds=[1]", "nemesis set 'pause,pause': pause is named twice"),
    "a nemesis set as a list, a fault twice": ("target='sqlite'\nnemesis=[['kill', 'kill']]\nseeds=[1]",
                                               "nemesis set ['kill', 'kill']: kill is named twice"),
    "a nemesis set as a list, an empty item": ("target='sqlite'\nnemesis=[['kill', ' ']]\nseeds=[1]",
                                               "nemesis set ['kill', ' ']: an empty item (the 2nd)"),
    "targets, one twice": ("targets=['sqlite', 'sqlite']\nnemesis=['pause']\nseeds=[1]", "targets = ['sqlite', 'sqlite']: sqlite is named twice"),
    "targets, an empty one": ("targets=['sqlite', '']\nnemesis=['pause']\nseeds=[1]", "targets = ['sqlite', '']: an empty item (the 2nd)"),
    "seeds, one twice": ("target='sqlite'\nnemesis=['pause']\nseeds=[2, 1, 2]", "seeds = [2, 1, 2]: 2 is named twice"),
    "kinds, one twice": ("target='sqlite-ttl-only'\nnemesis=['pause']\nseeds=[1]\nexpect='invalid'\nkinds=['stale-commit', 'stale-commit']",
                         "kinds = ['stale-commit', 'stale-commit']: stale-commit is named twice"),
}


@pytest.mark.parametrize("body, why", BAD_SPEC_LISTS.values(), ids=BAD_SPEC_LISTS.keys())
@pytest.mark.parametrize("command", ["matrix", "summary"])
def test_a_matrix_spec_list_with_an_empty_or_repeated_item_is_exit_3_in_one_line(
        tmp_path: Path, body: str, why: str, command: str) -> None:
    path = tmp_path / "night.toml"
    path.write_text(_spec(body))
    label = "sqlite-ttl-only" if "ttl-only" in body else "sqlite, sqlite" if "'sqlite', 'sqlite'" in body else \
        "sqlite, " if "'sqlite', ''" in body else "sqlite"
    store = tmp_path / "store"
    store.mkdir()
    args = ["matrix", str(path), "--store", str(store)] if command == "matrix" else ["summary", str(store), "--spec", str(path)]
    code, out, err = run_cli(args)
    assert code == 3, (code, out, err)
    assert err.strip("\n").splitlines() == [f"leasecheck {command}: {path}: entry 1 ({label}): {why}"], err
    assert list(store.iterdir()) == []


#: ``leasecheck_run(...)`` keyword arguments that are lists: (the call's arguments, the error's one line)
BAD_CALL_LISTS: dict[str, tuple[dict[str, Any], str]] = {
    "nemesis text, an empty item": ({"nemesis": "pause,,"}, "leasecheck_run: nemesis='pause,,': an empty item (the 2nd)"),
    "nemesis text, a fault twice": ({"nemesis": "pause,kill,pause"}, "leasecheck_run: nemesis='pause,kill,pause': pause is named twice"),
    "nemesis list, a fault twice": ({"nemesis": ["kill", "kill"]}, "leasecheck_run: nemesis=['kill', 'kill']: kill is named twice"),
    "nemesis list, an empty item": ({"nemesis": ["kill", ""]}, "leasecheck_run: nemesis=['kill', '']: an empty item (the 2nd)"),
    "seeds, one twice": ({"seeds": [4, 4]}, "leasecheck_run: seeds=[4, 4]: 4 is named twice"),
    "require, one twice": ({"require": ["claim-while-held", "claim-while-held"]},
                           "leasecheck_run: require=['claim-while-held', 'claim-while-held']: claim-while-held is named twice"),
    "require, an empty one": ({"require": ("", "claim-while-held")}, "leasecheck_run: require=('', 'claim-while-held'): an empty item (the 1st)"),
}


@pytest.mark.parametrize("call, line", BAD_CALL_LISTS.values(), ids=BAD_CALL_LISTS.keys())
def test_the_pytest_plugins_list_arguments_refuse_an_empty_or_repeated_item(tmp_path: Path, call: dict[str, Any], line: str) -> None:
    """The fixture's value itself, called as a test calls it (from its arguments or its marker): refused before any run."""
    from leasecheck.ci.plugin_runner import LeasecheckRunner

    runner = LeasecheckRunner(tmp_path / "store", tmp_path, default_time_limit=1.0)
    with pytest.raises(ValueError) as refused:
        runner(target="sqlite", **call)
    assert str(refused.value) == line
    assert runner.runs == [] and not (tmp_path / "store").exists()
    marked = LeasecheckRunner(tmp_path / "store", tmp_path, default_time_limit=1.0, defaults={"target": "sqlite", **call})
    with pytest.raises(ValueError, match=re.escape(line)):
        marked()


@pytest.mark.parametrize("nemesis, require, line", [
    (("pause", "pause"), (), "--nemesis pause,pause: pause is named twice"),
    (("pause", ""), (), "--nemesis pause,: an empty item (the 2nd)"),
    (("pause",), ("claim-while-held", "claim-while-held"), "--require claim-while-held --require claim-while-held: claim-while-held is named twice"),
])
def test_run_options_made_in_python_refuse_an_empty_or_repeated_item(tmp_path: Path, nemesis: tuple[str, ...],
                                                                      require: tuple[str, ...], line: str) -> None:
    """An audit or a benchmark builds RunOptions without the CLI: the run refuses the same lists the same way."""
    from leasecheck.run.options import BadOptions, RunOptions
    from leasecheck.run.runner import Run

    with pytest.raises(BadOptions) as refused:
        Run(RunOptions(nemesis=nemesis, require=require, store=str(tmp_path / "store")))
    assert str(refused.value) == line


def test_a_ttl_too_long_for_any_clock_is_judged_not_a_crash(tmp_path: Path) -> None:
    """Found by the JSON mutations: ``ttl_ms`` 1e308 makes every deadline infinite, and a refused ``expired`` release is
    then a premature expiry whose explanation named ``int(inf)``: exit 4 with an OverflowError, where the verdict is 1."""
    lines = [
        {"format": "leasecheck-history", "version": 1, "ttl_ms": 1e308, "clock_uncertainty_ms": 0},
        {"index": 0, "time": 1_000_000, "process": 1, "type": "invoke", "f": "claim", "node": "n", "value": {"owner": "w1"}},
        {"index": 1, "time": 2_000_000, "process": 1, "type": "ok", "f": "claim", "node": "n", "value": {"epoch": 1}},
        {"index": 2, "time": 3_000_000, "process": 1, "type": "invoke", "f": "release", "node": "n", "value": {"epoch": 1}},
        {"index": 3, "time": 4_000_000, "process": 1, "type": "fail", "f": "release", "node": "n", "value": {"reason": "expired"}},
    ]
    history = tmp_path / "forever.jsonl"
    history.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = subprocess.run([sys.executable, "-m", "leasecheck", "check", str(history), "--json"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    (anomaly,) = json.loads(done.stdout)["anomalies"]
    assert anomaly["kind"] == "premature-expiry" and anomaly["ops"] == [0, 2]
    assert "forever (the ttl outlasts any clock)" in anomaly["explanation"]
