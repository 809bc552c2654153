"""What the run report says about a run besides its ops: verdict, settings, and the command that replays it.

A run folder holds ``results.json`` (the run verdict), ``test.json`` (every
option, the seed, the command line) and ``history.jsonl``; the report reads
each one that is there. Without ``results.json`` (a history from elsewhere, a
run that died before judging) the history is checked here, as ``leasecheck
check`` would; a side file that is not what leasecheck writes is set aside
with a warning, never fatal: the history alone makes a report.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from leasecheck.histories import Header, HistoryError
from leasecheck.histories.vocabulary import KINDS
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.outcomes import replay_args

#: the command that replays a run as whoever started it would type it, when that is not the run's own command line:
#: the pytest plugin sets it for its runs (``cd ROOTDIR && [PYTHONPATH=...] leasecheck run ... --store STORE``, with no
#: ``--json``), the run keeps it in test.json as ``replay``, and the report shows it as it is
REPLAY_ENV = "LEASECHECK_REPLAY"

#: one line per anomaly kind, for the report's group headings (docs/anomalies.md)
KIND_MEANING: dict[str, str] = {
    "duplicate-epoch": "two claims were granted the same epoch",
    "epoch-regression": "a claim was granted an epoch not above one already observed",
    "stale-renew": "the store accepted a renew with an epoch older than one already observed",
    "stale-commit": "the store accepted a commit with an epoch older than one already observed",
    "stale-effect": "the protected resource accepted an effect with an epoch older than one already observed",
    "duplicate-commit": "two different leases both committed the node",
    "lost-commit": "a read after an acknowledged commit does not show it",
    "overlapping-lease": "a claim was granted while the previous holder provably still held its lease",
    "stuck-lease": "a claim was refused as held after every lease had provably expired",
    "premature-expiry": "an op was refused as expired while its lease was provably unexpired",
    "non-linearizable": "no order of the node's ops satisfies the lease model, and none of the other kinds explains it",
}

#: settings shown first: what a reader of the report asks about before anything else
_FIRST = ("target", "nemesis", "seed", "time_limit", "concurrency", "ttl_ms", "clock_uncertainty_ms", "nodes")


@dataclass(frozen=True)
class ReplayFlag:
    """A ``leasecheck run`` flag the replay command may carry: the test.json option it repeats, and that option's default.

    The report never imports a run, so whoever writes it gives it these
    (:func:`leasecheck.run.flags.replay_flags`: ``leasecheck run``'s own table).
    """

    #: the key in test.json's ``options``; ``workload.rate``: ``rate`` in its ``workload`` object
    option: str
    flag: str
    #: the option's value when the flag is not given: left out of the command at it
    default: Any
    #: given once per item of the value (``--require a --require b``), not as one value
    repeated: bool = False


@dataclass
class RunInputs:
    """Everything a report of one history shows but its ops."""

    history: Path
    #: the verdict object: results.json's, or ``leasecheck check``'s when there is none
    results: dict[str, Any]
    #: where ``results`` came from: "results.json", or "checked now" (the history was checked for the report)
    results_source: str
    test: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def history_of(path: Path) -> tuple[Path, Path | None]:
    """(the history, the run folder whose results.json and test.json go with it, or None).

    ``path`` is a run folder, or a history file: one named ``history.jsonl``
    is read with its folder's side files, any other alone (a folder of
    several histories has no results.json of each).
    """
    if path.is_dir():
        history = RunFolder(path).history
        if not history.is_file():
            raise HistoryError(str(path), None, "is a directory with no history.jsonl (not a run folder)")
        return history, path
    if not path.exists():
        raise HistoryError(str(path), None, "no such file or directory")
    return path, (path.parent if path.name == RunFolder.HISTORY else None)


def _json_object(path: Path, warn: Callable[[str], None]) -> dict[str, Any] | None:
    try:
        data = msgspec.json.decode(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as e:
        warn(f"{path}: not readable as JSON ({e}); ignored")
        return None
    if not isinstance(data, dict):
        warn(f"{path}: not a JSON object; ignored")
        return None
    return data


def load(path: Path, warn: Callable[[str], None]) -> RunInputs:
    """The history and side files of ``path`` (see :func:`history_of`); checks the history if results.json is missing.

    Raises :class:`HistoryError` (one line: file, line, what) for a history that
    is not one; only when the history has to be checked here does that read
    the whole history twice (once for the columns, once for the checker).
    """
    history, folder = history_of(path)
    results = test = None
    if folder is not None:
        results = _json_object(RunFolder(folder).results, warn)
        test = _json_object(RunFolder(folder).test, warn)
        if results is not None and "valid" not in results:  # a run that died before judging ("status": "error")
            why = results.get("reason")
            warn(f"{RunFolder(folder).results} holds no verdict{f' ({why})' if why else ''}: the history is checked for the report")
            results = None
    if results is not None:
        return RunInputs(history, results, RunFolder.RESULTS, test)
    from leasecheck.checker import check_source
    from leasecheck.verdict.attribution import fault_victims
    from leasecheck.verdict.run_verdict import fault_windows

    verdict = check_source(history, windows=fault_windows, faults=fault_victims)
    obj = verdict.to_json()
    if verdict.header is not None:
        meta = verdict.header.meta
        obj.update({k: meta[k] for k in ("target", "nemesis", "seed") if k in meta})
    return RunInputs(history, obj, "checked now", test)


def sorted_anomalies(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The verdict's anomalies grouped by kind, kinds in the order reports list them (stable within a kind)."""
    order: dict[str, int] = {k: i for i, k in enumerate(KINDS)}
    listed = [a for a in results.get("anomalies") or [] if isinstance(a, dict)]
    return sorted(listed, key=lambda a: (order.get(str(a.get("kind")), len(order)), str(a.get("kind"))))


