"""The exit codes of every leasecheck command, and which one wins when several runs end differently.

Exit codes are a contract (docs/contracts/exit-codes.md): a CI gate reads them, so
each is declared once, here, and every command (``check``, ``run``, ``matrix``,
``summary``, ``audit``, ...) ends with one of these or with :func:`interrupted`'s.
A command that judges several histories or runs exits with the worst of their
codes, in the one :data:`SEVERITY` order. A verdict's word and its code are here too
(:func:`verdict_word`, :func:`verdict_exit`), so that every view says one run alike.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from enum import IntEnum


class Exit(IntEnum):
    """docs/contracts/exit-codes.md's codes (an ``int``: ``sys.exit(Exit.INVALID)`` exits 1)."""

    #: the history is valid (for ``matrix`` and ``summary``: every run came out as expected)
    VALID = 0
    #: anomalies found (for ``matrix`` and ``summary``: a run did not come out as expected)
    INVALID = 1
    #: unknown: the checker's budget ran out, or the run tested too little to say
    UNKNOWN = 2
    #: bad input or a usage error (a history that is not one, options that cannot make a run)
    BAD_INPUT = 3
    #: the environment failed (a server or tool would not start) or leasecheck crashed: never a verdict on the backend
    ENVIRONMENT = 4


#: the verdicts a run or a history comes to (docs/contracts/verdict.md), as the words results.json, the tables, the
#: JUnit files and the plugin use, and what a user may expect of a run
VERDICTS = ("valid", "invalid", "unknown")


def verdict_word(valid: object) -> str:
    """results.json's ``valid`` (true, false, "unknown") as its word; ``"error"`` for anything else (a run folder whose
    verdict cannot be read: never taken for one)."""
    if valid is True:
        return "valid"
    if valid is False:
        return "invalid"
    return "unknown" if valid == "unknown" else "error"


def verdict_exit(valid: object) -> Exit:
    """A verdict's exit code: valid 0, invalid 1, unknown 2 (docs/contracts/exit-codes.md)."""
    return Exit.VALID if valid is True else Exit.INVALID if valid is False else Exit.UNKNOWN


#: which code wins among several: a run that could not test beats a usage error, which beats proven anomalies,
#: which beat "unknown"; valid only when every one is
SEVERITY = (Exit.ENVIRONMENT, Exit.BAD_INPUT, Exit.INVALID, Exit.UNKNOWN)


def worst(codes: Iterable[int]) -> int:
    """The code that wins among ``codes`` (:data:`SEVERITY`); valid for none. A code outside the contract: the largest."""
    given = set(codes)
    for code in SEVERITY:
        if code in given:
            return code
    return max(given, default=Exit.VALID)


#: exit codes from here up are :func:`interrupted`'s: the command was cut short by signal ``code - SIGNALLED``
SIGNALLED = 128


def interrupted(sig: int) -> int:
    """A command cut short by a signal that proved no anomaly: 128 + the signal (130 for SIGINT, 143 for SIGTERM)."""
    return SIGNALLED + int(signal.Signals(sig))
