"""What several commands share in how they end: one-line messages on stderr, and JUnit files.

A message a command prints on failure is one line (a CI log shows it whole, and
``grep`` finds it), and a JUnit file that cannot be written after all is exit 3
wherever it was asked for.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from leasecheck.exits import Exit

if TYPE_CHECKING:
    from leasecheck.verdict.outcomes import Row


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) as one space."""
    return " ".join(str(text).split())


def last_note(e: BaseException) -> str | None:
    """The last note added to ``e`` (e.g. where the run logged its traceback), on one line."""
    notes = [n for n in getattr(e, "__notes__", ()) if isinstance(n, str)]
    return one_line(notes[-1]) if notes else None


def write_junit(path: str, suite: str, rows: list[Row], properties: dict[str, str] | None = None) -> None:
    """Write JUnit XML (leasecheck.report.junit); a file that cannot be written after all is one line and exit 3."""
    from leasecheck.report import junit

    try:
        junit.write(path, [junit.Suite(suite, rows, properties or {})])
    except OSError as e:
        click.echo(f"leasecheck: --junit {path}: cannot write it: {e.strerror or e}", err=True)
        sys.exit(Exit.BAD_INPUT)
