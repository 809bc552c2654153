"""The ``leasecheck`` command line.

Exit codes are a contract (docs/contracts/exit-codes.md): 0 valid, 1 anomalies found, 2 unknown,
3 bad input or usage error, 4 the environment failed or leasecheck crashed.
click's own usage errors exit 2, which would read as "unknown", so the group's
``main`` maps them to 3, and every other exception to 4 with one line.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

# Only what every command needs is imported here: `leasecheck check --json` must start
# fast and never load rich, networkx or a database client (tests/test_startup.py). The
# rest is imported by the command that needs it.
from leasecheck.checker import DEFAULT_BUDGET, check_source
from leasecheck.histories import HistoryError
from leasecheck.run.flags import FLAGS, Finite, comma_list, output_file, run_options
from leasecheck.rundir.storedir import failed_start
from leasecheck.verdict.exits import SIGNALLED, Exit, interrupted, worst

if TYPE_CHECKING:
    from leasecheck.checker import Verdict
    from leasecheck.verdict.outcomes import Row


def history_path(path: str) -> Path:
    """A history file, or a store directory holding ``history.jsonl``."""
    p = Path(path)
    if p.is_dir():
        inner = p / "history.jsonl"
        if not inner.is_file():
            raise HistoryError(path, None, "is a directory with no history.jsonl (not a store directory)")
        return inner
    return p


def _inside_a_run(p: Path) -> bool:
    """A directory with no history of its own inside a run folder (server data, worker clocks)."""
    return p.is_dir() and not (p / "history.jsonl").exists() and (p.parent / "history.jsonl").is_file()


def _write_junit(path: str, suite: str, rows: list[Row], properties: dict[str, str] | None = None) -> None:
    """Write JUnit XML (leasecheck.report.junit); a file that cannot be written after all is one line and exit 3."""
    from leasecheck.report import junit

    try:
        junit.write(path, [junit.Suite(suite, rows, properties or {})])
    except OSError as e:
        click.echo(f"leasecheck: --junit {path}: cannot write it: {e.strerror or e}", err=True)
        sys.exit(Exit.BAD_INPUT)


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


class _BrokenPipe(Exception):
    """Whoever read our output went away (``leasecheck check ... | head``)."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _last_note(e: BaseException) -> str | None:
    """The last note added to ``e`` (e.g. where the run logged its traceback), on one line."""
    notes = [n for n in getattr(e, "__notes__", ()) if isinstance(n, str)]
    return _one_line(notes[-1]) if notes else None


def _crash(e: BaseException) -> int:
    """A failure of leasecheck or its environment: one line on stderr, exit 4, never a bare traceback.

    A run logs its traceback to its own ``leasecheck.log`` and says where in a
    note; elsewhere the traceback is shown only when ``LEASECHECK_TRACEBACK=1``.
    """
    from leasecheck.servers.base import EnvironmentFailure

    note = _last_note(e)
    what = "the environment failed" if isinstance(e, EnvironmentFailure | OSError) else "internal error"
    line = f"leasecheck: {what}: {type(e).__name__}: {_one_line(str(e))}"
    if note:
        line += f" ({note})"
    elif os.environ.get("LEASECHECK_TRACEBACK") == "1":
        traceback.print_exception(e, file=sys.stderr)
    else:
        line += " (LEASECHECK_TRACEBACK=1 shows the traceback)"
    click.echo(line, err=True)
    return Exit.ENVIRONMENT


