"""``leasecheck matrix``: the product targets × nemesis sets × seeds of a TOML spec, run and judged.

A nightly chaos run is many ordinary runs, each with an expected verdict: a
reference backend must stay valid under its faults, and a deliberately broken
variant must be caught (a broken variant that comes out valid is a failure of
the test suite, not a pass). This module holds the three parts of that:

* the spec (:func:`load_spec`): ``[defaults]`` and ``[[entry]]`` tables read
  with tomllib into :class:`Cell` s, every cell's options checked exactly as
  ``leasecheck run`` would check them (its click options, then the runner's
  own validation) before anything starts, so a typo in the last entry never
  costs an hour of runs;
* sharding (:func:`shard`): the cells in one canonical order, shard I of N
  takes every N-th cell from the I-th, so N machines (a CI system's own job
  matrix) cover the product exactly once and a shard's load mixes targets;
* running (:func:`run_cells`): each cell is ``python -m leasecheck run ...
  --json`` in a subprocess of its own session, ``--jobs`` at a time. A cell
  that crashes is that cell's error row, never a crashed matrix; SIGINT and
  SIGTERM are passed to the running cells (which heal, record and check what
  they have) and no new cell starts. The cell's expectation is left in its run
  folder as expected.json, so ``leasecheck summary`` can judge it later from
  the folder alone.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from leasecheck.run.flags import FLAGS, RunFlag, parse, run_options
from leasecheck.servers.base import python_module
from leasecheck.verdict.exits import Exit, interrupted
from leasecheck.verdict.outcomes import (
    Expectation,
    Row,
    nemesis_label,
    read_run,
    write_expected,
)

#: keys of an entry that shape the product rather than one run's options
ENTRY_KEYS = ("name", "target", "targets", "nemesis", "seeds", "expect", "kinds")
#: ``leasecheck run`` options the matrix sets itself, and why they cannot be in a spec
MATRIX_OWNED = {
    "seed": "each cell's seed comes from seeds = [...]",
    "store": "cells run in leasecheck matrix --store",
    "json": "the matrix reads each run's JSON itself",
    "coverage": "it only changes the run's terminal output",
}
#: seconds a cell gets to heal, record and check after the matrix passed it SIGINT / SIGTERM, before SIGKILL
STOP_GRACE_S = 120.0


class SpecError(ValueError):
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


# ---------------------------------------------------------------------- spec


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
    if len(set(value)) != len(value):
        raise SpecError(f"{where}: seeds = {value!r}: a seed is listed twice")
    return tuple(value)


def _nemesis_sets(value: object, where: str) -> list[tuple[str, ...]]:
    """``["pause", "pause,kill", ["kill", "partition"], "none"]``: each item one set of faults run together."""
    hint = 'give a list of nemesis sets, e.g. nemesis = ["pause", "pause,kill", "none"]'
    if not isinstance(value, list) or not value:
        raise SpecError(f"{where}: nemesis = {value!r}: {hint}")
    sets: list[tuple[str, ...]] = []
    for item in value:
        if isinstance(item, str):
            faults = [] if item.strip().lower() == "none" else [f.strip() for f in item.split(",") if f.strip()]
            if not faults and item.strip().lower() != "none":
                raise SpecError(f"{where}: nemesis set {item!r} names no fault (write \"none\" for a run without faults)")
        elif isinstance(item, list) and all(isinstance(f, str) and f.strip() for f in item):
            faults = [f.strip() for f in item]
        else:
            raise SpecError(f"{where}: nemesis set {item!r}: {hint}")
        one = tuple(dict.fromkeys(faults))
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
    if not isinstance(value, list) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise SpecError(f"{where}: targets = {value!r}: give a non-empty list of backend names")
    if len(set(value)) != len(value):
        raise SpecError(f"{where}: targets = {value!r}: a target is listed twice")
    return [t.strip() for t in value]


def _check_run(target: str, nemesis: tuple[str, ...], options: dict[str, Any], where: str) -> None:
    """Refuse what ``leasecheck run`` would refuse for this cell: its click options, then the runner's checks."""
    from leasecheck.run.runner import BadOptions, Run
    from leasecheck.targets.registry import TargetNotFound

    probe = Cell("", target, nemesis, 0, tuple(sorted(options.items())), Expectation())
    try:
        opts = run_options(parse([*probe.run_args(), "--seed", "0"]))
    except click.ClickException as e:
        raise SpecError(f"{where}: {_one_line(e.format_message())}") from None
    try:
        Run(opts)  # validates the options, loads the target, checks the faults against its store; starts nothing
    except (BadOptions, TargetNotFound) as e:
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
        options = tuple(sorted({**default_options, **_options(entry, where, index)}.items()))
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


# ------------------------------------------------------------------- shards


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (1-based) -> (I, N); raises ValueError with a one-line reason."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise ValueError(f"{text!r}: give I/N, e.g. 2/4 (shard 2 of 4)")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= i <= n:
        raise ValueError(f"{text!r}: I must be between 1 and N, and N at least 1")
    return i, n


