"""``leasecheck check``, ``targets``, ``nemeses`` and ``clusters``: histories checked, and the catalogues of backends, faults and clusters.

Nothing here runs a backend. ``check`` is what a CI gate calls many times over
small histories, so this module imports at load time only what ``check``
needs (the checker, the history reader), never rich, networkx or a database
client (tests/local/test_startup.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
import msgspec

from leasecheck.checker import DEFAULT_BUDGET, check_source
from leasecheck.cli.output import one_line, write_junit
from leasecheck.cli.run_folders import recover_history
from leasecheck.exits import Exit, worst
from leasecheck.histories import HistoryError
from leasecheck.run.flags import Finite, output_file
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.rundir.storedir import failed_start

if TYPE_CHECKING:
    from leasecheck.checker import Verdict
    from leasecheck.verdict.outcomes import Row


def history_path(path: str) -> Path:
    """A history file, or a store directory holding ``history.jsonl``."""
    p = Path(path)
    if p.is_dir():
        inner = RunFolder(p).history
        if not inner.is_file():
            raise HistoryError(path, None, "is a directory with no history.jsonl (not a store directory)")
        return inner
    return p


def _inside_a_run(p: Path) -> bool:
    """A directory with no history of its own inside a run folder (server data, worker clocks)."""
    return p.is_dir() and not RunFolder(p).history.exists() and RunFolder(p.parent).history.is_file()


def _check_row(path: str, verdict: Verdict | None, seconds: float, error: str | None = None) -> Row:
    """The JUnit row of one checked history: named by its path, classed by the target its header names."""
    from leasecheck.verdict.outcomes import Row

    meta = verdict.header.meta if verdict is not None and verdict.header is not None else {}
    target = str(meta.get("target") or "check")
    nemesis = tuple(str(n) for n in meta["nemesis"]) if isinstance(meta.get("nemesis"), list) else ()
    seed = meta.get("seed") if isinstance(meta.get("seed"), int) else None
    if verdict is None:
        return Row(target, nemesis, seed, "error", reason=error, seconds=seconds, name=path, error_code=Exit.BAD_INPUT)
    row = Row.from_verdict(verdict.to_json(), target=target, nemesis=nemesis, seed=seed, name=path)
    row.seconds = seconds
    return row


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as one JSON object (one per line for several paths).")
@click.option(
    "--budget", type=Finite(min=0, min_open=True), default=DEFAULT_BUDGET, show_default=True,
    help="Seconds the linearizability search may spend per history before the verdict is 'unknown'.",
)
@click.option("--explain", is_flag=True, help="Render the chain of ops that proves each anomaly.")
@click.option(
    "--engine", type=click.Choice(["auto", "search"]), default="auto", show_default=True,
    help="'auto' decides from the epoch order and searches only where it must; 'search' always runs the WGL search.",
)
@click.option("--coverage", "coverage_counts", is_flag=True, help="Also print how often the history reached each situation (docs/coverage.md).")
@click.option("--junit", "junit_file", default=None, metavar="FILE", callback=output_file,
              help="Also write JUnit XML to FILE: one test case per history (anomalies a failure, unknown or bad input an error).")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Processes that check a big history's parts side by side (default: every core; 1: this process alone). The verdict never depends on it.")
def check(paths: tuple[str, ...], as_json: bool, budget: float, explain: bool, engine: str, coverage_counts: bool,
          junit_file: str | None, jobs: int | None) -> None:
    """Check histories (files, or store directories holding history.jsonl).

    A run folder whose harness was killed is first completed from its worker
    logs (the events the harness had not merged into history.jsonl yet).

    Prints the verdict, then the coverage: how many of the situations that
    apply (the workload's, and those of the faults the header's "nemesis"
    names) the history reached, and which never happened (--coverage: every
    count; with --json, the "coverage" key). Coverage never changes the exit
    code: 0 valid, 1 anomalies found, 2 unknown (search budget ran out, or the
    history is cut: its last line cut, or its promised history-end event
    missing; named by file and line), 3 bad input. A cut history is never
    valid. A run directory whose run failed before it recorded anything
    (results.json says "status": "error") is named on stderr and skipped;
    given alone, it is exit 3.
    """
    from leasecheck.verdict.attribution import fault_victims
    from leasecheck.verdict.run_verdict import fault_windows  # the catalogue: only when checking
    from leasecheck.verdict.situations import applicable, header_faults

    if not as_json:
        from leasecheck.report.terminal import console_for, print_coverage, print_verdict

        out = console_for()
    codes: list[int] = []
    junit_rows: list[Row] = []  # one per path, for --junit
    for path in paths:
        failed = failed_start(Path(path)) if Path(path).is_dir() else None
        if failed is not None:  # a run that died before recording: said, and skipped when others were checked
            click.echo(f"{path}: this run failed before it recorded a history, nothing to check: {one_line(failed)}", err=True)
            if junit_file:
                junit_rows.append(_check_row(path, None, 0.0, f"the run failed before it recorded a history: {one_line(failed)}"))
            continue
        if _inside_a_run(Path(path)):  # store/*/*/ also matches store/latest/<server data>/: not a history of its own
            click.echo(f"{path}: a folder inside the run folder {Path(path).parent}, not a run: skipped", err=True)
            continue
        if Path(path).is_dir():
            recover_history(Path(path))
        began = time.perf_counter()
        try:
            history = history_path(path)
            verdict = check_source(history, budget=budget, engine=engine, windows=fault_windows, faults=fault_victims,  # type: ignore[arg-type]
                                   jobs=jobs)
        except HistoryError as e:
            click.echo(str(e), err=True)
            codes.append(Exit.BAD_INPUT)
            if junit_file:
                junit_rows.append(_check_row(path, None, time.perf_counter() - began, f"bad input: {one_line(str(e))}"))
            continue
        if junit_file:
            junit_rows.append(_check_row(path, verdict, time.perf_counter() - began))
        for w in verdict.warnings:  # plain lines: a warning names a path, never wrap it
            click.echo(f"warning: {w}", err=True)
        assert verdict.header is not None and verdict.coverage is not None  # read from a file, with windows
        header, reached = verdict.header, verdict.coverage
        wanted = applicable(header_faults(header), resource_read=header.meta.get("resource_read", True) is not False,
                            queue=header.lease_expiry == "queue")
        if as_json:
            obj = verdict.to_json()
            if len(paths) > 1:
                obj = {"history": path, **obj}
            obj["coverage"] = {"counts": reached.to_json(), "missing": reached.missing(wanted)}
            sys.stdout.buffer.write(msgspec.json.encode(obj) + b"\n")
            sys.stdout.flush()
        else:
            print_verdict(out, path, verdict, explain)
            print_coverage(out, reached, wanted, counts=coverage_counts)
        codes.append(verdict.exit_code)
    if junit_file:
        write_junit(junit_file, "leasecheck check", junit_rows)
    sys.exit(worst(codes) if codes else Exit.BAD_INPUT)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per backend, one per line.")
def targets(as_json: bool) -> None:
    """List the registered lease backends (reference, broken variants, third-party plug-ins), and what each lacks.

    Imports no client library: a backend whose library is missing is listed as
    not installed, with the command that installs it.
    """
    from leasecheck.targets.registry import TargetNotFound, install_command, missing, registered

    rows: list[dict[str, object]] = []
    for name, spec, cls in registered():
        if isinstance(cls, TargetNotFound):
            rows.append({"name": name, "class": spec, "error": str(cls)})
            continue
        lacking = missing(cls)
        rows.append({
            "name": name, "class": spec, "store": cls.store, "fenced": cls.fenced, "summary": cls.summary(),
            "bug": cls.bug, "expected": list(cls.expected), "exposed_by": list(cls.exposed_by),
            "exposed_by_workload": list(cls.exposed_by_workload),
            "requires": list(cls.requires), "extra": cls.extra, "installed": not lacking,
            **({"missing": list(lacking), "install": install_command(cls)} if lacking else {}),
        })
    if as_json:
        for row in rows:
            sys.stdout.buffer.write(msgspec.json.encode(row) + b"\n")
    else:
        from leasecheck.report.terminal import console_for, print_targets

        print_targets(console_for(), rows)


@click.command()
@click.option("--markdown", is_flag=True, help="Print a Markdown table with what each fault needs (docs/faults.md's).")
def nemeses(markdown: bool) -> None:
    """List the faults `leasecheck run --nemesis` knows, one line each (the fault catalogue)."""
    from leasecheck.nemesis.catalogue import CATALOGUE, Need

    if markdown:
        click.echo("| fault | what it does | needs |")
        click.echo("|---|---|---|")
        for kind in CATALOGUE:
            needs = ", ".join(need.value for need in Need if need in kind.needs) or "-"
            click.echo(f"| `{kind.name}` | {kind.description} | {needs} |")
        return
    width = max(len(kind.name) for kind in CATALOGUE)
    for kind in CATALOGUE:
        click.echo(f"{kind.name:<{width}}  {kind.description}")


@click.command()
@click.option("--markdown", is_flag=True, help="Print a Markdown table (docs/clusters.md's).")
def clusters(markdown: bool) -> None:
    """List the replicated stores `leasecheck run --cluster` starts, one line each."""
    from leasecheck.run.clusters import CLUSTER_KINDS

    if markdown:
        click.echo("| cluster | store | what it is | clock-member |")
        click.echo("|---|---|---|---|")
        for kind in CLUSTER_KINDS:
            click.echo(f"| `{kind.name}` | {kind.store} | {kind.description} | {'yes' if kind.skewable else 'no'} |")
        return
    width = max(len(kind.name) for kind in CLUSTER_KINDS)
    for kind in CLUSTER_KINDS:
        click.echo(f"{kind.name:<{width}}  {kind.store:<9}  {kind.description}")