class ExitCodeGroup(click.Group):
    """The one place that turns every way a command can end into the exit codes of docs/contracts/exit-codes.md.

    click's usage errors exit 2, which would read as "unknown": here they exit 3
    with one line. Any other exception is a crash of leasecheck or of its
    environment: exit 4 with one line (:func:`_crash`), never 1 (which says the
    backend was proven wrong) and never a bare traceback.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as e:
            if e.errno == errno.EPIPE:  # click would exit 1 ("anomalies") here
                raise _BrokenPipe() from e
            raise

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name or "leasecheck", complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else "leasecheck"
            click.echo(f"{where}: Error: {_one_line(e.format_message())} (see {where} --help)", err=True)
            sys.exit(Exit.BAD_INPUT)
        except click.ClickException as e:
            click.echo(f"leasecheck: Error: {_one_line(e.format_message())}", err=True)
            sys.exit(Exit.BAD_INPUT)
        except (click.Abort, KeyboardInterrupt):
            click.echo("aborted", err=True)
            sys.exit(interrupted(signal.SIGINT))
        except _BrokenPipe:
            devnull = os.open(os.devnull, os.O_WRONLY)  # so that flushing stdout at exit does not fail again
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(Exit.ENVIRONMENT)
        except Exception as e:
            sys.exit(_crash(e))
        sys.exit(rv if isinstance(rv, int) else Exit.VALID)


@click.group(cls=ExitCodeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="leasecheck")
def main() -> None:
    """leasecheck: correctness testing for lease / fencing-token implementations."""


@main.command()
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
    code: 0 valid, 1 anomalies found, 2 unknown (search budget ran out),
    3 bad input. A run directory whose run failed before it recorded anything
    (results.json says "status": "error") is named on stderr and skipped;
    given alone, it is exit 3.
    """
    from leasecheck.verdict.attribution import fault_victims
    from leasecheck.verdict.run_verdict import applicable, fault_windows, header_faults  # the catalogue: only when checking

    if not as_json:
        from leasecheck.report.terminal import console_for, print_coverage, print_verdict

        out = console_for()
    codes: list[int] = []
    junit_rows: list[Row] = []  # one per path, for --junit
    for path in paths:
        failed = failed_start(Path(path)) if Path(path).is_dir() else None
        if failed is not None:  # a run that died before recording: said, and skipped when others were checked
            click.echo(f"{path}: this run failed before it recorded a history, nothing to check: {_one_line(failed)}", err=True)
            if junit_file:
                junit_rows.append(_check_row(path, None, 0.0, f"the run failed before it recorded a history: {_one_line(failed)}"))
            continue
        if _inside_a_run(Path(path)):  # store/*/*/ also matches store/latest/<server data>/: not a history of its own
            click.echo(f"{path}: a folder inside the run folder {Path(path).parent}, not a run: skipped", err=True)
            continue
        if Path(path).is_dir():
            _recover(Path(path))
        began = time.perf_counter()
        try:
            history = history_path(path)
            verdict = check_source(history, budget=budget, engine=engine, windows=fault_windows, faults=fault_victims,  # type: ignore[arg-type]
                                   jobs=jobs)
        except HistoryError as e:
            click.echo(str(e), err=True)
            codes.append(Exit.BAD_INPUT)
            if junit_file:
                junit_rows.append(_check_row(path, None, time.perf_counter() - began, f"bad input: {_one_line(str(e))}"))
            continue
        if junit_file:
            junit_rows.append(_check_row(path, verdict, time.perf_counter() - began))
        for w in verdict.warnings:  # plain lines: a warning names a path, never wrap it
            click.echo(f"warning: {w}", err=True)
        assert verdict.header is not None and verdict.coverage is not None  # read from a file, with windows
        header, reached = verdict.header, verdict.coverage
        wanted = applicable(header_faults(header))
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
        _write_junit(junit_file, "leasecheck check", junit_rows)
    sys.exit(worst(codes) if codes else Exit.BAD_INPUT)


@main.command()
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


