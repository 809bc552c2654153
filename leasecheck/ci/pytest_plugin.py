"""The pytest plugin: a lease library's own test suite runs leasecheck and fails with the anomalies.

Installed with leasecheck (entry point ``pytest11``), so any project with
leasecheck installed can write::

    def test_my_lease(leasecheck_run):
        leasecheck_run(target="mypkg:MyLease", nemesis="pause,kill", seeds=3)

Each seed is one ``leasecheck run`` in a child process, exactly as on the command
line (``python -m leasecheck run ... --json``): the run gets its own worker
processes and signals, and what the test reports is what the CLI would say, so
the replay command in a failure message reproduces the run. The child sees the
test's ``sys.path`` (as ``PYTHONPATH``) and starts in pytest's rootdir, so a
target that the test can import, the run can too.

This module is imported by every pytest session of a project that has leasecheck
installed, whether it uses leasecheck or not: it imports only the standard
library and pytest here, and never leasecheck's own modules (rich, networkx, the
checker) until a run is asked for.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: ``leasecheck_run(**run_options)`` keys -> ``leasecheck run`` flags (the flag's name with ``_`` for ``-``)
RUN_FLAGS: dict[str, str] = {
    "url": "--url",
    "exec_store": "--exec-store",
    "nemesis_interval": "--nemesis-interval",
    "evidence_wait": "--evidence-wait",
    "require": "--require",
    "concurrency": "--concurrency",
    "ttl": "--ttl",
    "nodes": "--nodes",
    "dup_rate": "--dup-rate",
    "rate": "--rate",
    "clock_uncertainty": "--clock-uncertainty",
    "store_skew": "--store-skew",
    "env": "--env",
}
#: the call's own parameters, which the marker may also give
CALL_KEYS = ("target", "nemesis", "seeds", "time_limit", "expect")
#: what ``expect`` may say; "any": return the results without judging them
EXPECTATIONS = ("valid", "invalid", "unknown", "any")

DEFAULT_NEMESIS = "pause,kill"
DEFAULT_SEEDS = 3
#: seconds of workload per run when neither the call, the marker, --leasecheck-time-limit nor the ini says
DEFAULT_TIME_LIMIT = 10.0
#: anomalies shown in full per failing run; the rest are counted by kind
SHOWN_ANOMALIES = 5
#: seconds a run may take beyond its time limit and evidence wait (servers' start, final reads, the check)
RUN_SLACK_S = 300.0
#: seconds a run gets to heal, record and check after SIGTERM before it is killed
GRACE_S = 60.0

MARKER = "leasecheck"
MARKER_HELP = (
    "leasecheck(target=..., nemesis=..., seeds=..., time_limit=..., expect=..., **run_options): "
    "defaults of the leasecheck_run fixture's call in this test"
)

_STORE = pytest.StashKey[Path]()
_RUNS = pytest.StashKey[Counter[str]]()
#: the session's leasecheck_stores (a leasecheck.kit.testing.Stores), for the session's last line
_STORES = pytest.StashKey[Any]()


class LeasecheckError(Exception):
    """A run that gave no verdict: bad options (exit 3), the environment failed (exit 4), interrupted, or hung.

    Never a verdict on the backend: the test errs with the run's own one-line reason.
    """


@dataclass(frozen=True)
class Anomaly:
    """One anomaly of a run's verdict (docs/contracts/verdict.md): what, on which node, proven by which ops."""

    kind: str
    node: str | None
    ops: tuple[int, ...]
    explanation: str
    #: which fault hit the processes that prove it, or that none did ("" when not said)
    attribution: str = ""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Anomaly:
        return cls(kind=str(obj.get("kind")), node=obj.get("node"), ops=tuple(obj.get("ops") or ()),
                   explanation=str(obj.get("explanation") or ""), attribution=str(obj.get("attribution") or ""))


@dataclass(frozen=True)
class LeasecheckResult:
    """One seed's run: its verdict (``"valid"``, ``"invalid"``, ``"unknown"``), why, and where to look.

    ``report`` is the run folder's ``report.html``; ``command`` replays the run
    (from pytest's rootdir); ``results`` is the run's whole ``results.json``.
    """

    target: str
    seed: int
    verdict: str
    reason: str | None
    anomalies: tuple[Anomaly, ...]
    run_dir: Path
    report: Path
    command: str
    exit_code: int
    results: dict[str, Any] = field(repr=False)

    @property
    def kinds(self) -> list[str]:
        """The anomaly kinds found, each once, in the order first found."""
        return list(dict.fromkeys(a.kind for a in self.anomalies))


