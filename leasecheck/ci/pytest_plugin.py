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

This module is what pytest loads: the options, the marker, the fixtures and the
session's hooks. What a call may say and the command line it becomes is
:mod:`.plugin_args` (its keys read off the run's one table of flags); the runs,
:mod:`.plugin_runner`; what they give back and the failure message,
:mod:`.plugin_results`.

It is imported by every pytest session of a project that has leasecheck
installed, whether it uses leasecheck or not: it and those three import only the
standard library and pytest, and never leasecheck's own modules (rich, networkx,
the checker) until a run is asked for.
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leasecheck.ci.plugin_args import DEFAULT_TIME_LIMIT, GATE_MAX_TIME_LIMITS
from leasecheck.ci.plugin_runner import LeasecheckRunner

MARKER = "leasecheck"
MARKER_HELP = (
    "leasecheck(target=..., nemesis=..., seeds=..., time_limit=..., expect=..., **run_options): "
    "defaults of the leasecheck_run fixture's call in this test"
)

_STORE = pytest.StashKey[Path]()
_RUNS = pytest.StashKey[Counter[str]]()
#: each run's line (verdict, what it covered), said at the session's end even when every test passed
_LINES = pytest.StashKey[list[str]]()
#: the session's leasecheck_stores (a leasecheck.kit.testing.Stores), for the session's last line
_STORES = pytest.StashKey[Any]()


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
    group.addoption("--leasecheck-max-time", dest="leasecheck_max_time", metavar="SECONDS", type=_positive_seconds,
                    default=None, help="The most a run expected valid goes on until covered, when the test does not say"
                                       f" (default: {GATE_MAX_TIME_LIMITS:g} x its time limit; never less than it).")
    parser.addini("leasecheck_store", "leasecheck's run folders (relative to the ini file; --leasecheck-store wins)", default="")
    parser.addini("leasecheck_time_limit", f"seconds per leasecheck run when the test does not say (default {DEFAULT_TIME_LIMIT:g})",
                  default="")
    parser.addini("leasecheck_max_time", f"the most a run expected valid goes on until covered (default {GATE_MAX_TIME_LIMITS:g} x"
                  " its time limit)", default="")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.stash[_RUNS] = Counter()
    config.stash[_LINES] = []


def _seconds(config: pytest.Config, name: str) -> float | None:
    """The option ``--NAME`` (``name`` with ``_`` as ``-``), else the ini's ``name``, else None."""
    given = config.getoption(name)
    if given is not None:
        return float(given)
    ini = str(config.getini(name) or "").strip()
    if ini:
        try:
            return _positive_seconds(ini)
        except argparse.ArgumentTypeError as e:
            raise pytest.UsageError(f"{name} = {ini}: {e}") from None
    return None


def time_limit_default(config: pytest.Config) -> float:
    """``--leasecheck-time-limit``, else the ini's ``leasecheck_time_limit``, else :data:`DEFAULT_TIME_LIMIT`."""
    given = _seconds(config, "leasecheck_time_limit")
    return DEFAULT_TIME_LIMIT if given is None else given


def max_time_default(config: pytest.Config) -> float | None:
    """``--leasecheck-max-time``, else the ini's ``leasecheck_max_time``; None: the gate's own (10 × its time limit).
    Why an option: a team's CI bounds what a gate may cost, as it bounds its time limit."""
    return _seconds(config, "leasecheck_max_time")


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
                            default_max_time=max_time_default(config),
                            defaults=defaults, counts=config.stash.get(_RUNS, None), lines=config.stash.get(_LINES, None),
                            properties=request.node.user_properties)


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
    for line in config.stash.get(_LINES, []):  # what each run covered: a green gate says what it tested
        terminalreporter.write_line(line)
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
    config.stash.setdefault(_LINES, []).extend(output.get("leasecheck_lines") or ())
    if _STORE not in config.stash and output.get("leasecheck_store"):
        config.stash[_STORE] = Path(output["leasecheck_store"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    output = getattr(config, "workeroutput", None)  # only on an xdist worker
    counts = config.stash.get(_RUNS, None)
    if output is not None and counts:
        output["leasecheck_runs"] = dict(counts)
        output["leasecheck_lines"] = config.stash.get(_LINES, None) or []
        output["leasecheck_store"] = str(config.stash[_STORE])