@main.command(params=[flag.option for flag in FLAGS])
def run(**params: Any) -> None:
    """Run a backend under concurrent workers and faults, record the history, check it.

    With no options: the SQLite reference backend (no server needed) under
    process pauses for 30 s. Exit code: 0 valid, 1 anomalies, 2 unknown,
    3 bad options, 4 the environment failed, 130 / 143 interrupted by
    SIGINT / SIGTERM (1 if what was recorded by then proves an anomaly).
    """
    from leasecheck.report.terminal import console_for, print_run
    from leasecheck.run.runner import BadOptions, Run
    from leasecheck.servers.base import EnvironmentFailure
    from leasecheck.targets.registry import TargetNotFound

    as_json, coverage_counts, junit_file = params["as_json"], params["coverage_counts"], params["junit_file"]
    seed = params["seed"]
    if seed is None:  # chosen here, so that it is printed before anything can hang or crash
        seed = random.SystemRandom().randrange(2**31)
    opts = run_options({**params, "seed": seed})
    target, faults = opts.target, opts.nemesis
    from leasecheck.report.progress import progress_for

    out = console_for(stderr=as_json)  # the seed and the progress: on stderr when stdout is JSON
    try:
        test = Run(opts)  # every refusal before the banner: a run that never started has no seed to replay
        with progress_for(out, opts, seed) as progress:
            test.progress = progress.update
            result = test.execute()
    except (BadOptions, TargetNotFound) as e:
        click.echo(f"leasecheck run: {e}", err=True)
        sys.exit(Exit.BAD_INPUT)
    except EnvironmentFailure as e:
        note = _last_note(e)
        click.echo(f"leasecheck run: the environment failed: {_one_line(str(e))}" + (f" ({note})" if note else ""), err=True)
        if junit_file:
            from leasecheck.verdict.outcomes import Row

            failed = Row(target, faults, seed, "error", reason=f"the environment failed: {_one_line(str(e))}")
            _write_junit(junit_file, "leasecheck run", [failed], {"target": target, "nemesis": ",".join(faults) or "none", "seed": str(seed)})
        sys.exit(Exit.ENVIRONMENT)
    if junit_file:  # also for an unknown verdict and an interrupted run: results.json says which
        from leasecheck.report.junit import run_properties
        from leasecheck.verdict.outcomes import read_run

        row = read_run(result.run_dir)
        _write_junit(junit_file, "leasecheck run", [row], run_properties(row))
    if as_json:
        sys.stdout.write((result.run_dir / "results.json").read_text())
    else:
        print_run(out, result, coverage_counts)  # with the run verdict's reason (docs/contracts/run-verdict.md) and the coverage
        if result.interrupted:
            click.echo(f"interrupted by {result.interrupted} (seed {result.seed}): exit {result.exit_code}")
    sys.exit(result.exit_code)


@main.command()
@click.argument("library", required=False)
@click.option("--list", "list_only", is_flag=True, help="Show every audited library, its modes, faults and published verdicts.")
@click.option("--mode", "modes", multiple=True, help="Only this mode of the library (repeatable; see --list).")
@click.option("--fault", "faults", multiple=True, help="Only this fault of the plan (repeatable).")
@click.option("--seeds", default=None, help="Comma-separated seeds (default: the plan's published seeds).")
@click.option("--time-limit", type=Finite(min=0, min_open=True), default=None, help="Seconds per run (default: the plan's).")
@click.option("--store", "store_dir", default="store", show_default=True, help="Folder of run directories.")
@click.option("--as-published", is_flag=True,
              help="Exit 0 when every run reached the verdict AUDITS.md publishes for it, 1 when one did not (a CI check that the library still behaves as audited).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, one per line.")
