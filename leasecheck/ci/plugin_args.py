"""What a ``leasecheck_run`` call may say, and the ``leasecheck run`` command line it becomes.

The fixture's keyword arguments are ``leasecheck run`` flags, named as the flag
with ``_`` for ``-`` (``ttl=500`` is ``--ttl 500``): :func:`run_flags` reads them
off the one declaration of the run's options (:data:`leasecheck.run.flags.FLAGS`)
when a call is checked, all but those the call or the plugin sets itself. Here too: the call's defaults, the checks of its
arguments, the argument list of one run, its replay command and its child's
environment. Kept apart from the fixture that runs it and from the message a
failure shows, so the table and its checks read on their own.

Imported when pytest loads the plugin (:mod:`leasecheck.ci.pytest_plugin`), so it
imports only the standard library and :mod:`leasecheck.exits` (the same) at the top (the run's flags, and click with them,
when a run is asked for); :data:`_STARTUP_PATH` is taken then.
"""

from __future__ import annotations

import difflib
import functools
import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from leasecheck.exits import VERDICTS  # the standard library only, like the plugin

#: the call's own parameters, which the marker may also give
CALL_KEYS = ("target", "nemesis", "seeds", "time_limit", "expect")
#: flags of ``leasecheck run`` a call never passes on: the call's own (``target``, ``nemesis``, ``time_limit``,
#: ``seeds``), the plugin's (``--store``, ``--json``), and how the CLI reports (pytest reports for itself)
_NOT_A_CALL_OPTION = frozenset({"--target", "--nemesis", "--time-limit", "--seed", "--store", "--json", "--coverage", "--junit"})


@functools.cache
def run_flags() -> dict[str, str]:
    """``leasecheck_run(**run_options)`` keys -> ``leasecheck run`` flags: the flag's name with ``_`` for ``-``."""
    from leasecheck.run.flags import FLAGS

    flags = (f"--{flag.name}" for flag in FLAGS)
    return {flag[2:].replace("-", "_"): flag for flag in flags if flag not in _NOT_A_CALL_OPTION}
#: what ``expect`` may say; "any": return the results without judging them
EXPECTATIONS = (*VERDICTS, "any")

DEFAULT_NEMESIS = "pause,kill"
DEFAULT_SEEDS = 3
#: seconds of workload per run when neither the call, the marker, --leasecheck-time-limit nor the ini says
DEFAULT_TIME_LIMIT = 10.0
#: a gate expected valid goes on until covered up to this many time limits (``max_time``), where ``leasecheck run
#: --until-covered`` stops at 4: the first stop inside each kind of op three times over, for pause and for kill, takes
#: a default SQLite gate about 65 s (every writer waits while one is stopped in its transaction), and a green gate
#: that stopped short of it at 40 s said so on every seed of ten (``python -m bench.bench_until_covered``)
GATE_MAX_TIME_LIMITS = 10.0


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
    return list(_distinct(chosen, "seeds", seeds))


def _distinct(items: list[Any], key: str, given: object) -> tuple[Any, ...]:
    """A call's list, none of its items empty or named twice (:func:`leasecheck.lists.distinct`); ValueError naming it."""
    __tracebackhide__ = True
    from leasecheck.lists import BadList, distinct

    try:
        return distinct(items, key)
    except BadList as e:
        raise ValueError(f"leasecheck_run: {key}={given!r}: {e.why}") from None


def nemesis_arg(nemesis: str | Iterable[str]) -> str:
    """``"pause,kill"`` or ``["pause", "kill"]`` as ``--nemesis`` takes it; an empty or repeated fault is refused."""
    __tracebackhide__ = True
    if isinstance(nemesis, str):
        if nemesis.strip().lower() in ("", "none"):  # "": refused by the run itself, naming --nemesis
            return nemesis
        return ",".join(_distinct([f.strip() for f in nemesis.split(",")], "nemesis", nemesis))
    return ",".join(_distinct([str(f).strip() for f in nemesis], "nemesis", nemesis))


def _flag_value(value: object) -> str:
    """A flag's value as a user types it: ``10`` for 10.0 (the replay command is read by people)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def check_run_options(options: Mapping[str, Any]) -> None:
    """Refuse keys that are no ``leasecheck run`` flag, naming the close ones and all the known ones, and a list
    (``require=[...]``) with an empty or repeated item."""
    __tracebackhide__ = True
    known = run_flags()
    unknown = [key for key in options if key not in known]
    if not unknown:
        for key, value in options.items():
            if isinstance(value, list | tuple):
                _distinct(list(value), key, value)
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, list(known) + list(CALL_KEYS), n=1)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise TypeError(f"leasecheck_run: unknown run option {', '.join(hints)}; known: {', '.join(CALL_KEYS + tuple(known))}")


def run_args(target: str, nemesis: str, seed: int, time_limit: float, options: Mapping[str, Any]) -> list[str]:
    """The arguments of ``leasecheck`` for one run (without ``--store`` and ``--json``, which only the plugin needs)."""
    args = ["run", "--target", target, "--nemesis", nemesis, "--seed", str(seed), "--time-limit", _flag_value(time_limit)]
    for key, value in options.items():
        if value is None:
            continue
        if isinstance(value, bool):  # an on/off flag (fail_fast): there, or not
            args += [run_flags()[key]] if value else []
            continue
        for one in (value if isinstance(value, list | tuple) else [value]):  # a repeatable flag (require) takes a list
            args += [run_flags()[key], _flag_value(one)]
    return args


#: ``sys.path`` as the interpreter started pytest (the plugin loads this module before any conftest or ``pythonpath`` setting adds to it)
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