def shard(cells: list[Cell], i: int, n: int) -> list[Cell]:
    """Shard ``i`` of ``n``: every n-th cell of the canonical order from the i-th. The shards partition the cells."""
    ordered = sorted(cells, key=lambda c: c.sort_key)
    return ordered[i - 1::n]


# ------------------------------------------------------------------ running


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


@dataclass
class _Done:
    index: int
    cell: Cell
    returncode: int
    stdout: str
    stderr: str
    started: float
    seconds: float


def _last_line(stderr: str) -> str:
    """The line a failing ``leasecheck run`` ends with (its one-line error), else its last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if ln.startswith("leasecheck")]
    return (said or lines or [""])[-1]


def _find_run_dir(store: Path, cell: Cell, since: float) -> Path | None:
    """The folder of a cell's run that printed no JSON (it failed): the newest of its target with its seed and faults."""
    from leasecheck.rundir.storedir import folder_name

    best: tuple[float, Path] | None = None
    try:
        candidates = list((store / folder_name(cell.target)).iterdir())
    except OSError:
        return None
    for d in candidates:
        try:
            mtime = d.stat().st_mtime
            if mtime < since - 1 or (d / "expected.json").exists():
                continue
            test = json.loads((d / "test.json").read_text(encoding="utf-8"))
            opts = test.get("options", {})
        except (OSError, ValueError, AttributeError):
            continue
        ours = test.get("seed") == cell.seed and set(opts.get("nemesis") or ()) == set(cell.nemesis)
        if ours and (best is None or mtime > best[0]):
            best = (mtime, d)
    return best[1] if best else None


def _row_of(done: _Done, store: Path, spec_path: Path) -> Row:
    """The finished cell's row: from its run folder (where expected.json is left), or an error row saying why."""
    cell = done.cell
    run_dir: Path | None = None
    try:
        out = json.loads(done.stdout)
        if isinstance(out, dict) and isinstance(out.get("run_dir"), str):
            run_dir = Path(out["run_dir"])
    except ValueError:
        pass
    if run_dir is None:
        run_dir = _find_run_dir(store, cell, done.started)
    said = _last_line(done.stderr)
    code = Exit.BAD_INPUT if done.returncode == Exit.BAD_INPUT else Exit.ENVIRONMENT
    if run_dir is not None and run_dir.is_dir():
        try:
            write_expected(run_dir, cell.expected, spec=str(spec_path), entry=cell.entry, cell=cell.label)
        except OSError:
            pass
        row = read_run(run_dir, cell.expected)
        if row.verdict == "error":
            row.error_code = code
            if said and done.returncode != Exit.VALID:
                row.reason = said
            if row.seconds is None:
                row.seconds = round(done.seconds, 3)
        return row
    how = f"killed by {signal.Signals(-done.returncode).name}" if done.returncode < 0 else f"exit {done.returncode}"
    return Row(cell.target, cell.nemesis, cell.seed, "error", cell.expected, reason=f"the run ended ({how}) with no verdict: {said}",
               seconds=round(done.seconds, 3), command=cell.command(store), error_code=code)


@dataclass
class MatrixResult:
    rows: list[Row]
    #: the signal that stopped the matrix (SIGINT, SIGTERM), or None
    interrupted: signal.Signals | None


def run_cells(cells: list[Cell], store: Path, jobs: int, spec_path: Path,
              started: Callable[[int, Cell], None] = lambda i, c: None,
              finished: Callable[[int, Row], None] = lambda i, r: None) -> MatrixResult:
    """Run ``cells`` as subprocesses, ``jobs`` at a time; the rows come back in the cells' order.

    ``started(i, cell)`` and ``finished(i, row)`` report progress (``i`` is
    the cell's index in ``cells``). On SIGINT or SIGTERM no new cell starts,
    the running cells get the same signal (each heals, records and checks what
    it has), and after :data:`STOP_GRACE_S` a cell still running is killed
    with its process group. Cells never started are ``skipped`` rows.
    """
    from leasecheck.run.interrupts import Interrupts

    store = store.expanduser().absolute()
    rows: dict[int, Row] = {}
    running: dict[int, subprocess.Popen[str]] = {}
    done: queue.Queue[_Done] = queue.Queue()
    waiting = list(enumerate(cells))
    stop_sent: float | None = None

    def wait(index: int, cell: Cell, proc: subprocess.Popen[str], t0: float, wall: float) -> None:
        out, err = proc.communicate()
        done.put(_Done(index, cell, proc.returncode, out, err, wall, time.monotonic() - t0))

    with Interrupts() as interrupts:
        while waiting or running:
            while waiting and len(running) < jobs and not interrupts.event.is_set():
                index, cell = waiting.pop(0)
                started(index, cell)
                t0, wall = time.monotonic(), time.time()
                proc = subprocess.Popen(cell.argv(store), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)
                running[index] = proc
                threading.Thread(target=wait, args=(index, cell, proc, t0, wall), daemon=True).start()
            try:
                d = done.get(timeout=0.2)
            except queue.Empty:
                d = None
            if d is not None:
                running.pop(d.index, None)
                rows[d.index] = _row_of(d, store, spec_path)
                finished(d.index, rows[d.index])
            if interrupts.event.is_set() and interrupts.signal is not None:
                if stop_sent is None:
                    stop_sent = time.monotonic()
                    for proc in running.values():
                        _signal(proc, interrupts.signal)
                elif time.monotonic() - stop_sent > STOP_GRACE_S:
                    for proc in running.values():
                        _kill_group(proc)
                waiting_now, waiting = waiting, []
                for index, cell in waiting_now:
                    rows[index] = Row(cell.target, cell.nemesis, cell.seed, "skipped", cell.expected,
                                      reason=f"the matrix was interrupted by {interrupts.signal.name}",
                                      command=cell.command(store))
    return MatrixResult([rows[i] for i in range(len(cells))], interrupts.signal)


