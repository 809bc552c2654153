"""``leasecheck hosts check FILE``: a deployment file read, and every command its faults need tried on its hosts.

Exit codes as everywhere (docs/contracts/exit-codes.md): 0 when every check
passed, 3 for a file that cannot make a run (one line, ``FILE:LINE: what``) or
one that lacks a key the chosen faults need, 4 for a host that cannot be
reached or a command or permission one lacks.
"""

from __future__ import annotations

import sys

import click

from leasecheck.exits import Exit, worst


@click.group()
def hosts() -> None:
    """Hosts leasecheck did not start: a deployment file (--hosts FILE) and what its faults need there (docs/hosts.md)."""


@hosts.command("check")
@click.argument("file", metavar="FILE")
@click.option("--nemesis", default=None, metavar="FAULTS",
              help="The faults to check for, comma-separated (default: every fault done on the members' hosts).")
@click.option("--run-id", default="check", show_default=True, metavar="ID",
              help="The run id whose firewall rules count as already there (a run's own check passes its id).")
def check_hosts(file: str, nemesis: str | None, run_id: str) -> None:
    """Read FILE and try, harmlessly, every command the faults will need on every member's host.

    Each member's host is reached (ssh://, docker://, netns://); its process is
    found and may be signalled (kill -0); its start command exists; iptables
    answers (iptables -S INPUT); each log is readable; the faketime file is
    writable; and the store names its primary. Nothing on any host is changed.
    Prints one row per check. Exit 0 if every check passed, 3 for a bad FILE,
    4 for a host that cannot be reached or a permission it lacks.
    """
    from leasecheck.errors import BadInput, EnvironmentFailure
    from leasecheck.hosts.checks import NEEDS, check
    from leasecheck.hosts.control import DeployedCluster
    from leasecheck.hosts.deployment import load_deployment
    from leasecheck.lists import names
    from leasecheck.nemesis.catalogue import lookup

    try:
        faults = tuple(NEEDS) if nemesis is None else tuple(kind.name for kind in lookup(names(nemesis, "--nemesis")))
    except BadInput as e:
        raise click.UsageError(str(e)) from None
    try:
        deployment = load_deployment(file)
        cluster = DeployedCluster.open(deployment, run_id)
    except BadInput as e:
        click.echo(f"leasecheck hosts check: {e}", err=True)
        sys.exit(Exit.BAD_INPUT)
    try:
        rows = check(cluster, faults)
    except EnvironmentFailure as e:
        click.echo(f"leasecheck hosts check: {e}", err=True)
        sys.exit(Exit.ENVIRONMENT)
    finally:
        cluster.close()
    widths = [max(len(r.member) for r in rows), max(len(r.what) for r in rows)]
    for r in rows:
        click.echo(f"{r.member:<{widths[0]}}  {r.what:<{widths[1]}}  {'ok  ' if r.ok else 'FAIL'}  {r.detail}")
    failed = [r for r in rows if not r.ok]
    skipped = [f for f in faults if f not in NEEDS]
    click.echo(f"{file}: {len(rows) - len(failed)} of {len(rows)} checks passed"
               + (f" (not done on the hosts, not checked: {', '.join(skipped)})" if skipped else ""))
    sys.exit(worst(Exit.BAD_INPUT if r.config else Exit.ENVIRONMENT for r in failed))
