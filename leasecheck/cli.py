"""The ``leasecheck`` command line.

Exit codes are a contract (DESIGN.md): 0 valid, 1 anomalies found, 2 unknown,
3 bad input or usage error. click's own usage errors exit 2, which would read
as "unknown", so :func:`main` maps them to 3.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec
from rich.console import Console

from checker import DEFAULT_BUDGET, check_source
from histories import HistoryError
from leasecheck.report import print_targets, print_verdict
from targets.registry import TargetNotFound, available, load

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_BAD_INPUT = 0, 1, 2, 3


def history_path(path: str) -> Path:
    """A history file, or a store directory holding ``history.jsonl``."""
    p = Path(path)
    if p.is_dir():
        inner = p / "history.jsonl"
        if not inner.is_file():
            raise HistoryError(path, None, "is a directory with no history.jsonl (not a store directory)")
        return inner
    return p


def _worst(codes: list[int]) -> int:
    """Bad input beats anomalies, which beat unknown, which beats valid."""
    for code in (EXIT_BAD_INPUT, EXIT_INVALID, EXIT_UNKNOWN):
        if code in codes:
            return code
    return EXIT_VALID


class ExitCodeGroup(click.Group):
    """A click group whose usage errors exit 3, as DESIGN.md's contract says (click uses 2)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # type: ignore[no-untyped-def, override]
        try:
            rv = super().main(args, prog_name or "leasecheck", complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            e.show()
            sys.exit(EXIT_BAD_INPUT)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=ExitCodeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="leasecheck")
def main() -> None:
    """leasecheck: correctness testing for lease / fencing-token implementations."""


@main.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as one JSON object (one per line for several paths).")
@click.option(
    "--budget", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_BUDGET, show_default=True,
    help="Seconds the linearizability search may spend per history before the verdict is 'unknown'.",
)
@click.option("--explain", is_flag=True, help="Render the chain of ops that proves each anomaly.")
@click.option(
    "--engine", type=click.Choice(["auto", "search"]), default="auto", show_default=True,
    help="'auto' decides from the epoch order and searches only where it must; 'search' always runs the WGL search.",
)
def check(paths: tuple[str, ...], as_json: bool, budget: float, explain: bool, engine: str) -> None:
    """Check histories (files, or store directories holding history.jsonl).

    Exit code: 0 valid, 1 anomalies found, 2 unknown (search budget ran out),
    3 bad input.
    """
    out = Console(highlight=False, soft_wrap=False)
    err = Console(stderr=True, highlight=False)
    codes = []
    for path in paths:
        try:
            verdict = check_source(history_path(path), budget=budget, engine=engine)  # type: ignore[arg-type]
        except HistoryError as e:
            click.echo(str(e), err=True)
            codes.append(EXIT_BAD_INPUT)
            continue
        for w in verdict.warnings:
            err.print(f"warning: {w}")
        if as_json:
            obj = verdict.to_json()
            if len(paths) > 1:
                obj = {"history": path, **obj}
            sys.stdout.buffer.write(msgspec.json.encode(obj) + b"\n")
            sys.stdout.flush()
        else:
            print_verdict(out, path, verdict, explain)
        codes.append(verdict.exit_code)
    sys.exit(_worst(codes))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per backend, one per line.")
def targets(as_json: bool) -> None:
    """List the installed lease backends (reference, broken variants, third-party plug-ins)."""
    rows = []
    for name, spec in available().items():
        try:
            cls = load(name)
        except TargetNotFound as e:
            rows.append({"name": name, "class": spec, "error": str(e)})
            continue
        rows.append({
            "name": name, "class": spec, "store": cls.store, "fenced": cls.fenced, "summary": cls.summary(),
            "bug": cls.bug, "expected": list(cls.expected), "exposed_by": list(cls.exposed_by),
        })
    if as_json:
        for row in rows:
            sys.stdout.buffer.write(msgspec.json.encode(row) + b"\n")
    else:
        print_targets(Console(highlight=False), rows)