def verdict_name(valid: object) -> str:
    """results.json's ``valid`` (true / false / "unknown") as the word the plugin uses."""
    if valid is True:
        return "valid"
    if valid is False:
        return "invalid"
    return "unknown"


def seed_list(seeds: int | Iterable[int]) -> list[int]:
    """``seeds``: an int N means seeds 1..N (the same runs on every machine); a list means those seeds."""
    __tracebackhide__ = True
    if isinstance(seeds, bool):
        raise TypeError(f"leasecheck_run: seeds must be an int or a list of ints, not {seeds!r}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ValueError(f"leasecheck_run: seeds={seeds} runs nothing: give at least 1 (or a list of seeds)")
        return list(range(1, seeds + 1))
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Iterable):
        raise TypeError(f"leasecheck_run: seeds must be an int or a list of ints, not {seeds!r}")
    chosen = list(seeds)
    if not chosen or not all(isinstance(s, int) and not isinstance(s, bool) for s in chosen):
        raise TypeError(f"leasecheck_run: seeds must be an int or a non-empty list of ints, not {seeds!r}")
    return chosen


def nemesis_arg(nemesis: str | Iterable[str]) -> str:
    """``"pause,kill"`` or ``["pause", "kill"]`` as ``--nemesis`` takes it."""
    if isinstance(nemesis, str):
        return nemesis
    return ",".join(nemesis)


