"""The two ends a command can come to before any verdict: bad input (exit 3) and a failed environment (exit 4).

They live alone, not with the servers that raise one most or the options that raise the
other, so that every layer can name them without importing machinery (a command that only
reads files, ``leasecheck check``, names them without subprocess, sockets or ctypes), and
the CLI maps each family to its exit code in one place.
"""

from __future__ import annotations


class BadInput(ValueError):
    """What the user gave cannot make a run (an option, a file, a name): ``str()`` is one line that says where
    (``FILE:LINE``, the option) and what is wrong. Raised before anything starts; exit 3
    (docs/contracts/exit-codes.md). Every refusal of the user's input is of this family, so the front catches it
    once; each subclass says which input it refuses."""


class EnvironmentFailure(Exception):
    """The test environment could not be set up (a server would not start, a binary is missing)."""


__all__ = ["BadInput", "EnvironmentFailure"]