def _flag_value(name: str, value: Any) -> str:
    if name == "nemesis":
        return ",".join(value) if value else "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _option(options: dict[str, Any], key: str, default: Any) -> Any:
    """test.json's option ``key`` (``workload.rate``: ``rate`` in its ``workload`` object), or ``default``."""
    owner, _, name = key.rpartition(".")
    if owner:
        inner = options.get(owner)
        return inner.get(name, default) if isinstance(inner, dict) else default
    return options.get(name, default)


def recorded_replay() -> dict[str, str]:
    """What test.json records of :data:`REPLAY_ENV`: ``{"replay": COMMAND}``, or nothing when it is not set."""
    command = os.environ.get(REPLAY_ENV, "")
    return {"replay": command} if command.strip() else {}


def replay_command(test: dict[str, Any] | None, header: Header, results: dict[str, Any],
                   flags: Sequence[ReplayFlag]) -> tuple[str | None, str]:
    """(the command that replays the run, where it came from), or (None, why there is none).

    test.json's ``replay`` when whoever started the run recorded one (the
    pytest plugin: its ``cd`` and ``PYTHONPATH`` are part of it); else its argv
    when it was ``leasecheck run`` itself, without the flags that only say
    where the verdict goes (``--json``, ``--junit``: :func:`replay_args`) and
    with ``--seed`` added if the seed was drawn; else built from its options,
    flag by flag (``flags``, in their order) for what differs from the
    defaults; without test.json, from the history's header (target, nemesis,
    seed, ttl).
    """
    seed = (test or {}).get("seed", results.get("seed", header.meta.get("seed")))
    recorded = (test or {}).get("replay")
    if isinstance(recorded, str) and recorded.strip():
        return recorded, "test.json (as the pytest plugin ran it)"
    argv = (test or {}).get("argv")
    args = replay_args(argv)
    if args is not None and len(args) >= 1 and args[0] == "run" and isinstance(argv, list) \
            and Path(argv[0]).name in ("leasecheck", "__main__.py"):
        args = args[1:]
        if seed is not None and not any(a == "--seed" or a.startswith("--seed=") for a in args):
            args = args + ["--seed", str(seed)]
        return shlex.join(["leasecheck", "run", *args]), "test.json (the command line of the run)"
    options = (test or {}).get("options")
    if isinstance(options, dict):
        args = []
        for f in flags:
            value = seed if f.option == "seed" else _option(options, f.option, f.default)
            if f.option == "nemesis" and isinstance(value, list):
                value = tuple(value)
            if f.repeated and isinstance(value, list | tuple):
                args += [a for item in value for a in (f.flag, str(item))]
            elif value is not None and (value != f.default or f.option in ("target", "seed")):
                args += [f.flag, _flag_value(f.option, value)]
        return shlex.join(["leasecheck", "run", *args]), "test.json (its options)"
    target = results.get("target", header.meta.get("target"))
    if isinstance(target, str) and seed is not None and "generator" not in header.meta:
        args = ["--target", target]
        nemesis = results.get("nemesis", header.meta.get("nemesis"))
        if isinstance(nemesis, list):
            args += ["--nemesis", _flag_value("nemesis", nemesis)]
        if isinstance(header.meta.get("concurrency"), int):
            args += ["--concurrency", str(header.meta["concurrency"])]
        args += ["--ttl", _flag_value("ttl_ms", header.ttl_ms), "--seed", str(seed)]
        return shlex.join(["leasecheck", "run", *args]), "the history's header (no test.json)"
    return None, "no test.json, and the history's header names no leasecheck run to repeat"


def _flat(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list | tuple):
        out.append((prefix, ", ".join(str(v) for v in value) or "none"))
    else:
        out.append((prefix, "-" if value is None else str(value)))


def settings(inputs: RunInputs, header: Header) -> list[tuple[str, str]]:
    """The settings table: test.json's options (the main ones first), then the history header's."""
    rows: list[tuple[str, str]] = []
    options = (inputs.test or {}).get("options")
    if isinstance(options, dict):
        first = {k: options[k] for k in _FIRST if k in options}
        rest = {k: v for k, v in options.items() if k not in first}
        _flat("", first, rows)
        if "seed" not in first and inputs.test is not None and "seed" in inputs.test:
            rows.append(("seed", str(inputs.test["seed"])))
        _flat("", rest, rows)
    else:
        meta = header.meta
        for key in ("target", "nemesis", "seed", "concurrency", "store"):
            if key in meta:
                _flat(key, meta[key], rows)
    shown = {k for k, _ in rows}
    for key, value in header.to_json().items():
        if key not in shown and key not in ("format", "version"):
            _flat(key, value, rows)
    for key in ("run_dir", "interrupted"):
        if key in inputs.results:
            rows.append((key, "-" if inputs.results[key] is None else str(inputs.results[key])))
    rows.append(("history", str(inputs.history)))
    return rows


__all__ = ["KIND_MEANING", "REPLAY_ENV", "ReplayFlag", "RunInputs", "history_of", "load", "recorded_replay", "replay_command",
           "settings", "sorted_anomalies"]
