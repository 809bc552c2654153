"""The one error every layer of the front raises and the CLI maps to exit 4.

It lives alone, not with the servers that raise it most, so that a command
that only reads files (``leasecheck check``) can name it without importing the
server machinery (subprocess, sockets, ctypes).
"""

from __future__ import annotations


class EnvironmentFailure(Exception):
    """The test environment could not be set up (a server would not start, a binary is missing)."""


__all__ = ["EnvironmentFailure"]
