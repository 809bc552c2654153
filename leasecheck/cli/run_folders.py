"""``leasecheck report`` and ``heal``: a run folder after its run, its report (re)written, its faults undone.

Both also serve a run whose harness was killed: ``heal`` undoes what it left
active, and, as ``check`` does, :func:`recover_history` completes its history
from the worker logs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from leasecheck.cli.output import one_line
from leasecheck.errors import BadInput
from leasecheck.exits import Exit
from leasecheck.histories import HistoryError
from leasecheck.rundir.storedir import failed_start


@click.command()
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
        click.echo(f"{path}: this run failed before it recorded a history, nothing to report: {one_line(failed)}", err=True)
        sys.exit(Exit.BAD_INPUT)
    try:
        written = write_report(Path(path), Path(output) if output else None, replay_flags=replay_flags(), warn=lambda m: click.echo(f"warning: {one_line(m)}", err=True))
    except HistoryError as e:
        click.echo(str(e), err=True)
        sys.exit(Exit.BAD_INPUT)
    click.echo(str(written))


@click.command()
@click.argument("path", default=None, required=False, metavar="[RUN_DIR]")
@click.option("--hosts", "hosts_file", default=None, metavar="FILE",
              help="Also undo, on every member's host of this deployment file, what leasecheck left there (docs/hosts.md).")
@click.option("--run-id", default=None, metavar="ID", help="With --hosts: only that run's firewall rules (default: every leasecheck rule).")
def heal(path: str | None, hosts_file: str | None, run_id: str | None) -> None:
    """Undo the faults a run left active (after the harness itself was killed).

    Reads RUN_DIR/faults.json (default: store/latest), undoes each fault it
    lists — resume paused processes, and, with their nemeses, delete toxics,
    reset clocks, unpause containers — and clears the file; it deletes the hosts
    (network namespaces) of any cluster whose harness is gone. Then appends to the
    history what only the worker logs hold (RUN_DIR/workers/, what the killed
    harness had not merged yet), as `leasecheck check RUN_DIR` does.

    With --hosts FILE it first heals the deployment's hosts: deletes the
    firewall rules tagged leasecheck: (only leasecheck:ID with --run-id),
    sends SIGCONT to each member's processes and resets each faketime file to
    +0; exit 4 if a host could not be healed. Without RUN_DIR, and no
    store/latest, only the hosts are healed.
    """
    if hosts_file is not None:
        healed = heal_hosts(hosts_file, run_id)
        if path is None and not Path("store/latest").is_dir():
            sys.exit(healed)
    elif run_id is not None:
        raise click.UsageError("--run-id goes with --hosts FILE")
    path = path or "store/latest"
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
    from leasecheck.servers.hosts import remove_orphans

    for netns in remove_orphans():  # a cluster's hosts whose harness and guard were both killed
        click.echo(f"removed network namespace {netns}")
    recover_history(run_dir)
    if hosts_file is not None:
        sys.exit(healed)


def heal_hosts(file: str, run_id: str | None) -> int:
    """``heal --hosts FILE``: every member's host healed, one line per step; the exit code (0, 3 or 4)."""
    from leasecheck.hosts.control import DeployedCluster
    from leasecheck.hosts.deployment import load_deployment

    try:
        cluster = DeployedCluster.open(load_deployment(file), run_id or "heal")
    except BadInput as e:
        click.echo(f"leasecheck heal: {e}", err=True)
        return Exit.BAD_INPUT
    try:
        rows = cluster.heal_run(run_id) if run_id else cluster.heal_all_tagged()
    finally:
        cluster.close()
    for row in rows:
        click.echo(f"{row.member}: {row.what}: {row.detail}" if row.ok else f"{row.member}: {row.what}: FAILED: {row.detail}",
                   err=not row.ok)
    return Exit.VALID if all(row.ok for row in rows) else Exit.ENVIRONMENT


def recover_history(run_dir: Path) -> None:
    """A run whose harness was killed: append to its history what only the worker logs hold (leasecheck.rundir.worker_logs)."""
    from leasecheck.rundir.worker_logs import WORKERS_DIR, recover

    added = recover(run_dir)
    if added is not None:
        click.echo(f"{run_dir}: the harness died before merging everything: recovered {added} event(s) "
                   f"from {run_dir / WORKERS_DIR} into history.jsonl", err=True)
