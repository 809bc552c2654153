"""``leasecheck run``: a backend under concurrent workers and faults, recorded and checked; and the tool its network faults need.

The run's options are declared once, in :mod:`leasecheck.run.flags` (the
matrix and the pytest plugin read the same table); this command turns them
into a :class:`~leasecheck.run.options.RunOptions`, runs it, and says what came out.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import click

from leasecheck.cli.output import last_note, one_line, write_junit
from leasecheck.errors import BadInput
from leasecheck.exits import Exit
from leasecheck.run.flags import FLAGS, run_options
from leasecheck.rundir.runfolder import RunFolder


@click.command(params=[flag.option for flag in FLAGS])
def run(**params: Any) -> None:
    """Run a backend under concurrent workers and faults, record the history, check it.

    With no options: the SQLite reference backend (no server needed) under
    process pauses for 30 s. Exit code: 0 valid, 1 anomalies, 2 unknown,
    3 bad options, 4 the environment failed, 130 / 143 interrupted by
    SIGINT / SIGTERM (1 if what was recorded by then proves an anomaly).
    """
    from leasecheck.report.terminal import console_for, print_run
    from leasecheck.run.runner import Run
    from leasecheck.servers.base import EnvironmentFailure

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
    except BadInput as e:
        click.echo(f"leasecheck run: {e}", err=True)
        sys.exit(Exit.BAD_INPUT)
    except EnvironmentFailure as e:
        note = last_note(e)
        click.echo(f"leasecheck run: the environment failed: {one_line(str(e))}" + (f" ({note})" if note else ""), err=True)
        if junit_file:
            from leasecheck.verdict.outcomes import Row

            failed = Row(target, faults, seed, "error", reason=f"the environment failed: {one_line(str(e))}")
            write_junit(junit_file, "leasecheck run", [failed], {"target": target, "nemesis": ",".join(faults) or "none", "seed": str(seed)})
        sys.exit(Exit.ENVIRONMENT)
    if junit_file:  # also for an unknown verdict and an interrupted run: results.json says which
        from leasecheck.report.junit import run_properties
        from leasecheck.verdict.outcomes import read_run

        row = read_run(result.run_dir)
        write_junit(junit_file, "leasecheck run", [row], run_properties(row))
    if as_json:
        sys.stdout.write(RunFolder(result.run_dir).results.read_text())
    else:
        print_run(out, result, coverage_counts)  # with the run verdict's reason (docs/contracts/run-verdict.md) and the coverage
        if result.interrupted:
            click.echo(f"interrupted by {result.interrupted} (seed {result.seed}): exit {result.exit_code}")
    sys.exit(result.exit_code)


@click.command("install-toxiproxy")
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
