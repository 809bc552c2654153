"""The pytest plugin (``leasecheck_run``, ``@pytest.mark.leasecheck``, the options), in real inner pytest sessions.

Each test writes a small test module into ``pytester``'s folder and runs pytest on
it in a subprocess, which loads the plugin through its ``pytest11`` entry point as
a user's suite would; the runs are real ``leasecheck run`` runs (SQLite reference
and the ttl-only broken variant, a few seconds each). The assertions read the run
folders the inner session left and check the failure message against them.
"""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import click
import pytest

from leasecheck.ci import plugin_args
from leasecheck.ci.plugin_args import replay_command, run_args, run_flags
from leasecheck.ci.plugin_results import SHOWN_ANOMALIES, Anomaly, LeasecheckResult, describe_run
from leasecheck.exits import verdict_word
from leasecheck.verdict.covered import covered_line

pytest_plugins = ["pytester"]

SQLITE = "leasecheck.targets.sqlite_lease:SqliteLease"
BROKEN = "leasecheck.targets.broken_sqlite:TtlOnlySqlite"
#: seconds of workload per run here: enough for the pauses to make the broken variant commit stale
SECONDS = 5


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester with plugin autoload on (as in a user's suite) and no options leaking in from ours."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    return pytester


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *args, timeout=600)


def run_folders(store: Path) -> list[Path]:
    """The run folders under a store (store/<target>/<stamp>), oldest first."""
    return sorted((p.parent for p in store.glob("*/*/results.json")), key=lambda p: p.name)


def default_store_runs(pytester: pytest.Pytester) -> list[Path]:
    """Run folders in the default store: 'leasecheck' in the inner session's basetemp (pytester's runpytest-N)."""
    return sorted(p.parent for p in pytester.path.glob("runpytest-[0-9]*/leasecheck/*/*/results.json"))


def results_of(run_dir: Path) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((run_dir / "results.json").read_text())
    return obj


def test_every_run_option_is_a_flag_of_leasecheck_run() -> None:
    """The table of run options is the CLI's: each maps to a real flag, and every flag a test may set is mapped."""
    from leasecheck.cli.running import run

    flags = {opt for p in run.params if isinstance(p, click.Option) for opt in p.opts}
    assert set(run_flags().values()) <= flags
    # set by the call itself, by the plugin, or about the CLI's own output (pytest reports for itself)
    own = {"--target", "--nemesis", "--seed", "--time-limit", "--store", "--json", "--coverage", "--junit"}
    assert flags - own - set(run_flags().values()) == set()
    assert all(flag == "--" + key.replace("_", "-") for key, flag in run_flags().items())
    # the keys a call has always taken (docs/pytest.md)
    assert {"url", "exec_store", "nemesis_interval", "evidence_wait", "require", "concurrency", "ttl", "nodes", "dup_rate",
            "rate", "clock_uncertainty", "store_skew", "env", "cluster", "fail_fast", "snapshot_every",
            "until_covered", "min_count", "max_time", "strict_coverage", "store_config", "hosts"} == set(run_flags())


def test_a_list_repeats_its_flag_and_a_float_reads_as_typed() -> None:
    args = run_args("sqlite", "pause", 3, 10.0, {"require": ["claim-race-ready", "claim-after-expiry"], "ttl": 500, "url": None})
    assert args == ["run", "--target", "sqlite", "--nemesis", "pause", "--seed", "3", "--time-limit", "10",
                    "--require", "claim-race-ready", "--require", "claim-after-expiry", "--ttl", "500"]


def test_the_replay_command_has_the_store_and_the_folders_the_run_imports_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the child got besides its arguments: the session's store, and the folders added to ``sys.path`` since pytest started."""
    root, store, src = tmp_path / "my project", tmp_path / "runs", tmp_path / "my project" / "src"
    args = ["run", "--target", "mypkg:MyLease", "--nemesis", "pause,kill", "--seed", "2", "--time-limit", "10", "--ttl", "500"]
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(sys, "path", sorted(plugin_args._STARTUP_PATH))  # as pytest started: nothing added yet
    cd, _, line = replay_command(root, args, store).partition(" && ")
    assert shlex.split(cd) == ["cd", str(root)]
    assert shlex.split(line) == ["leasecheck", *args, "--store", str(store)]  # no PYTHONPATH
    # a ``pythonpath = src`` ini setting; the rootdir too, which needs none (the run starts there, and looks for targets there)
    monkeypatch.setattr(sys, "path", [str(src), str(root), *sys.path])
    _, _, line = replay_command(root, args, store).partition(" && ")
    assert shlex.split(line) == [f"PYTHONPATH={src}", "leasecheck", *args, "--store", str(store)]
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")  # the user's own, which the shell that ran pytest has too: kept
    _, _, line = replay_command(root, args, store).partition(" && ")
    assert line.startswith(f"PYTHONPATH={shlex.quote(str(src))}:$PYTHONPATH leasecheck run ")


