"""What a queue run is asked to do (:class:`QueueOptions`) and what it gives back (:class:`QueueResult`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leasecheck.checker import Verdict
from leasecheck.exits import Exit, interrupted
from leasecheck.targets.queues.base import Mode


@dataclass(frozen=True)
class QueueOptions:
    """What one queue run does (``leasecheck audit`` fills it from a library's plan)."""

    library: str
    mode: Mode = "documented"
    seed: int = 1
    nemesis: tuple[str, ...] = ()
    time_limit: float = 20.0
    #: after how long the library judges a silent execution lost (its timeouts are scaled to it)
    ttl_ms: int = 2000
    workers: int = 3
    #: the chance that a job's first execution stalls past the library's timeout
    stall_rate: float = 0.5
    nemesis_interval: float = 4.0
    store: str = "store"
    #: settings of the library's adapter (QueueConfig.options)
    options: dict[str, Any] = field(default_factory=dict)
    #: coverage situations the run must reach (like ``run --require``)
    require: tuple[str, ...] = ()


@dataclass
class QueueResult:
    run_dir: Path
    seed: int
    verdict: Verdict
    reason: str | None
    stats: dict[str, Any]
    #: the signal that cut the run short (SIGINT, SIGTERM), or None
    interrupted: signal.Signals | None = None

    @property
    def exit_code(self) -> int:
        """docs/contracts/exit-codes.md: an anomaly is 1 whatever happened; a run cut short is 128 + the signal."""
        valid = self.verdict.valid
        if valid is False:
            return int(Exit.INVALID)
        if self.interrupted is not None:
            return interrupted(self.interrupted)
        return int(Exit.VALID if valid is True else Exit.UNKNOWN)
