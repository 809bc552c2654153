"""A matrix spec: the TOML file ``leasecheck matrix`` runs and ``leasecheck summary --spec`` judges against.

A nightly chaos run is many ordinary runs, each with an expected verdict: a
reference backend must stay valid under its faults, and a deliberately broken
variant must be caught (a broken variant that comes out valid is a failure of
the test suite, not a pass). The spec says which: ``[defaults]`` and
``[[entry]]`` tables read with tomllib into :class:`Cell` s, every cell's
options checked exactly as ``leasecheck run`` would check them (its options,
:mod:`leasecheck.run.flags`, then the runner's own validation) before anything
starts, so a typo in the last entry never costs an hour of runs.

Both commands read it, and neither needs the other: ``matrix`` (:mod:`.matrix`)
runs the cells, ``summary`` (:mod:`.summary`) matches run folders to them
(:func:`judge_against`).
"""

from __future__ import annotations

import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from leasecheck.errors import BadInput
from leasecheck.lists import BadList, distinct
from leasecheck.run.flags import FLAGS, RunFlag, parse, run_options
from leasecheck.servers.base import python_module
from leasecheck.verdict.outcomes import Expectation, Row, nemesis_label

#: keys of an entry that shape the product rather than one run's options
ENTRY_KEYS = ("name", "target", "targets", "nemesis", "seeds", "expect", "kinds")
#: ``leasecheck run`` options the matrix sets itself, and why they cannot be in a spec
MATRIX_OWNED = {
    "seed": "each cell's seed comes from seeds = [...]",
    "store": "cells run in leasecheck matrix --store",
    "json": "the matrix reads each run's JSON itself",
    "coverage": "it only changes the run's terminal output",
}


class SpecError(BadInput):
    """A spec that cannot make a matrix; ``str()`` is one line naming the file and the entry."""


@dataclass(frozen=True)
class Cell:
    """One run of the matrix: a target, a set of faults, a seed, the entry's options and expectation."""

    entry: str
    target: str
    nemesis: tuple[str, ...]
    seed: int
    #: ``leasecheck run`` options as (long name without dashes, value), sorted by name
    options: tuple[tuple[str, Any], ...]
    expected: Expectation

    @property
    def key(self) -> tuple[str, frozenset[str], int | None]:
        """Identity of the cell (and of its runs, :attr:`Row.cell_key`): target, set of faults, seed."""
        return self.target, frozenset(self.nemesis), self.seed

    @property
    def sort_key(self) -> tuple[str, str, int]:
        return self.target, ",".join(sorted(self.nemesis)), self.seed

    @property
    def label(self) -> str:
        return f"{self.target} / {nemesis_label(self.nemesis)} / seed {self.seed}"

    def run_args(self) -> list[str]:
        """The arguments of ``leasecheck run`` for this cell, without seed and store."""
        args = ["--target", self.target, "--nemesis", nemesis_label(self.nemesis)]
        for name, value in self.options:
            if isinstance(value, bool):
                args += [f"--{name}"] if value else []
            else:
                args += [f"--{name}", str(value)]
        return args

    def argv(self, store: Path) -> list[str]:
        """The subprocess that runs the cell: this interpreter's leasecheck, JSON on stdout."""
        return [*python_module("leasecheck"), "run", *self.run_args(), "--seed", str(self.seed),
                "--store", str(store), "--json"]

    def command(self, store: Path) -> str:
        """The command a person types to run this cell alone."""
        return shlex.join(["leasecheck", "run", *self.run_args(), "--seed", str(self.seed), "--store", str(store)])

    def to_json(self, store: Path) -> dict[str, Any]:
        return {"entry": self.entry, "target": self.target, "nemesis": list(self.nemesis), "seed": self.seed,
                "options": dict(self.options), "expected": self.expected.to_json(), "command": self.command(store)}


@dataclass
class Spec:
    path: Path
    name: str
    #: every cell, in canonical order (:attr:`Cell.sort_key`)
    cells: list[Cell]



def _run_options() -> dict[str, RunFlag]:
    """``leasecheck run``'s options by long name, with ``-`` or ``_`` (TOML users write either)."""
    index: dict[str, RunFlag] = {}
    for flag in FLAGS:
        index[flag.name] = flag
        index[flag.name.replace("-", "_")] = flag
    return index