def test_a_valid_run_passes_and_lands_in_the_default_store(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_ref=f"""
        def test_reference(leasecheck_run):
            results = leasecheck_run(target={SQLITE!r}, nemesis="pause", seeds=1, time_limit={SECONDS})
            assert [(r.seed, r.verdict, r.anomalies, r.exit_code) for r in results] == [(1, "valid", (), 0)]
            (r,) = results
            assert r.report == r.run_dir / "report.html" and (r.run_dir / "history.jsonl").is_file()
            assert r.command.endswith(f"leasecheck run --target {SQLITE} --nemesis pause --seed 1 --time-limit {SECONDS} --evidence-wait {SECONDS}"
                                      f" --fail-fast --until-covered --max-time {10 * SECONDS} --store {{r.run_dir.parent.parent}}")
    """)
    result = run_inner(inner, "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1)
    (run_dir,) = default_store_runs(inner)
    results = results_of(run_dir)
    assert (results["valid"], results["seed"], results["target"], results["nemesis"]) == (True, 1, SQLITE, ["pause"])
    # expected valid: the run went on until every situation that applies was reached 3 times (up to the gate's 10 x the limit)
    goal = results["coverage"]["goal"]
    assert goal["min_count"] == 3 and goal["max_time_s"] == 10 * SECONDS and goal["ran_s"] >= SECONDS
    counts, applicable = results["coverage"]["counts"], results["coverage"]["applicable"]
    assert goal["short"] == {s: counts[s] for s in applicable if counts[s] < 3}
    if not goal["short"]:
        assert SECONDS <= goal["covered_after_s"] <= goal["ran_s"]
    store = run_dir.parent.parent
    # a green run says what it covered, on a pass too: one line per run at the session's end, and a JUnit property
    line = covered_line(results["coverage"])
    assert line.startswith(f"coverage: {len(applicable) - len(results['coverage']['missing'])}/{len(applicable)} situations reached")
    result.stdout.fnmatch_lines([
        f"leasecheck 0.1.0: store {store}, time limit 10 s",  # pytester passes --basetemp: the header can name it
        f"leasecheck: {SQLITE} seed 1: valid in * s; {line}",
        f"leasecheck: 1 run (1 valid), run folders in {store}",
    ])
    properties = {p.get("name"): p.get("value") for p in ET.parse(inner.path / "junit.xml").iter("property")}
    assert properties["leasecheck seed 1"].startswith(f"leasecheck: {SQLITE} seed 1: valid in ")
    assert properties["leasecheck seed 1"].endswith(line)

    # the message a test expecting this target to be broken would fail with, from this real run's results
    r = LeasecheckResult(target=SQLITE, seed=1, verdict=verdict_word(results["valid"]), reason=results["reason"],
                         anomalies=(), run_dir=run_dir, report=run_dir / "report.html", command="leasecheck run ...",
                         exit_code=0, results=results)
    assert describe_run(r, "invalid").splitlines()[0] == "seed 1: valid (expected invalid): the run found no anomaly"


def test_a_broken_variant_fails_with_its_anomalies_report_and_replay(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_broken=f"""
        def test_broken(leasecheck_run):
            leasecheck_run(target={BROKEN!r}, nemesis="pause", seeds=1, time_limit={SECONDS})
    """)
    result = run_inner(inner)
    result.assert_outcomes(failed=1)
    (run_dir,) = default_store_runs(inner)
    results = results_of(run_dir)
    assert results["valid"] is False and results["seed"] == 1
    anomalies = [Anomaly.from_json(a) for a in results["anomalies"]]
    out = result.stdout.str()
    kinds = ", ".join(f"{k} x{sum(a.kind == k for a in anomalies)}" for k in dict.fromkeys(a.kind for a in anomalies))
    assert f"leasecheck: target {BROKEN}, nemesis pause: 1 of 1 runs not valid" in out
    assert f"seed 1: invalid, {len(anomalies)} anomalies ({kinds}) (expected valid)" in out
    # each shown in full: kind, node and ops as the checker found them, and the explanation; the first of each kind first
    shown = [a for a in anomalies if f"  {a.kind} on node {a.node}, ops [{', '.join(map(str, a.ops))}]:\n      {a.explanation}\n" in out]
    assert len(shown) == min(len(anomalies), SHOWN_ANOMALIES)
    found_kinds = list(dict.fromkeys(a.kind for a in anomalies))
    assert {a.kind for a in shown} >= set(found_kinds[:SHOWN_ANOMALIES])
    if len(anomalies) > SHOWN_ANOMALIES:
        assert f"  ... and {len(anomalies) - SHOWN_ANOMALIES} more (" in out
    assert f"  run folder: {run_dir}\n" in out
    assert f"  report:     {run_dir / 'report.html'}\n" in out
    replay = (f"cd {inner.path} && leasecheck run --target {BROKEN} --nemesis pause --seed 1"
              f" --time-limit {SECONDS} --evidence-wait {SECONDS} --fail-fast --until-covered --max-time {10 * SECONDS}"
              f" --store {run_dir.parent.parent}")
    assert f"  replay:     {replay}\n" in out
    # the run's report shows the same line, not the plugin's own command line (python -m leasecheck ... --json)
    shown = re.search(r'<code id="replay">(.*?)</code>', (run_dir / "report.html").read_text(), re.S)
    assert shown is not None and html.unescape(shown.group(1)) == replay
    # ...and it does: pasted into a shell (leasecheck on its PATH), it makes the same run again, in the same store
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
    subprocess.run(["bash", "-c", replay], env=env, capture_output=True, text=True, timeout=300)
    again = [d for d in run_folders(run_dir.parent.parent) if d != run_dir]
    assert len(again) == 1, "the replay left its run folder next to the one it replays"
    replayed = results_of(again[0])
    assert (replayed["target"], replayed["seed"], replayed["nemesis"], replayed["valid"]) == (BROKEN, 1, ["pause"], False)
    for module in ("pytest_plugin.py", "plugin_runner.py", "plugin_args.py", "plugin_results.py"):
        assert module not in out  # a verdict is a message, not a traceback through the plugin
    result.stdout.fnmatch_lines([f"leasecheck: 1 run (1 invalid), run folders in {run_dir.parent.parent}"])


def test_the_marker_gives_the_calls_defaults(inner: pytest.Pytester) -> None:
    """Module marker, then the function's (closer wins); the call passes nothing, expect="invalid" comes from the marker."""
    inner.makepyfile(test_marked=f"""
        import pytest

        pytestmark = pytest.mark.leasecheck(target={BROKEN!r}, nemesis="kill", seeds=[7], time_limit=60, ttl=400)

        @pytest.mark.leasecheck(nemesis="pause", seeds=[2], time_limit={SECONDS}, expect="invalid", ttl=1000)
        def test_marked(leasecheck_run):
            (r,) = leasecheck_run()
            assert (r.target, r.seed, r.verdict, r.exit_code) == ({BROKEN!r}, 2, "invalid", 1)
            # a commit or effect the store never fenced: stale once a newer epoch was seen, lost when it raced the claim
            assert r.kinds and set(r.kinds) <= {{"stale-commit", "stale-effect", "lost-commit", "duplicate-commit", "non-linearizable"}}
    """)
    result = run_inner(inner)
    result.assert_outcomes(passed=1)
    (run_dir,) = default_store_runs(inner)
    test_json = json.loads((run_dir / "test.json").read_text())
    opts = test_json["options"]
    assert (opts["target"], opts["nemesis"], opts["seed"], opts["time_limit"], opts["ttl_ms"]) == (BROKEN, ["pause"], 2, SECONDS, 1000)


def test_expect_invalid_passes_for_a_broken_variant(inner: pytest.Pytester) -> None:
    """Under pytest-xdist too: the worker's run lands in the session's store, and the controller's summary counts it."""
    inner.makepyfile(test_expect=f"""
        def test_known_broken(leasecheck_run):
            # a pause a second: 5 s at the default pace (one every 5 s) held one or two, and a loaded machine none that hit;
            # 10 s: on SQLite half the pauses stop a worker inside a write, which freezes its rivals, and 5 s beside two
            # CPU-bound jobs and three other test processes made no zombie once (ci); it ends at the first proof
            (r,) = leasecheck_run(target={BROKEN!r}, nemesis="pause", seeds=[1], time_limit={2 * SECONDS}, expect="invalid",
                                  nemesis_interval=1)
            assert r.verdict == "invalid" and r.anomalies
            assert all(a.ops and a.node and a.explanation for a in r.anomalies)
            assert r.results["run_dir"] == str(r.run_dir)
    """)
    result = run_inner(inner, "-n", "1")
    result.assert_outcomes(passed=1)
    (run_dir,) = default_store_runs(inner)  # runpytest-N/leasecheck, not the worker's runpytest-N/popen-gw0/leasecheck
    assert results_of(run_dir)["valid"] is False
    result.stdout.fnmatch_lines([f"leasecheck: 1 run (1 invalid), run folders in {run_dir.parent.parent}"])


def test_a_users_own_module_on_the_tests_sys_path(inner: pytest.Pytester) -> None:
    """mypkg lives in src/, on sys.path through the ini's ``pythonpath`` only: the run imports it as the test does."""
    src = inner.mkdir("src")
    (src / "mypkg.py").write_text(
        "from leasecheck.targets.sqlite_lease import SqliteLease\n\n\n"
        "class MyLease(SqliteLease):\n"
        '    """The reference, under the user\'s own name."""\n\n'
        '    name = "my-lease"\n'
    )
    inner.makeini("[pytest]\npythonpath = src\n")
    inner.makepyfile(test_mine=f"""
        def test_my_lease(leasecheck_run):
            (r,) = leasecheck_run(target="mypkg:MyLease", nemesis="pause", seeds=1, time_limit={SECONDS}, until_covered=False)
            assert r.verdict == "valid" and r.results["target"] == "mypkg:MyLease"
    """)
    run_inner(inner).assert_outcomes(passed=1)
    (run_dir,) = default_store_runs(inner)
    assert json.loads((run_dir / "test.json").read_text())["options"]["target"] == "mypkg:MyLease"
    # and without the test's sys.path, from the same folder, leasecheck cannot find it: the plugin's PYTHONPATH did it
    alone = subprocess.run([sys.executable, "-m", "leasecheck", "run", "--target", "mypkg:MyLease", "--store", str(inner.path / "s")],
                           cwd=inner.path, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 3 and "cannot import mypkg" in alone.stderr


def test_store_and_time_limit_options_take_effect(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_opts=f"""
        def test_defaults_from_options(leasecheck_run, leasecheck_store):
            (r,) = leasecheck_run(target={SQLITE!r}, nemesis="pause", seeds=1)
            assert r.verdict == "valid" and r.run_dir.parent.parent == leasecheck_store
    """)
    result = run_inner(inner, "--leasecheck-store", "my-store", "--leasecheck-time-limit", "4", "--leasecheck-max-time", "16")
    result.assert_outcomes(passed=1)
    store = inner.path / "my-store"
    (run_dir,) = run_folders(store)
    opts = json.loads((run_dir / "test.json").read_text())["options"]
    assert (opts["time_limit"], opts["evidence_wait_s"], opts["store"], opts["max_time"]) == (4, 4, str(store), 16)
    result.stdout.fnmatch_lines([f"leasecheck 0.1.0: store {store}, time limit 4 s", f"leasecheck: 1 run (1 valid), run folders in {store}"])
    assert not default_store_runs(inner)


def test_ini_options_and_the_command_line_over_them(inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """No run needed: the fixture's store and time limit come from the ini, and the options win over it."""
    inner.makeini("[pytest]\nleasecheck_store = runs/here\nleasecheck_time_limit = 7.5\nleasecheck_max_time = 30\n")
    inner.makepyfile(test_ini="""
        import os

        def test_settings(leasecheck_run, leasecheck_store):
            assert (str(leasecheck_store), leasecheck_run.default_time_limit) == (os.environ["WANT_STORE"], float(os.environ["WANT_LIMIT"]))
            assert leasecheck_run.default_max_time == float(os.environ["WANT_MAX"])
    """)
    monkeypatch.setenv("WANT_MAX", "30")
    monkeypatch.setenv("WANT_STORE", str(inner.path / "runs" / "here"))
    monkeypatch.setenv("WANT_LIMIT", "7.5")
    result = run_inner(inner)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"leasecheck 0.1.0: store {inner.path / 'runs' / 'here'}, time limit 7.5 s"])
    monkeypatch.setenv("WANT_STORE", str(inner.path / "cli"))
    monkeypatch.setenv("WANT_LIMIT", "3")
    monkeypatch.setenv("WANT_MAX", "12")
    run_inner(inner, "--leasecheck-store", "cli", "--leasecheck-time-limit", "3", "--leasecheck-max-time", "12").assert_outcomes(passed=1)

    result = run_inner(inner, "--leasecheck-time-limit", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--leasecheck-time-limit*'0': give a positive, finite number of seconds*"])


def test_misuse_is_a_clear_error_and_a_bad_option_is_no_verdict(inner: pytest.Pytester) -> None:
    """Unknown keys, no target, a positional marker argument, no seeds; and a run that exits 3 errs with its stderr line."""
    inner.makepyfile(test_misuse=f"""
        import pytest
        from leasecheck.ci.plugin_results import LeasecheckError

        def test_unknown_key(leasecheck_run):
            with pytest.raises(TypeError, match="unknown run option 'ttl_ms' \\\\(did you mean 'ttl'\\\\?\\\\)"):
                leasecheck_run(target={SQLITE!r}, ttl_ms=300)

        @pytest.mark.leasecheck(target={SQLITE!r}, duprate=0.5)
        def test_unknown_marker_key(leasecheck_run):
            with pytest.raises(TypeError, match="'duprate' \\\\(did you mean 'dup_rate'\\\\?\\\\)"):
                leasecheck_run()

        def test_no_target(leasecheck_run):
            with pytest.raises(TypeError, match="no target"):
                leasecheck_run()

        def test_no_seeds(leasecheck_run):
            with pytest.raises(ValueError, match="seeds=0 runs nothing"):
                leasecheck_run(target={SQLITE!r}, seeds=0)
            with pytest.raises(TypeError, match="seeds must be"):
                leasecheck_run(target={SQLITE!r}, seeds="1,2")
            with pytest.raises(ValueError, match="expect='broken'"):
                leasecheck_run(target={SQLITE!r}, expect="broken")

        @pytest.mark.leasecheck({SQLITE!r})
        def test_positional_marker(leasecheck_run):
            pass

        def test_bad_fault(leasecheck_run):
            leasecheck_run(target={SQLITE!r}, nemesis="no-such-fault", seeds=[5], time_limit=4)
    """)
    result = run_inner(inner)
    result.assert_outcomes(passed=4, failed=1, errors=1)
    out = result.stdout.str()
    assert "TypeError: @pytest.mark.leasecheck takes keyword arguments only" in out
    result.stdout.fnmatch_lines([
        "E*LeasecheckError: leasecheck run (seed 5) gave no verdict: exit 3, bad options: leasecheck run: unknown nemesis no-such-fault (known: pause, kill*",
        f"E*replay: cd {inner.path} && leasecheck run --target {SQLITE} --nemesis no-such-fault --seed 5 --time-limit 4 --evidence-wait 4"
        " --fail-fast --until-covered --max-time 40 --store *",
    ])


def test_loading_the_plugin_imports_nothing_of_a_run() -> None:
    """Every pytest session of a project with leasecheck installed loads the plugin: it must cost only itself."""
    probe = ("import sys, leasecheck.ci.pytest_plugin\n"
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('leasecheck') or m.split('.')[0] in "
             "('click', 'rich', 'networkx', 'msgspec', 'numpy', 'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert set(out) == {"leasecheck", "leasecheck.ci", "leasecheck.ci.pytest_plugin", "leasecheck.ci.plugin_args",
                        "leasecheck.ci.plugin_results", "leasecheck.ci.plugin_runner", "leasecheck.exits"}, out