@click.option("--markdown", is_flag=True, help="End with a Markdown table of the runs (AUDITS.md's).")
def audit(library: str | None, list_only: bool, modes: tuple[str, ...], faults: tuple[str, ...], seeds: str | None,
          time_limit: float | None, store_dir: str, as_published: bool, as_json: bool, markdown: bool) -> None:
    """Audit a third-party lock library (or ``all``) with its published settings (AUDITS.md).

    LIBRARY is an audited library's PyPI name, an adapter's registered name,
    or an adapter of your own as MODULE:CLASS (found from the current
    directory too, as `run --target` finds it) whose class carries an
    AuditPlan (`leasecheck new-target --lock LIBRARY` writes one).
    Runs each fault of the library's plan with each seed, one run each, and
    prints the verdict, the anomaly kinds, the time to the first anomaly and
    the ops that prove it. Exit code: docs/contracts/exit-codes.md's, for the worst run (1 if any
    run found anomalies); with --as-published, 0 iff every run is as published.
    """
    from leasecheck.ci.audit import MARKDOWN_HEADER, AuditResult, audits, run_audit, select
    from leasecheck.report.terminal import console_for, print_audit_plans, print_audit_result

    console = console_for(stderr=as_json)
    if list_only or library is None:
        if library is None and not list_only:
            raise click.UsageError("name a library to audit, or --list")
        found, broken = audits()
        print_audit_plans(console, found, broken)
        return
    try:
        chosen = select(library, modes)
        seed_list = [int(s) for s in comma_list(seeds)] if seeds is not None else None
    except LookupError as e:
        click.echo(f"leasecheck audit: {e.args[0]}", err=True)
        sys.exit(Exit.BAD_INPUT)
    except ValueError:
        raise click.BadParameter(f"{seeds!r}: give comma-separated integers", param_hint="'--seeds'") from None
    if seed_list == []:
        raise click.BadParameter("names no seed", param_hint="'--seeds'")
    plan_faults = {f.nemesis for a in chosen for f in a.plan.faults}
    unknown = sorted(set(faults) - plan_faults)
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: not in the plan of {library} (its faults: {', '.join(sorted(plan_faults))})",
                                 param_hint="'--fault'")
    codes: list[int] = []
    mismatches = 0
    results: list[AuditResult] = []
    for audited in chosen:
        for fault in audited.plan.faults:
            if faults and fault.nemesis not in faults:
                continue
            for seed in seed_list or audited.plan.seeds:
                result = run_audit(audited.target, fault.nemesis, seed, Path(store_dir), time_limit)
                codes.append(result.exit_code)
                results.append(result)
                mismatches += not result.matches
                if as_json:
                    sys.stdout.write(json.dumps(result.to_json()) + "\n")
                    sys.stdout.flush()
                else:
                    print_audit_result(console, result)
                if result.exit_code >= SIGNALLED:  # interrupted: stop here, exit as the run did
                    sys.exit(result.exit_code)
    if markdown:
        click.echo(MARKDOWN_HEADER, err=as_json)
        for result in results:
            click.echo(result.markdown_row(), err=as_json)
    if as_published:
        sys.exit(Exit.INVALID if mismatches else Exit.VALID)
    sys.exit(worst(codes))


@main.command("new-target")
@click.argument("name", required=False)
@click.option("--store-kind", "store", type=click.Choice(["sqlite", "postgres", "redis"]), default=None,
              help="The store the adapter runs on (its `store`): its test and `leasecheck run` start one. "
                   "Default: none, a store of its own (`run --url`, and LEASECHECK_URL for the test).")
@click.option("--lock", "library", default=None, metavar="LIBRARY",
              help="Write a lock library's adapter instead (LIBRARY_lock.py: acquire / extend / unlock on LockLease, "
                   "records in Redis, with an audit plan), for `leasecheck audit MODULE:CLASS`; NAME defaults to LIBRARY.")
@click.option("--dir", "directory", default=".", show_default=True, help="Folder to write the two files into.")
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
def new_target(name: str | None, store: str | None, library: str | None, directory: str, force: bool) -> None:
    """Write NAME_lease.py (an adapter to fill in) and test_NAME_lease.py (the seed's table against it).

    The test fails with one message per method still to write (and with the
    exception of a method that raises), then runs every conformance scenario
    against the adapter, on a throwaway server of its store started as `run`
    starts one (LEASECHECK_URL instead, when set). With --lock LIBRARY: a lock
    library's adapter and its test, to audit with `leasecheck audit MODULE:CLASS`.
    """
    from leasecheck.kit.scaffold import ScaffoldError, names_for, write

    try:
        paths = write(name, Path(directory), force, store=store, lock=library)
    except ScaffoldError as e:
        click.echo(f"leasecheck new-target: {e}", err=True)
        sys.exit(Exit.BAD_INPUT)
    names = names_for(name, library)
    for path in paths:
        click.echo(f"wrote {path}")
    test = f"`python -m pytest -q {paths[1].name}` in {directory}"
    if library is not None:
        click.echo(f"next: fill in {paths[0].name}, then {test} and `leasecheck audit {names.module}:{names.cls}`")
    elif store is None:
        click.echo(f"next: fill in {paths[0].name} (and its store), then `LEASECHECK_URL=YOUR_STORE python -m pytest -q {paths[1].name}`"
                   f" in {directory} and `leasecheck run --target {names.module}:{names.cls} --url YOUR_STORE`")
    else:
        click.echo(f"next: fill in {paths[0].name}, then {test} and `leasecheck run --target {names.module}:{names.cls}`")


