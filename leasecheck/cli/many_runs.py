"""``leasecheck audit``, ``matrix`` and ``summary``: many runs at once, each judged against what was expected of it.

The work is :mod:`leasecheck.ci`'s (an audited library's plan, a spec's cells,
run folders merged into one table); these are their command lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from leasecheck.exits import SIGNALLED, Exit, worst
from leasecheck.lists import BadList, distinct, names, repeated
from leasecheck.run.flags import Finite, output_file


@click.command()
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
@click.option("--latest", is_flag=True,
              help="Run the published audits on each library's newest release (a throwaway virtualenv) and say what "
                   "changed: a verdict, a kind, a release that no longer installs. Exit 1 if anything did.")
def audit(library: str | None, list_only: bool, modes: tuple[str, ...], faults: tuple[str, ...], seeds: str | None,
          time_limit: float | None, store_dir: str, as_published: bool, as_json: bool, markdown: bool,
          latest: bool) -> None:
    """Audit a third-party lock library or job queue (or ``all``, ``queues``) with its published settings (AUDITS.md).

    LIBRARY is an audited library's PyPI name, an adapter's registered name,
    or an adapter of your own as MODULE:CLASS (found from the current
    directory too, as `run --target` finds it) whose class carries an
    AuditPlan (`leasecheck new-target --lock LIBRARY` writes one). A job
    queue (rq, huey, celery, dramatiq, arq, saq, procrastinate, pgqueuer,
    dbos, chancy, temporal; `queues` for all; a QueueLibrary of your own as
    MODULE:CLASS or by its entry point in the group leasecheck.queues) is
    run by its own workers, with leasecheck's task (docs/auditing.md); its
    fault `none` is the task's own stalls alone.
    Runs each fault of the library's plan with each seed, one run each, and
    prints the verdict, the anomaly kinds, the time to the first anomaly and
    the ops that prove it. Exit code: docs/contracts/exit-codes.md's, for the worst run (1 if any
    run found anomalies); with --as-published, 0 iff every run is as published.
    """
    from leasecheck.auditing.audit import MARKDOWN_HEADER, AuditResult, audits, run_audit, select
    from leasecheck.report.terminal import console_for, print_audit_plans, print_audit_result

    console = console_for(stderr=as_json)
    if list_only or library is None:
        if library is None and not list_only:
            raise click.UsageError("name a library to audit, or --list")
        found, broken = audits()
        print_audit_plans(console, found, broken)
        return
    if latest:
        _latest(library, modes, faults, seeds, time_limit, store_dir)
    try:
        repeated(modes, "--mode")
        repeated(faults, "--fault")
        seed_list = _seeds(seeds) if seeds is not None else None
        chosen = select(library, modes)
    except BadList as e:
        raise click.UsageError(str(e)) from None
    except LookupError as e:
        click.echo(f"leasecheck audit: {e.args[0]}", err=True)
        sys.exit(Exit.BAD_INPUT)
    plan_faults = {f.key for a in chosen for f in a.plan.faults}
    unknown = sorted(set(faults) - plan_faults)
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: not in the plan of {library} (its faults: {', '.join(sorted(plan_faults))})",
                                 param_hint="'--fault'")
    codes: list[int] = []
    mismatches = 0
    results: list[AuditResult] = []
    for audited in chosen:
        for fault in audited.plan.faults:
            if faults and fault.key not in faults:
                continue
            for seed in seed_list or audited.plan.seeds:
                result = run_audit(audited.target, fault.key, seed, Path(store_dir), time_limit)
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


def _latest(library: str, modes: tuple[str, ...], faults: tuple[str, ...], seeds: str | None, time_limit: float | None,
            store_dir: str) -> None:
    """``audit --latest``: the library's published audit on its newest release; exits with the drift's code."""
    from leasecheck.auditing.latest import exit_code, libraries_of, run_latest
    from leasecheck.errors import EnvironmentFailure

    try:
        repeated(modes, "--mode")
        repeated(faults, "--fault")
        if seeds is not None:
            _seeds(seeds)
        libraries_of(library)
    except BadList as e:
        raise click.UsageError(str(e)) from None
    except LookupError as e:
        click.echo(f"leasecheck audit: {e.args[0]}", err=True)
        sys.exit(Exit.BAD_INPUT)
    args = [*(a for f in faults for a in ("--fault", f)), *(["--seeds", seeds] if seeds is not None else []),
            *(["--time-limit", str(time_limit)] if time_limit is not None else [])]
    try:
        drifts = run_latest(library, args, Path(store_dir), modes, say=click.echo)
    except EnvironmentFailure as e:
        click.echo(f"leasecheck audit: {e}", err=True)
        sys.exit(Exit.ENVIRONMENT)
    sys.exit(exit_code(drifts))


def _seeds(text: str) -> list[int]:
    """``--seeds 1,2,3``: integers, none empty or named twice (:func:`leasecheck.lists.names`)."""
    items = names(text, "--seeds")
    try:
        numbers = [int(s) for s in items]
    except ValueError:
        raise BadList("--seeds", text, "give comma-separated integers") from None
    return list(distinct(numbers, "--seeds", text))  # "1,01" names seed 1 twice


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    from leasecheck.ci.matrix import parse_shard

    try:
        return parse_shard(value) if value is not None else None
    except ValueError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None


@click.command()
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


@click.command()
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
