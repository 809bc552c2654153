"""The ``leasecheck`` command line: the group every command hangs from, and how each way of ending becomes an exit code.

Exit codes are a contract (docs/contracts/exit-codes.md, :class:`~leasecheck.exits.Exit`):
0 valid, 1 anomalies found, 2 unknown, 3 bad input or usage error, 4 the environment
failed or leasecheck crashed. click's own usage errors exit 2, which would read as
"unknown", so the group's ``main`` maps them to 3, and every other exception to 4 with one line.

The commands live by family, each module importing only what every one of its
commands needs (``leasecheck check --json`` must start fast and never load rich,
networkx or a database client: tests/local/test_startup.py); the rest is imported by
the command that needs it:

* :mod:`.checking` — ``check``, ``targets``, ``nemeses``, ``clusters``: histories and the catalogues, nothing run;
* :mod:`.running` — ``run`` (its options are :mod:`leasecheck.run.flags`'), ``install-toxiproxy``;
* :mod:`.many_runs` — ``audit``, ``matrix``, ``summary``: many runs at once, judged;
* :mod:`.run_folders` — ``report``, ``heal``: a run folder after its run;
* :mod:`.hosts` — ``hosts check``: a deployment on hosts leasecheck did not start, and what its faults need there;
* :mod:`.new_target` — ``new-target``: a team's own adapter and its test;
* :mod:`.output` — what the commands share: one-line messages, JUnit files.

May import every room; nothing imports it but ``__main__`` and ``docgen``.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import traceback

import click

from leasecheck.cli.checking import check, clusters, nemeses, targets
from leasecheck.cli.hosts import hosts
from leasecheck.cli.many_runs import audit, matrix, summary
from leasecheck.cli.new_target import new_target
from leasecheck.cli.output import last_note, one_line
from leasecheck.cli.run_folders import heal, report
from leasecheck.cli.running import install_toxiproxy, run
from leasecheck.errors import BadInput
from leasecheck.exits import Exit, interrupted


class _BrokenPipe(Exception):
    """Whoever read our output went away (``leasecheck check ... | head``)."""


def _crash(e: BaseException) -> int:
    """A failure of leasecheck or its environment: one line on stderr, exit 4, never a bare traceback.

    A run logs its traceback to its own ``leasecheck.log`` and says where in a
    note; elsewhere the traceback is shown only when ``LEASECHECK_TRACEBACK=1``.
    """
    from leasecheck.servers.base import EnvironmentFailure

    note = last_note(e)
    what = "the environment failed" if isinstance(e, EnvironmentFailure | OSError) else "internal error"
    line = f"leasecheck: {what}: {type(e).__name__}: {one_line(str(e))}"
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
            click.echo(f"{where}: Error: {one_line(e.format_message())} (see {where} --help)", err=True)
            sys.exit(Exit.BAD_INPUT)
        except click.ClickException as e:
            click.echo(f"leasecheck: Error: {one_line(e.format_message())}", err=True)
            sys.exit(Exit.BAD_INPUT)
        except BadInput as e:  # a command that did not say it in its own words: still one line, exit 3
            click.echo(f"leasecheck: {one_line(str(e))}", err=True)
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


# in the order --help and the docs' command-line reference list them
for _command in (check, targets, run, audit, new_target, report, heal, nemeses, clusters, hosts, install_toxiproxy, matrix,
                 summary):
    main.add_command(_command)