@main.command()
@click.argument("path", default="store/latest", metavar="[RUN_DIR]")
@click.option("-o", "--output", default=None, metavar="FILE", help="Write the report here (default: RUN_DIR/report.html); the plots go next to it.")
def report(path: str, output: str | None) -> None:
    """Write (or rebuild) a run's report.html: verdict, anomalies, timeline, plots, settings.

    RUN_DIR is a run folder (default: store/latest) or a history file. The
    report is one self-contained HTML file that opens offline; the latency and
    rate plots (PNG and SVG) are written next to it. A run folder without
    results.json has its history checked for the report. Exit 0 once written,
    3 on a history that is not one (one line: file, line, what).
    """
    from leasecheck.report.html import write_report
    from leasecheck.run.flags import replay_flags

    failed = failed_start(Path(path)) if Path(path).is_dir() else None
    if failed is not None:
        click.echo(f"{path}: this run failed before it recorded a history, nothing to report: {_one_line(failed)}", err=True)
        sys.exit(Exit.BAD_INPUT)
    try:
        written = write_report(Path(path), Path(output) if output else None, replay_flags=replay_flags(), warn=lambda m: click.echo(f"warning: {_one_line(m)}", err=True))
    except HistoryError as e:
        click.echo(str(e), err=True)
        sys.exit(Exit.BAD_INPUT)
    click.echo(str(written))


@main.command()
@click.argument("path", default="store/latest", metavar="[RUN_DIR]")
def heal(path: str) -> None:
    """Undo the faults a run left active (after the harness itself was killed).

    Reads RUN_DIR/faults.json (default: store/latest), undoes each fault it
    lists — resume paused processes, and, with their nemeses, delete toxics,
    reset clocks, unpause containers — and clears the file. Then appends to the
    history what only the worker logs hold (RUN_DIR/workers/, what the killed
    harness had not merged yet), as `leasecheck check RUN_DIR` does.
    """
    from leasecheck.nemesis.catalogue import import_fault_modules
    from leasecheck.nemesis.heal import heal_record
    from leasecheck.rundir.storedir import BadFaultsFile, load_faults, save_faults

    import_fault_modules()  # each registers how to undo its records (docker's only if the extra is installed)
    run_dir = Path(path)
    if not run_dir.is_dir():
        click.echo(f"leasecheck heal: {path}: not a run directory", err=True)
        sys.exit(Exit.BAD_INPUT)
    try:
        records = load_faults(run_dir)
    except BadFaultsFile as e:
        click.echo(f"leasecheck heal: {e}", err=True)
        sys.exit(Exit.BAD_INPUT)
    if not records:
        click.echo(f"{run_dir}: no active faults recorded; nothing to heal")
    for rec in records:
        click.echo(f"{rec.get('kind')}: {heal_record(rec)}")
    if records:
        save_faults(run_dir, [])
    from leasecheck.rundir.files import remove_leftovers, remove_mp_tempdir

    for name in remove_leftovers(run_dir):  # what a killed harness left: worker clocks, server data
        click.echo(f"removed {run_dir / name}")
    from leasecheck.rundir.worker_logs import harness_alive

    mp_temp = None if harness_alive(run_dir) else remove_mp_tempdir(run_dir)  # a killed harness's forkserver socket folder
    if mp_temp is not None:
        click.echo(f"removed {mp_temp}")
    _recover(run_dir)


def _recover(run_dir: Path) -> None:
    """A run whose harness was killed: append to its history what only the worker logs hold (leasecheck.rundir.worker_logs)."""
    from leasecheck.rundir.worker_logs import WORKERS_DIR, recover

    added = recover(run_dir)
    if added is not None:
        click.echo(f"{run_dir}: the harness died before merging everything: recovered {added} event(s) "
                   f"from {run_dir / WORKERS_DIR} into history.jsonl", err=True)


@main.command()
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