def _signal(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a cell and every process it started (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def interrupted_exit(rows: list[Row], sig: signal.Signals) -> int:
    """An interrupted matrix never exits 0: 1 if a finished cell proved a mismatch, else 128 + the signal."""
    return Exit.INVALID if any(r.judge().code == Exit.INVALID for r in rows) else interrupted(sig)



# ------------------------------------------------------------------ command


def command(spec_path: str, jobs: int, shard_of: tuple[int, int] | None, store: str, junit_file: str | None,
            as_json: bool, markdown: bool, dry_run: bool) -> int:
    """``leasecheck matrix``: check the whole spec, run this shard's cells, print the table; the exit code.

    0 iff every cell matched its expectation; else 4 if a cell's environment
    failed, 1 if a cell mismatched, 2 if the only mismatches are unknowns; an
    interrupted matrix exits 1 if a finished cell mismatched, else 128 + the signal.
    """
    from rich.text import Text

    from leasecheck.ci.summary import markdown as markdown_table
    from leasecheck.ci.summary import print_table
    from leasecheck.report import junit
    from leasecheck.report.terminal import console_for
    from leasecheck.verdict.outcomes import exit_code

    try:
        spec = load_spec(Path(spec_path))
    except SpecError as e:
        click.echo(f"leasecheck matrix: {e}", err=True)
        return Exit.BAD_INPUT
    i, n = shard_of or (1, 1)
    cells = shard(spec.cells, i, n)
    part = f", shard {i}/{n}" if shard_of else ""
    store_path = Path(store).expanduser().absolute()
    console = console_for(stderr=as_json or markdown)
    if dry_run:
        if as_json:
            for cell in cells:
                sys.stdout.write(json.dumps(cell.to_json(store_path)) + "\n")
        else:
            console.print(f"{spec.name}{part}: {len(cells)} of {len(spec.cells)} cells", highlight=False, markup=False)
            for k, cell in enumerate(cells, 1):
                console.print(f"[{k}/{len(cells)}] {cell.label}: expect {cell.expected.describe()}\n  {cell.command(store_path)}",
                              highlight=False, markup=False)
        return Exit.VALID
    try:
        store_path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        click.echo(f"leasecheck matrix: --store {store}: cannot create it ({e.strerror or e})", err=True)
        return Exit.ENVIRONMENT
    console.print(f"leasecheck matrix: {spec.name}{part}: {len(cells)} of {len(spec.cells)} cells, {jobs} at a time,"
                  f" store {store_path}", highlight=False, markup=False)
    width = len(str(len(cells)))

    def started(k: int, cell: Cell) -> None:
        console.print(f"[{k + 1:>{width}}/{len(cells)}] start {cell.label}", highlight=False, markup=False)

    def finished(k: int, row: Row) -> None:
        judged = row.judge()
        took = f" ({row.seconds:.1f} s)" if row.seconds is not None else ""
        where = f" {row.run_dir}" if row.run_dir is not None else ""
        console.print(Text.assemble(
            f"[{k + 1:>{width}}/{len(cells)}] ",
            ("ok", "green") if judged.match else ("NOT AS EXPECTED", "bold red"),
            f" {row.label}: {judged.message}{took}{where}",
        ), highlight=False)
        if as_json:
            sys.stdout.write(json.dumps(row.to_json()) + "\n")
            sys.stdout.flush()

    result = run_cells(cells, store_path, jobs, spec.path, started, finished)
    rows = result.rows
    title = f"matrix {spec.name}{part}"
    if markdown:
        sys.stdout.write(markdown_table(rows, title))
    else:
        console.print()
        print_table(console, rows, title)
    if junit_file:
        props = {"spec": str(spec.path), "shard": f"{i}/{n}", "store": str(store_path), "jobs": str(jobs),
                 "cells": str(len(cells)), "cells_in_spec": str(len(spec.cells))}
        if result.interrupted is not None:
            props["interrupted"] = result.interrupted.name
        try:
            junit.write(junit_file, [junit.Suite(f"leasecheck matrix {spec.name}{part}", rows, props)])
        except OSError as e:
            click.echo(f"leasecheck matrix: --junit {junit_file}: cannot write it: {e.strerror or e}", err=True)
            return Exit.BAD_INPUT
    if result.interrupted is not None:
        code = interrupted_exit(rows, result.interrupted)
        console.print(f"interrupted by {result.interrupted.name}: exit {code}", highlight=False, markup=False)
        return code
    return exit_code(rows)
