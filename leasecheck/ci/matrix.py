"""``leasecheck matrix``: the cells of a spec, run and judged.

The spec (its cells, each with its options and expected verdict) is
:mod:`.spec`'s; this module holds the rest:

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
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
from rich.text import Text

from leasecheck.ci.spec import Cell, SpecError, load_spec
from leasecheck.ci.table import markdown as markdown_table
from leasecheck.ci.table import print_table
from leasecheck.exits import Exit, interrupted
from leasecheck.frame.interrupts import Interrupts
from leasecheck.report import junit
from leasecheck.report.terminal import console_for
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.outcomes import Row, exit_code, read_run, write_expected

#: seconds a cell gets to heal, record and check after the matrix passed it SIGINT / SIGTERM, before SIGKILL
STOP_GRACE_S = 120.0


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
            if mtime < since - 1 or RunFolder(d).expected.exists():
                continue
            test = json.loads(RunFolder(d).test.read_text(encoding="utf-8"))
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
