"""``leasecheck summary``: any set of run folders merged into one table, judged against what was expected.

The nightly matrix runs in shards on several machines; each uploads its
store, and one job downloads them all and asks: what came out, and was it
what we expected? So this module finds run folders wherever they are
(a store, a folder of downloaded stores, single runs), reads each from its
files alone, and renders the same rows (:mod:`.table`) for a terminal (rich),
Markdown (a CI job summary), a self-contained HTML page linking each run's
``report.html``, JSON lines and JUnit. Expectations come from each folder's expected.json
(left by ``leasecheck matrix``) or, with ``--spec``, from the spec itself.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import click

from leasecheck.ci.spec import SpecError, judge_against, load_spec
from leasecheck.ci.table import html_page, markdown, print_table
from leasecheck.exits import Exit
from leasecheck.report import junit
from leasecheck.report.terminal import console_for
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.outcomes import Row, exit_code, read_run

#: the symlink ``leasecheck run`` points at the newest run (or, in a downloaded artifact, a copy of that run)
LATEST = "latest"


def find_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Every run folder (a folder holding results.json) under ``paths``, each once.

    A run reached both through a symlink (``store/latest``) and by its own path
    is listed once, by its own path; a folder is searched once, however many
    links lead to it (no cycles). A run is not searched inside (its server data
    holds no runs). Raises FileNotFoundError naming a path that is not there.
    """
    found: dict[str, Path] = {}
    seen: set[str] = set()
    stack = []
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if not p.is_dir():
            raise NotADirectoryError(f"{p}: not a directory (give a store or run folders)")
        stack.append(p)
    while stack:
        d = stack.pop()
        real = os.path.realpath(d)
        if RunFolder(d).results.is_file():
            if real not in found or (_through_symlink(found[real]) and not _through_symlink(d)):
                found[real] = d  # the same run by its own path rather than through ``latest``
            continue
        if real in seen:
            continue
        seen.add(real)
        try:
            children = sorted(d.iterdir())
        except OSError:
            continue
        stack.extend(c for c in reversed(children) if c.is_dir())
    return list(found.values())


def _through_symlink(p: Path) -> bool:
    return os.path.realpath(p) != os.path.abspath(p)


def _dedupe(rows: list[Row]) -> list[Row]:
    """One row per run: a ``latest`` folder that a CI artifact turned from a symlink into a copy is the same run.

    Two folders whose results.json name the same run folder hold one run; the
    one not reached through ``latest`` stays.
    """
    by_run: dict[str, Row] = {}
    out: list[Row] = []
    for row in sorted(rows, key=lambda r: LATEST in (r.run_dir.parts if r.run_dir else ())):
        recorded = _recorded_run_dir(row)
        if recorded is None:
            out.append(row)
        elif recorded not in by_run:
            by_run[recorded] = row
            out.append(row)
    return out


def _recorded_run_dir(row: Row) -> str | None:
    """The run folder results.json names (where the run was made), with target and seed: the run's identity."""
    if row.run_dir is None:
        return None
    try:
        obj = json.loads(RunFolder(row.run_dir).results.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    where = obj.get("run_dir") if isinstance(obj, dict) else None
    return f"{where}\0{row.target}\0{row.seed}" if isinstance(where, str) else None


def collect(paths: list[Path]) -> list[Row]:
    """The rows of every run under ``paths``, each judged by its own expected.json, in the matrix's canonical order."""
    rows = _dedupe([read_run(d) for d in find_run_dirs(paths)])
    return sorted(rows, key=lambda r: r.sort_key)


def command(paths: tuple[str, ...], markdown_out: bool, html_file: str | None, as_json: bool, junit_file: str | None,
            spec_path: str | None) -> int:
    """``leasecheck summary``: the rows of every run under ``paths``, rendered; the exit code (as ``matrix``'s)."""
    spec = None
    if spec_path is not None:
        try:
            spec = load_spec(Path(spec_path), check_runs=False)
        except SpecError as e:
            click.echo(f"leasecheck summary: {e}", err=True)
            return Exit.BAD_INPUT
    try:
        rows = collect([Path(p) for p in paths])
    except OSError as e:
        click.echo(f"leasecheck summary: {e}", err=True)
        return Exit.BAD_INPUT
    if spec is not None:
        rows = judge_against(rows, spec.cells)
    if not rows:
        click.echo(f"leasecheck summary: no run folders (folders holding {RunFolder.RESULTS}) under {', '.join(paths)}", err=True)
        return Exit.BAD_INPUT
    title = f"summary of {spec.name}" if spec is not None else "summary"
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row.to_json()) + "\n")
    elif markdown_out:
        sys.stdout.write(markdown(rows, title))
    else:
        print_table(console_for(), rows, title)
    try:
        if html_file is not None:
            page = Path(html_file)
            page.write_text(html_page(rows, page, f"leasecheck {title}"), encoding="utf-8")
        if junit_file is not None:
            junit.write(junit_file, [junit.Suite(f"leasecheck {title}", rows,
                                                 {"paths": " ".join(paths), **({"spec": spec_path} if spec_path else {})})])
    except OSError as e:
        click.echo(f"leasecheck summary: cannot write {e.filename or 'an output file'}: {e.strerror or e}", err=True)
        return Exit.BAD_INPUT
    return exit_code(rows)