def _flag_value(value: object) -> str:
    """A flag's value as a user types it: ``10`` for 10.0 (the replay command is read by people)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def check_run_options(options: Mapping[str, Any]) -> None:
    """Refuse keys that are no ``leasecheck run`` flag, naming the close ones and all the known ones."""
    __tracebackhide__ = True
    unknown = [key for key in options if key not in RUN_FLAGS]
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, list(RUN_FLAGS) + list(CALL_KEYS), n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise TypeError(f"leasecheck_run: unknown run option {', '.join(hints)}; known: {', '.join(CALL_KEYS + tuple(RUN_FLAGS))}")


def run_args(target: str, nemesis: str, seed: int, time_limit: float, options: Mapping[str, Any]) -> list[str]:
    """The arguments of ``leasecheck`` for one run (without ``--store`` and ``--json``, which only the plugin needs)."""
    args = ["run", "--target", target, "--nemesis", nemesis, "--seed", str(seed), "--time-limit", _flag_value(time_limit)]
    for key, value in options.items():
        if value is None:
            continue
        for one in (value if isinstance(value, list | tuple) else [value]):  # a repeatable flag (require) takes a list
            args += [RUN_FLAGS[key], _flag_value(one)]
    return args


#: ``sys.path`` as the interpreter started pytest (this module is loaded before any conftest or ``pythonpath`` setting adds to it)
_STARTUP_PATH = frozenset(os.path.abspath(p) for p in sys.path if isinstance(p, str))


def replay_command(rootdir: Path, args: list[str], store: Path) -> str:
    """The shell line that makes the run again as the plugin made it: ``cd ROOTDIR && [PYTHONPATH=...] leasecheck ARGS --store STORE``.

    ``--store`` is the run's (the session's store, not the CLI's default
    ``./store``), so the replay's run folder lands next to the one it
    replays. ``PYTHONPATH`` is set when the run was given folders a
    plain ``leasecheck`` would not search (:func:`child_env`: a ``pythonpath``
    ini setting, a conftest's insert), where its target may live; the rootdir
    is none of them: the run starts there and a target is looked for in the
    current directory. Only ``--json`` is left out: it is how the plugin reads the verdict.
    """
    root = os.path.abspath(rootdir)
    added = [p for p in dict.fromkeys(os.path.abspath(p) for p in sys.path if isinstance(p, str)) if p not in _STARTUP_PATH and p != root]
    env = ""
    if added:
        inherited = ":$PYTHONPATH" if os.environ.get("PYTHONPATH") else ""  # the shell that ran pytest has its own: kept
        env = f"PYTHONPATH={shlex.quote(os.pathsep.join(added))}{inherited} "
    return f"cd {shlex.quote(str(rootdir))} && {env}leasecheck {shlex.join([*args, '--store', str(store)])}"


def child_env() -> dict[str, str]:
    """The run's environment: ours, with this process's ``sys.path`` as ``PYTHONPATH``.

    So ``mypkg:MyLease`` imports in the run (and its workers) as it does in the
    test: from the rootdir, a ``pythonpath`` ini setting, a conftest's insert.
    Relative entries are made absolute here, where they mean what they mean.
    """
    env = dict(os.environ)
    paths = list(dict.fromkeys(os.path.abspath(p) for p in sys.path if isinstance(p, str)))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(nothing on stderr)"


def _stop(proc: subprocess.Popen[str], first: signal.Signals, wait_s: float) -> tuple[str, str]:
    """Ask a run to end (it heals its faults and checks what it has), then kill it if it will not."""
    try:
        if proc.poll() is None:
            proc.send_signal(first)
        return proc.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def _exit_meaning(code: int) -> str:
    if code == 3:
        return "bad options"
    if code == 4:
        return "the environment failed"
    if code > 128:
        try:
            return f"interrupted by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    if code < 0:
        return f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else "killed"
    return "no verdict"


@dataclass
class LeasecheckRunner:
    """The ``leasecheck_run`` fixture's value: call it to run the target once per seed."""

    store: Path
    rootdir: Path
    default_time_limit: float
    #: the test's ``@pytest.mark.leasecheck`` keyword arguments (closest marker wins)
    defaults: dict[str, Any] = field(default_factory=dict)
    #: every run made through this fixture so far, in order
    runs: list[LeasecheckResult] = field(default_factory=list, repr=False)
    #: the session's tally of verdicts (for the terminal summary)
    counts: Counter[str] | None = field(default=None, repr=False)

    def __call__(self, target: str | None = None, nemesis: str | Iterable[str] | None = None,
                 seeds: int | Iterable[int] | None = None, time_limit: float | None = None,
                 expect: str | None = None, **run_options: Any) -> list[LeasecheckResult]:
        """Run ``target`` under ``nemesis`` once per seed; fail the test if a verdict is not ``expect``.

        Arguments not given come from the test's ``@pytest.mark.leasecheck``, then
        from the defaults (nemesis ``pause,kill``, 3 seeds, ``--leasecheck-time-limit``).
        ``run_options`` are ``leasecheck run`` flags (``ttl=500`` is ``--ttl 500``);
        ``evidence_wait`` defaults to the time limit, as ``leasecheck audit`` does, so
        a slow machine gives a late verdict rather than ``unknown``.
        ``expect`` is ``"valid"`` unless said (``"invalid"`` for a known-broken variant,
        ``"unknown"``); ``"any"`` judges nothing: the results are returned whatever they say.
        """
        __tracebackhide__ = True
        given = {"target": target, "nemesis": nemesis, "seeds": seeds, "time_limit": time_limit, "expect": expect}
        merged: dict[str, Any] = dict(self.defaults)
        merged.update({k: v for k, v in given.items() if v is not None})
        merged.update(run_options)
        call = {k: merged.pop(k) for k in CALL_KEYS if k in merged}
        check_run_options(merged)

        chosen_target = call.get("target")
        if not isinstance(chosen_target, str) or not chosen_target:
            raise TypeError("leasecheck_run: no target: pass target='module:Class' (or a registered name, see"
                            " `leasecheck targets`), or set it with @pytest.mark.leasecheck(target=...)")
        chosen_expect = call.get("expect", "valid")
        if chosen_expect not in EXPECTATIONS:
            raise ValueError(f"leasecheck_run: expect={chosen_expect!r}: one of {', '.join(repr(e) for e in EXPECTATIONS)}")
        faults = nemesis_arg(call.get("nemesis", DEFAULT_NEMESIS))
        limit = float(call.get("time_limit", self.default_time_limit))
        chosen_seeds = seed_list(call.get("seeds", DEFAULT_SEEDS))
        merged.setdefault("evidence_wait", limit)

        results = []
        for seed in chosen_seeds:
            results.append(self.run_one(chosen_target, faults, seed, limit, merged))
        if chosen_expect != "any":
            wrong = [r for r in results if r.verdict != chosen_expect]
            if wrong:
                pytest.fail(failure_message(chosen_target, faults, chosen_expect, wrong, len(results)), pytrace=False)
        return results

    def run_one(self, target: str, nemesis: str, seed: int, time_limit: float, options: Mapping[str, Any]) -> LeasecheckResult:
        """One ``leasecheck run`` in a child process; its results.json as a :class:`LeasecheckResult`."""
        __tracebackhide__ = True
        args = run_args(target, nemesis, seed, time_limit, options)
        command = replay_command(self.rootdir, args, self.store)
        from leasecheck.servers.base import python_module  # not at the plugin's import: every pytest session loads it

        argv = [*python_module("leasecheck"), *args, "--store", str(self.store), "--json"]
        timeout = time_limit + float(options.get("evidence_wait") or 0) + RUN_SLACK_S
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=self.rootdir, env=child_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = _stop(proc, signal.SIGTERM, GRACE_S)
            raise LeasecheckError(f"leasecheck run (seed {seed}) did not finish within {timeout:g} s and was stopped"
                                  f" (exit {proc.returncode}): {_last_line(err)}\n  replay: {command}") from None
        except BaseException:  # Ctrl-C (which the run got too) or any other way out: let it heal its faults first
            if proc.poll() is None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    _stop(proc, signal.SIGTERM, GRACE_S)
            raise
        elapsed = time.monotonic() - started
        code = proc.returncode
        if code not in (0, 1, 2):
            raise LeasecheckError(f"leasecheck run (seed {seed}) gave no verdict: exit {code}, {_exit_meaning(code)}:"
                                  f" {_last_line(err)}\n  replay: {command}")
        try:
            results = json.loads(out)
            run_dir = Path(results["run_dir"])
        except (ValueError, KeyError, TypeError):
            raise LeasecheckError(f"leasecheck run (seed {seed}) exit {code} printed no results.json: {_last_line(err)}"
                                  f"\n  replay: {command}") from None
        result = LeasecheckResult(
            target=target, seed=seed, verdict=verdict_name(results.get("valid")), reason=results.get("reason"),
            anomalies=tuple(Anomaly.from_json(a) for a in results.get("anomalies") or ()), run_dir=run_dir,
            report=run_dir / "report.html", command=command, exit_code=code, results=results,
        )
        self.runs.append(result)
        if self.counts is not None:
            self.counts[result.verdict] += 1
        found = f" ({len(result.anomalies)} anomalies: {', '.join(result.kinds)})" if result.anomalies else ""
        print(f"leasecheck: {target} seed {seed}: {result.verdict}{found} in {elapsed:.1f} s, run folder {run_dir}", file=sys.stderr)
        return result


def _indent(text: str, prefix: str) -> str:
    return ("\n" + prefix).join(text.splitlines() or [""])


def shown_anomalies(anomalies: Iterable[Anomaly], n: int = SHOWN_ANOMALIES) -> list[Anomaly]:
    """The ``n`` anomalies a message shows in full: the first of each kind, then the next ones in the verdict's order.

    A run's anomalies often come in clusters on one node; the first of each kind
    says more than five of the same.
    """
    found = list(anomalies)
    first_of_kind: dict[str, int] = {}
    for i, a in enumerate(found):
        first_of_kind.setdefault(a.kind, i)
    picked = sorted(first_of_kind.values())[:n]
    picked += [i for i in range(len(found)) if i not in first_of_kind.values()][: n - len(picked)]
    return [found[i] for i in sorted(picked)]


def describe_run(result: LeasecheckResult, expect: str) -> str:
    """One run that is not what was expected: its verdict, its anomalies, and where to look and how to replay."""
    lines = []
    if result.verdict == "invalid":
        by_kind = Counter(a.kind for a in result.anomalies)
        kinds = ", ".join(f"{kind} x{n}" for kind, n in by_kind.items())
        lines.append(f"seed {result.seed}: invalid, {len(result.anomalies)} anomalies ({kinds}) (expected {expect})")
        shown = shown_anomalies(result.anomalies)
        for a in shown:
            ops = ", ".join(str(op) for op in a.ops)
            lines.append(f"  {a.kind} on node {a.node}, ops [{ops}]:")
            lines.append("      " + _indent(a.explanation, "      "))
            if a.attribution:
                lines.append("      " + _indent(a.attribution, "      "))
        shown_ids = {id(a) for a in shown}
        rest = [a for a in result.anomalies if id(a) not in shown_ids]
        if rest:
            more = ", ".join(f"{kind} x{n}" for kind, n in Counter(a.kind for a in rest).items())
            lines.append(f"  ... and {len(rest)} more ({more}): see the report")
    elif result.verdict == "unknown":
        lines.append(f"seed {result.seed}: unknown (expected {expect}): {result.reason or 'no reason given'}")
    else:
        caught = ": the run found no anomaly" if expect == "invalid" else ""
        lines.append(f"seed {result.seed}: valid (expected {expect}){caught}")
    lines.append(f"  run folder: {result.run_dir}")
    lines.append(f"  report:     {result.report}")
    lines.append(f"  replay:     {result.command}")
    return "\n".join(lines)


def failure_message(target: str, nemesis: str, expect: str, wrong: list[LeasecheckResult], total: int) -> str:
    """The assertion message of a test whose runs are not all ``expect``."""
    head = f"leasecheck: target {target}, nemesis {nemesis}: {len(wrong)} of {total} runs not {expect}"
    return "\n\n".join([head, *(describe_run(r, expect) for r in wrong)])


# -- options, marker, fixtures, header ------------------------------------------------------------------


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not (seconds > 0 and seconds != float("inf")):
        raise argparse.ArgumentTypeError(f"{value!r}: give a positive, finite number of seconds")
    return seconds


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leasecheck", "leasecheck (lease / fencing-token runs)")
    group.addoption("--leasecheck-store", dest="leasecheck_store", metavar="DIR", default=None,
                    help="Folder of leasecheck's run folders (default: 'leasecheck' in pytest's basetemp).")
    group.addoption("--leasecheck-time-limit", dest="leasecheck_time_limit", metavar="SECONDS", type=_positive_seconds,
                    default=None, help=f"Seconds of workload per run when the test does not say (default: {DEFAULT_TIME_LIMIT:g}).")
    parser.addini("leasecheck_store", "leasecheck's run folders (relative to the ini file; --leasecheck-store wins)", default="")
    parser.addini("leasecheck_time_limit", f"seconds per leasecheck run when the test does not say (default {DEFAULT_TIME_LIMIT:g})",
                  default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.stash[_RUNS] = Counter()


def time_limit_default(config: pytest.Config) -> float:
    """``--leasecheck-time-limit``, else the ini's ``leasecheck_time_limit``, else :data:`DEFAULT_TIME_LIMIT`."""
    given = config.getoption("leasecheck_time_limit")
    if given is not None:
        return float(given)
    ini = str(config.getini("leasecheck_time_limit") or "").strip()
    if ini:
        try:
            return _positive_seconds(ini)
        except argparse.ArgumentTypeError as e:
            raise pytest.UsageError(f"leasecheck_time_limit = {ini}: {e}") from None
    return DEFAULT_TIME_LIMIT


def chosen_store(config: pytest.Config) -> Path | None:
    """The store the user chose: ``--leasecheck-store`` (from where pytest was started), else the ini's (from the ini file)."""
    given = config.getoption("leasecheck_store")
    if given:
        return (config.invocation_params.dir / Path(given).expanduser()).absolute()
    ini = str(config.getini("leasecheck_store") or "").strip()
    if ini:
        base = config.inipath.parent if config.inipath is not None else config.rootpath
        return (base / Path(ini).expanduser()).absolute()
    return None


@pytest.fixture(scope="session")
def leasecheck_store(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the runs of this session go to (absolute).

    ``--leasecheck-store`` or the ini's ``leasecheck_store`` if given; otherwise
    ``leasecheck`` in pytest's basetemp, kept like every test's tmp_path (the last
    three sessions). pytest-xdist workers share the session's basetemp folder, so
    one session has one store.
    """
    store = chosen_store(pytestconfig)
    if store is None:
        base = tmp_path_factory.getbasetemp()
        if hasattr(pytestconfig, "workerinput"):  # an xdist worker's basetemp is <the session's>/popen-gwN
            base = base.parent
        store = base / "leasecheck"
    store.mkdir(parents=True, exist_ok=True)
    pytestconfig.stash[_STORE] = store
    return store


@pytest.fixture
def leasecheck_run(request: pytest.FixtureRequest, leasecheck_store: Path) -> LeasecheckRunner:
    """Call it to run leasecheck: ``leasecheck_run(target="mypkg:MyLease", nemesis="pause,kill", seeds=3)``.

    Returns one :class:`LeasecheckResult` per seed; fails the test with the anomalies
    when a verdict is not ``expect`` (``"valid"`` unless said). The test's
    ``@pytest.mark.leasecheck(...)`` keyword arguments are the call's defaults.
    """
    defaults: dict[str, Any] = {}
    for mark in reversed(list(request.node.iter_markers(MARKER))):  # the closest marker (the function's) wins
        if mark.args:
            raise TypeError(f"@pytest.mark.{MARKER} takes keyword arguments only (target=..., nemesis=..., ...), not {mark.args!r}")
        defaults.update(mark.kwargs)
    config = request.config
    return LeasecheckRunner(store=leasecheck_store, rootdir=config.rootpath, default_time_limit=time_limit_default(config),
                            defaults=defaults, counts=config.stash.get(_RUNS, None))


@pytest.fixture(scope="session")
def leasecheck_stores(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Throwaway stores for an adapter's own tests: ``leasecheck_stores.url("mymod:MyLease", tmp_path)``.

    A :class:`leasecheck.kit.testing.Stores`: the store the adapter's ``store`` names,
    started as ``leasecheck run`` starts it (a fresh SQLite file per call; one
    Postgres or Redis server per session, stopped at its end), or
    ``LEASECHECK_URL`` when set. The tests ``leasecheck new-target`` writes use it.
    """
    from leasecheck.kit.testing import Stores  # not at the plugin's import: every pytest session loads it

    with Stores(tmp_path_factory.mktemp("leasecheck-stores")) as stores:
        pytestconfig.stash[_STORES] = stores
        yield stores


def pytest_report_header(config: pytest.Config) -> list[str]:
    from leasecheck import __version__  # the package's __init__ holds only the version

    store = chosen_store(config)
    if store is None:
        basetemp = config.getoption("basetemp", None)
        where = f"{Path(basetemp).absolute() / 'leasecheck'}" if basetemp else "<pytest basetemp>/leasecheck"
    else:
        where = str(store)
    lines = [f"leasecheck {__version__}: store {where}, time limit {time_limit_default(config):g} s"]
    if os.environ.get("LEASECHECK_URL"):
        lines.append(f"leasecheck: LEASECHECK_URL is set: leasecheck_stores (new-target's tests) use "
                     f"{_without_password(os.environ['LEASECHECK_URL'])} and start no server")
    return lines


def _without_password(url: str) -> str:
    """A store's address fit for a log: the password of a URL (``user:pw@``) or a DSN (``password=pw``) as ``***``."""
    url = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", url)
    return re.sub(r"^([a-z][a-z0-9+.-]*://[^:/@]*:)[^@/]*@", r"\1***@", url)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line at the end of a session that made runs: how many, and the store they are in."""
    stores = config.stash.get(_STORES, None)
    used = stores.said() if stores is not None else None
    if used:  # what the adapter's tests ran against: LEASECHECK_URL, or the servers started for them
        terminalreporter.write_line(f"leasecheck: adapter tests used {used}")
    counts = config.stash.get(_RUNS, None)
    store = config.stash.get(_STORE, None)
    if not counts or store is None:
        return
    said = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    total = sum(counts.values())
    terminalreporter.write_line(f"leasecheck: {total} run{'' if total == 1 else 's'} ({said}), run folders in {store}")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist: add a worker's runs to the session's tally (the worker sends them in its workeroutput)."""
    output = getattr(node, "workeroutput", None) or {}
    runs = output.get("leasecheck_runs")
    if not runs:
        return
    config = node.config
    config.stash.setdefault(_RUNS, Counter()).update(runs)
    if _STORE not in config.stash and output.get("leasecheck_store"):
        config.stash[_STORE] = Path(output["leasecheck_store"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    output = getattr(config, "workeroutput", None)  # only on an xdist worker
    counts = config.stash.get(_RUNS, None)
    if output is not None and counts:
        output["leasecheck_runs"] = dict(counts)
        output["leasecheck_store"] = str(config.stash[_STORE])
