"""The store server's clock, skewed through libfaketime's control file; and what that costs the checker.

The reference backends judge expiry by the store's clock, so only a skew of
the *store* can make a correct backend look wrong, and only that skew belongs
in the history's ``clock_uncertainty_ms`` (:func:`required_uncertainty_ms`).
The server must run under libfaketime (:mod:`leasecheck.servers.faketime`),
which is why the catalogue's ``clock-store`` needs a local server, not Docker.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leasecheck.nemesis.context import FaultContext, SkewableServer
from leasecheck.nemesis.heal import Record, undoes
from leasecheck.nemesis.protocol import Fault


def faketime_offset(offset_ms: float) -> str:
    """libfaketime's relative-offset syntax, in seconds: ``+1.5``, ``-0.25``, ``+0``."""
    seconds = offset_ms / 1000.0
    text = f"{seconds:+.6f}".rstrip("0").rstrip(".")
    return "+0" if text in ("+", "-", "+0", "-0") else text


def write_faketime_offset(control_file: str | os.PathLike[str], offset_ms: float) -> None:
    """Atomically replace the file libfaketime reads (``FAKETIME_TIMESTAMP_FILE``).

    With ``FAKETIME_NO_CACHE=1`` the server re-reads the file on each clock call;
    writing in place could let it read a half-written ``+3`` for ``+3600``, so
    write beside it and rename (readable by the server's user).
    """
    path = Path(control_file)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(faketime_offset(offset_ms) + "\n")
    tmp.chmod(0o644)
    tmp.replace(path)


@dataclass
class ServerClockSkew:
    """Skew the store server's clock by ``delta_ms`` through its libfaketime control file; heal to ``+0``.

    The server must run under libfaketime reading ``control_file`` with
    ``FAKETIME_NO_CACHE=1`` (:class:`leasecheck.servers.faketime.FaketimePostgresServer`
    and ``FaketimeRedisServer`` do). A run with this fault must record
    ``clock_uncertainty_ms >= required_uncertainty_ms(max |delta_ms|)``.
    """

    control_file: str | os.PathLike[str]
    delta_ms: float
    victim: str = "store"
    name: str = "clock-store"
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        write_faketime_offset(self.control_file, self.delta_ms)
        self.active = True
        return {"victims": [self.victim], "delta_ms": self.delta_ms}

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.active = False
        write_faketime_offset(self.control_file, 0.0)
        return {"victims": [self.victim]}

    def undo_record(self) -> dict[str, Any] | None:
        return {"kind": "faketime-reset", "control_file": str(self.control_file)} if self.active else None


@undoes("faketime-reset")
def _undo_server_clock(rec: Record) -> str:
    """Put a libfaketime control file back to ``+0`` (a server restarted on that directory starts unskewed)."""
    path = Path(rec["control_file"])
    if not path.parent.is_dir():
        return f"{path.parent} is gone; nothing to reset"
    write_faketime_offset(path, 0.0)
    return f"{path} reset to +0"


def required_uncertainty_ms(max_server_skew_ms: float) -> float:
    """The least ``clock_uncertainty_ms`` a history may record when the store's clock is skewed by up to ±s.

    An interval of harness time begins under one offset and may end under
    another; with offsets anywhere in [−s, +s] the store can misjudge its length
    by up to 2s (docs/contracts/history-format.md, the header). Only the *store's* clock counts:
    worker-clock skew (:mod:`leasecheck.nemesis.clock`) does not raise
    it, because the reference backends judge expiry by the store's clock, and
    a backend that trusts the worker's clock instead is exactly what the
    checker should then report.
    """
    return 2.0 * abs(float(max_server_skew_ms))


def make_clock_store(ctx: FaultContext, rng: random.Random) -> Fault | None:
    """The catalogue's ``clock-store``: the store's clock skewed by up to ±``store_skew_ms``."""
    server = ctx.server
    if not isinstance(server, SkewableServer):
        return None
    return server.clock_fault(rng.uniform(-1, 1) * ctx.store_skew_ms)