def _options(table: dict[str, Any], where: str, index: dict[str, RunFlag]) -> dict[str, Any]:
    """The run options of a [defaults] or [[entry]] table (its other keys are the caller's)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in ENTRY_KEYS:
            continue
        name = key.replace("_", "-")
        if name in MATRIX_OWNED:
            raise SpecError(f"{where}: {key!r} cannot be set in a spec: {MATRIX_OWNED[name]}")
        flag = index.get(key)
        if flag is None:
            known = sorted({f.name for f in index.values()} - {"target", "nemesis", *MATRIX_OWNED})
            raise SpecError(f"{where}: unknown option {key!r} (leasecheck run's options: {', '.join(known)})")
        name = flag.name
        if flag.option.is_flag:
            if not isinstance(value, bool):
                raise SpecError(f"{where}: {key} = {value!r}: a flag takes true or false")
        elif isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SpecError(f"{where}: {key} = {value!r}: give a number or a string, as --{name} takes")
        out[name] = value
    return out


def _seeds(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(s, int) and not isinstance(s, bool) for s in value):
        raise SpecError(f"{where}: seeds = {value!r}: give a non-empty list of integers, e.g. seeds = [1, 2, 3]")
    return _distinct(value, "seeds =", value, where)


def _distinct(items: list[Any], option: str, written: object, where: str) -> tuple[Any, ...]:
    """A spec's list (``written`` so), none of its items empty or named twice (:func:`leasecheck.lists.distinct`)."""
    try:
        return distinct(items, option, repr(written))
    except BadList as e:
        raise SpecError(f"{where}: {e}") from None


def _nemesis_sets(value: object, where: str) -> list[tuple[str, ...]]:
    """``["pause", "pause,kill", ["kill", "partition"], "none"]``: each item one set of faults run together."""
    hint = 'give a list of nemesis sets, e.g. nemesis = ["pause", "pause,kill", "none"]'
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where}: nemesis = {value!r}: {hint}")
    sets: list[tuple[str, ...]] = []
    for item in value:
        if isinstance(item, str) and not item.strip():
            raise SpecError(f"{where}: nemesis set {item!r} names no fault (write \"none\" for a run without faults)")
        if isinstance(item, str):
            one = () if item.strip().lower() == "none" else _distinct([f.strip() for f in item.split(",")], "nemesis set", item, where)
        elif isinstance(item, list) and item and all(isinstance(f, str) for f in item):
            one = _distinct([f.strip() for f in item], "nemesis set", item, where)
        else:
            raise SpecError(f"{where}: nemesis set {item!r}: {hint}")
        if frozenset(one) in {frozenset(s) for s in sets}:
            raise SpecError(f"{where}: nemesis set {item!r} is listed twice")
        sets.append(one)
    return sets


def _targets(entry: dict[str, Any], where: str) -> list[str]:
    if ("target" in entry) == ("targets" in entry):
        raise SpecError(f"{where}: give target = \"NAME\" or targets = [\"NAME\", ...] (exactly one of them)")
    if "target" in entry:
        value = entry["target"]
        if not isinstance(value, str) or not value.strip():
            raise SpecError(f"{where}: target = {value!r}: give a backend name (see leasecheck targets)")
        return [value.strip()]
    value = entry["targets"]
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise SpecError(f"{where}: targets = {value!r}: give a non-empty list of backend names")
    return list(_distinct([t.strip() for t in value], "targets =", value, where))


