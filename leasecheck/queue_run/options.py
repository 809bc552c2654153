"""What a queue run is asked to do (:class:`QueueOptions`); it gives back a run's one result (:class:`~leasecheck.frame.ending.RunResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leasecheck.targets.durability import DEFAULT_PROFILE
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
    #: stop the test at the first anomaly the live check proves (like ``run --fail-fast``)
    fail_fast: bool = False
    #: seconds between two checks of the history so far (0: none, the history is checked at the end only)
    live_every_s: float = 2.0
    #: the broker's durability profile (Redis, Postgres: :mod:`leasecheck.targets.durability`), as ``run --store-config``
    store_config: str = DEFAULT_PROFILE