@main.command("install-toxiproxy")
def install_toxiproxy() -> None:
    """Build Toxiproxy (for --nemesis partition, latency, bandwidth) into the per-user cache.

    Builds toxiproxy-server at leasecheck's pinned version with this machine's
    Go (>= 1.23) into $XDG_CACHE_HOME/leasecheck/bin (default
    ~/.cache/leasecheck/bin), where `leasecheck run` looks after PATH. Does
    nothing if it is already there; prints the binary's path. Exit 4 if it
    cannot be built.
    """
    from leasecheck.servers.base import EnvironmentFailure
    from leasecheck.servers.tools import install_toxiproxy as build

    try:
        path = build(say=lambda line: click.echo(f"leasecheck install-toxiproxy: {line}", err=True))
    except EnvironmentFailure as e:
        click.echo(str(e), err=True)
        sys.exit(Exit.ENVIRONMENT)
    click.echo(str(path))


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    from leasecheck.ci.matrix import parse_shard

    try:
        return parse_shard(value) if value is not None else None
    except ValueError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


@main.command()
@click.argument("spec", metavar="SPEC.toml")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Cells run at once on this machine.")
@click.option("--shard", "shard_of", default=None, metavar="I/N", callback=_shard,
              help="Run shard I of N (1-based): N machines given 1/N ... N/N run every cell of the spec exactly once.")
@click.option("--store", "store_dir", default="store", show_default=True, help="Folder of run directories.")
@click.option("--junit", "junit_file", default=None, metavar="FILE", callback=output_file,
              help="Also write JUnit XML to FILE: one test case per cell, failed when the cell's verdict is not the expected one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per cell, one per line, as each ends.")
@click.option("--markdown", is_flag=True, help="End with a Markdown table (for a CI job summary) instead of the terminal table.")
@click.option("--dry-run", is_flag=True, help="Check the spec and list this shard's cells with their commands; run nothing.")
def matrix(spec: str, jobs: int, shard_of: tuple[int, int] | None, store_dir: str, junit_file: str | None,
           as_json: bool, markdown: bool, dry_run: bool) -> None:
    """Run the product targets × nemesis sets × seeds of a TOML spec, each cell judged against its expected verdict.

    The whole spec is checked before any cell starts (exit 3, one line naming
    the file and the entry). Each cell is a `leasecheck run` of its own; its
    expectation is left in its run folder (expected.json) for `leasecheck
    summary`. Exit code: 0 iff every cell came out as expected; else 4 if a
    cell's environment failed, 1 if a cell did not match, 2 if only unknowns
    did not; interrupted: 1 if a finished cell did not match, else 128 + the signal.
    """
    from leasecheck.ci.matrix import command

    if as_json and markdown:
        raise click.UsageError("--json and --markdown both take stdout: give one")
    sys.exit(command(spec, jobs, shard_of, store_dir, junit_file, as_json, markdown, dry_run))


@main.command()
@click.argument("paths", nargs=-1, required=True, metavar="STORE_OR_RUN...")
@click.option("--markdown", "markdown_out", is_flag=True, help="Print a Markdown table (e.g. into $GITHUB_STEP_SUMMARY).")
@click.option("--html", "html_file", default=None, metavar="FILE", callback=output_file,
              help="Also write a self-contained HTML table to FILE, linking each run's report.html (relative links).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, one per line.")
@click.option("--junit", "junit_file", default=None, metavar="FILE", callback=output_file,
              help="Also write JUnit XML to FILE: one test case per run.")
@click.option("--spec", "spec_path", default=None, metavar="SPEC.toml",
              help="Take the expected verdicts from this matrix spec (matched by target, nemesis set and seed); its cells with no run are errors.")
def summary(paths: tuple[str, ...], markdown_out: bool, html_file: str | None, as_json: bool, junit_file: str | None,
            spec_path: str | None) -> None:
    """Merge run folders (stores, downloaded shards, single runs) into one table, judged against the expected verdicts.

    Finds every folder holding results.json under the paths; each run is
    expected to be what its expected.json (left by `leasecheck matrix`) says,
    or with --spec what the spec says, or else valid. Same exit code as
    `leasecheck matrix`; 3 when no run folder is found.
    """
    from leasecheck.ci.summary import command

    if as_json and markdown_out:
        raise click.UsageError("--json and --markdown both take stdout: give one")
    sys.exit(command(paths, markdown_out, html_file, as_json, junit_file, spec_path))