def _check_run(target: str, nemesis: tuple[str, ...], options: dict[str, Any], where: str) -> None:
    """Refuse what ``leasecheck run`` would refuse for this cell: its click options, then the runner's checks."""
    from leasecheck.run.runner import Run

    probe = Cell("", target, nemesis, 0, tuple(sorted(options.items())), Expectation())
    try:
        opts = run_options(parse([*probe.run_args(), "--seed", "0"]))
    except click.ClickException as e:
        raise SpecError(f"{where}: {_one_line(e.format_message())}") from None
    try:
        Run(opts)  # validates the options, loads the target, checks the faults against its store; starts nothing
    except BadInput as e:
        raise SpecError(f"{where}: {target} under {nemesis_label(nemesis)}: {_one_line(e)}") from None


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def load_spec(path: Path, check_runs: bool = True) -> Spec:
    """Read and check a whole spec; raises :class:`SpecError` (one line: file, entry, what) at the first problem.

    ``check_runs=False`` skips what only the machine that runs the cells needs
    (the targets' modules and drivers, the faults against each store): ``summary
    --spec`` reads expectations on a machine that may have none of them.
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SpecError(f"{path}: cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {_one_line(e)}") from None
    extra = sorted(set(data) - {"name", "defaults", "entry"})
    if extra:
        raise SpecError(f"{path}: unknown key {extra[0]!r} (a spec holds name, a [defaults] table and [[entry]] tables)")
    name = data.get("name", path.stem)
    if not isinstance(name, str):
        raise SpecError(f"{path}: name = {name!r}: give a string")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError(f"{path}: defaults must be a table ([defaults])")
    entries = data.get("entry")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise SpecError(f"{path}: no entries: add [[entry]] tables (each with target, nemesis, and seeds here or in [defaults])")
    index = _run_options()
    where = f"{path}: [defaults]"
    misplaced = sorted(set(defaults) & {"name", "target", "targets", "expect", "kinds"})
    if misplaced:
        raise SpecError(f"{where}: {misplaced[0]!r} belongs in an [[entry]]")
    default_options = _options(defaults, where, index)
    default_seeds = _seeds(defaults["seeds"], where) if "seeds" in defaults else None
    default_sets = _nemesis_sets(defaults["nemesis"], where) if "nemesis" in defaults else None

    cells: dict[tuple[str, frozenset[str], int | None], tuple[Cell, str]] = {}
    checked: set[tuple[str, tuple[str, ...], tuple[tuple[str, Any], ...]]] = set()
    for i, entry in enumerate(entries, 1):
        label = entry.get("name") or entry.get("target") or ", ".join(map(str, entry.get("targets") or [])) or "?"
        where = f"{path}: entry {i} ({label})"
        if "name" in entry and not isinstance(entry["name"], str):
            raise SpecError(f"{where}: name = {entry['name']!r}: give a string")
        targets = _targets(entry, where)
        if "nemesis" not in entry and default_sets is None:
            raise SpecError(f"{where}: no nemesis: give nemesis = [\"pause\", ...] here or in [defaults]")
        sets = _nemesis_sets(entry["nemesis"], where) if "nemesis" in entry else default_sets or []
        if "seeds" not in entry and default_seeds is None:
            raise SpecError(f"{where}: no seeds: give seeds = [1, 2, ...] here or in [defaults]")
        seeds = _seeds(entry["seeds"], where) if "seeds" in entry else default_seeds or ()
        try:
            expected = Expectation.parse(entry.get("expect", "valid"), entry.get("kinds"), "spec")
        except ValueError as e:
            raise SpecError(f"{where}: {e}") from None
        chosen = {**default_options, **_options(entry, where, index)}
        if expected.verdict == "valid":  # a surprise anomaly ends the cell at once (a cell expecting kinds runs on to find them all)
            chosen.setdefault("fail-fast", True)
            chosen.setdefault("until-covered", True)  # and a green cell ends on evidence that it reached what applies
        options = tuple(sorted(chosen.items()))
        for target in targets:
            for nemesis in sets:
                if check_runs and (target, nemesis, options) not in checked:
                    _check_run(target, nemesis, dict(options), where)
                    checked.add((target, nemesis, options))
                for seed in seeds:
                    cell = Cell(str(label), target, nemesis, seed, options, expected)
                    if cell.key in cells:
                        _, other = cells[cell.key]
                        raise SpecError(f"{where}: {cell.label} is also a cell of {other}: each cell runs once (give other seeds)")
                    cells[cell.key] = (cell, f"entry {i}")
    return Spec(path, name, sorted((c for c, _ in cells.values()), key=lambda c: c.sort_key))



def judge_against(rows: list[Row], cells: list[Cell]) -> list[Row]:
    """``summary --spec``: each run takes its cell's expectation; a cell with no run is a ``missing`` row.

    A run the spec has no cell for is judged as any run without an expectation (valid).
    """
    by_key = {c.key: c for c in cells}
    for row in rows:
        cell = by_key.get(row.cell_key)
        row.expected = cell.expected if cell is not None else Expectation()
    have = {r.cell_key for r in rows}
    missing = [Row(c.target, c.nemesis, c.seed, "missing", c.expected) for c in cells if c.key not in have]
    return sorted(rows + missing, key=lambda r: r.sort_key)

