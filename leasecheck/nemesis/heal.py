"""Undoing faults from their records: the harness's last line of defence.

Every active fault can describe how to undo it as a small JSON record (a pid to
SIGCONT, a toxic to delete, a container to unpause, a clock file to reset).
The runner keeps those records in the run's ``faults.json`` while the faults
are active, so ``leasecheck heal`` can undo them even after the harness itself
was SIGKILLed. Each kind of record has one undo function, registered here by
the module that defines the fault.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from leasecheck.machine.processes import descendants

Record = dict[str, Any]
UNDO: dict[str, Callable[[Record], str]] = {}


def undoes(kind: str) -> Callable[[Callable[[Record], str]], Callable[[Record], str]]:
    """Register the function that undoes records of ``kind``; it returns what it did."""

    def register(fn: Callable[[Record], str]) -> Callable[[Record], str]:
        UNDO[kind] = fn
        return fn

    return register


@undoes("sigcont")
def _continue(rec: Record) -> str:
    """Resume stopped processes (and, with ``tree``, everything below them)."""
    done = []
    for pid in rec["pids"]:
        for p in descendants(pid) if rec.get("tree") else [pid]:
            try:
                os.kill(p, signal.SIGCONT)
                done.append(p)
            except ProcessLookupError:
                pass
    return f"SIGCONT to {done}" if done else "no such process any more"


def heal_record(rec: Record) -> str:
    """Undo one fault from its record; unknown kinds are reported, not guessed at."""
    fn = UNDO.get(rec.get("kind", ""))
    if fn is None:
        return f"cannot undo a {rec.get('kind')!r} record (its nemesis module is not loaded)"
    return fn(rec)
