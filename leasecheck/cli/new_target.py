"""``leasecheck new-target``: a team's own adapter to fill in, with the test that says what is still missing.

The files are :mod:`leasecheck.kit.scaffold`'s; this command writes them and
prints the next step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from leasecheck.exits import Exit


@click.command("new-target")
@click.argument("name", required=False)
@click.option("--store-kind", "store", type=click.Choice(["sqlite", "postgres", "redis"]), default=None,
              help="The store the adapter runs on (its `store`): its test and `leasecheck run` start one. "
                   "Default: none, a store of its own (`run --url`, and LEASECHECK_URL for the test).")
@click.option("--lock", "library", default=None, metavar="LIBRARY",
              help="Write a lock library's adapter instead (LIBRARY_lock.py: acquire / extend / unlock on LockLease, "
                   "records in Redis, with an audit plan), for `leasecheck audit MODULE:CLASS`; NAME defaults to LIBRARY.")
@click.option("--queue", "queue", default=None, metavar="LIBRARY",
              help="Write a job queue's adapter instead (LIBRARY_queue.py: a QueueLibrary with its task and audit plan) "
                   "and its test of the queue conformance, for `leasecheck audit MODULE:CLASS`; NAME defaults to LIBRARY.")
@click.option("--dir", "directory", default=".", show_default=True, help="Folder to write the two files into.")
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
def new_target(name: str | None, store: str | None, library: str | None, queue: str | None, directory: str,
               force: bool) -> None:
    """Write NAME_lease.py (an adapter to fill in) and test_NAME_lease.py (the seed's table against it).

    The test fails with one message per method still to write (and with the
    exception of a method that raises), then runs every conformance scenario
    against the adapter, on a throwaway server of its store started as `run`
    starts one (LEASECHECK_URL instead, when set). With --lock LIBRARY: a lock
    library's adapter and its test, to audit with `leasecheck audit MODULE:CLASS`.
    With --queue LIBRARY: a job queue's adapter (its own workers run the jobs)
    and a test that runs it once through the queue conformance on the broker
    leasecheck starts: a job executed, a stalled execution redelivered, the
    library's identity recorded.
    """
    from leasecheck.kit.scaffold import ScaffoldError, names_for, write

    try:
        paths = write(name, Path(directory), force, store=store, lock=library, queue=queue)
    except ScaffoldError as e:
        click.echo(f"leasecheck new-target: {e}", err=True)
        sys.exit(Exit.BAD_INPUT)
    names = names_for(name, library, queue)
    for path in paths:
        click.echo(f"wrote {path}")
    test = f"`python -m pytest -q {paths[1].name}` in {directory}"
    if library is not None or queue is not None:
        click.echo(f"next: fill in {paths[0].name}, then {test} and `leasecheck audit {names.module}:{names.cls}`")
    elif store is None:
        click.echo(f"next: fill in {paths[0].name} (and its store), then `LEASECHECK_URL=YOUR_STORE python -m pytest -q {paths[1].name}`"
                   f" in {directory} and `leasecheck run --target {names.module}:{names.cls} --url YOUR_STORE`")
    else:
        click.echo(f"next: fill in {paths[0].name}, then {test} and `leasecheck run --target {names.module}:{names.cls}`")
