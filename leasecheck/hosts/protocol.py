"""What a host is to leasecheck: run a command, read, write and fetch a file, close. Nothing more.

Why so small: every member fault is a few commands on the member's host
(``kill -STOP``, ``iptables -I INPUT ...``, ``pgrep -f``), whatever way the host is
reached (ssh, ``docker exec``, a network namespace here). Keeping the interface
to what every transport can do the same way means a fault is written once, and a
new transport (``kubectl exec``) is one module.

Two ways a command can go wrong, kept apart because they mean different things:
the command ran and failed (a non-zero exit, :class:`Ran` says so, never an
exception: ``kill -0`` of a dead pid is an answer), or the host could not be
reached at all (:class:`HostUnreachable`, an
:class:`~leasecheck.errors.EnvironmentFailure`: no verdict on the store can come
of a run whose faults did not land).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from leasecheck.errors import EnvironmentFailure

#: how long a command may take before the host counts as unreachable (a hung sshd, a frozen container)
TIMEOUT_S = 30.0


class HostUnreachable(EnvironmentFailure):
    """The transport failed: the host did not answer, refused us, or a command did not finish in time."""


class HostFileError(EnvironmentFailure):
    """A file on a host could not be read or written (missing, or a permission the user lacks)."""


@dataclass(frozen=True)
class Ran:
    """What a command gave back: its exit status (negative: killed by that signal) and its two outputs, as bytes."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def out(self) -> str:
        """stdout as text, stripped (what most commands' answer is)."""
        return self.stdout.decode(errors="replace").strip()

    @property
    def err(self) -> str:
        """stderr as text, on one line."""
        return " ".join(self.stderr.decode(errors="replace").split())

    def why(self) -> str:
        """One line saying how it failed: ``kill -STOP 12 (exit 1): kill: (12) - No such process``."""
        said = self.err or self.out.replace("\n", " ")
        return f"{shlex.join(self.argv)} (exit {self.returncode})" + (f": {said}" if said else "")


class Host(Protocol):
    """One machine leasecheck reaches, by name (the member's, or the address it was given)."""

    @property
    def name(self) -> str: ...

    def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = TIMEOUT_S) -> Ran:
        """Run ``argv`` (no shell: ``["sh", "-c", ...]`` for one); never raises for a non-zero exit.

        Raises :class:`HostUnreachable` if the host cannot be reached or the
        command did not finish within ``timeout`` seconds.
        """
        ...

    def read_file(self, path: str) -> bytes:
        """The file's bytes; :class:`HostFileError` if it cannot be read."""
        ...

    def write_file(self, path: str, data: bytes) -> None:
        """Replace the file whole (written beside it, then renamed: a reader never sees half); mode 0644."""
        ...

    def fetch(self, remote_path: str, local_path: Path) -> None:
        """Copy a file of the host to ``local_path`` on this machine (a member's log into the run folder)."""
        ...

    def close(self) -> None:
        """Let go of the connection; the host may be used again (it reconnects)."""
        ...


#: the shell script every transport that has only commands writes a file with: beside it, then renamed
WRITE_SCRIPT = 'umask 022 && cat > "$1.leasecheck-tmp" && mv -f "$1.leasecheck-tmp" "$1"'


__all__ = ["TIMEOUT_S", "WRITE_SCRIPT", "Host", "HostFileError", "HostUnreachable", "Ran"]
