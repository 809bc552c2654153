"""Worker-clock faults: step (bump) or flip (strobe) one worker's wall clock; heal resets it to the host's.

They move the shared-memory clocks of :mod:`leasecheck.nemesis.worker_clocks`.
Worker-clock skew exists to catch backends that wrongly trust the worker's
clock (``leasecheck.targets.broken_postgres.ClientClockPostgres``): the reference
backends judge expiry by the store's clock, so unlike a store skew
(:mod:`leasecheck.nemesis.store_clock`) it never raises the history's
``clock_uncertainty_ms``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from leasecheck.nemesis.context import FaultContext, Worker
from leasecheck.nemesis.worker_clocks import ClockControl, Key, reset_record


def _names(victims: Sequence[Key], processes: Sequence[int] | None) -> dict[str, Any]:
    """The ``victims`` of a nemesis event: the history's process numbers when known, else the clock keys."""
    if processes is None:
        return {"victims": list(victims)}
    return {"victims": list(processes), "clocks": list(victims)}


class _ResetsClocks:
    """Heal for every worker-clock fault: reset the victims' clocks to 0 (once)."""

    clocks: ClockControl
    victims: Sequence[Key]
    processes: Sequence[int] | None
    active: bool

    def heal(self) -> dict[str, Any] | None:
        if not self.active:
            return None
        self.active = False
        for victim in self.victims:
            self.clocks.reset(victim)
        return _names(self.victims, self.processes)

    def undo_record(self) -> dict[str, Any] | None:
        return reset_record(self.clocks, self.victims) if self.active else None


@dataclass
class ClockBump(_ResetsClocks):
    """Step the victims' clocks by ``delta_ms`` (an NTP step, a VM restored from a snapshot); heal resets them to 0.

    ``victims`` are clock keys (the runner's worker slots); ``processes``
    optionally names the same workers by their history process numbers, for
    the event's value.
    """

    clocks: ClockControl
    victims: Sequence[Key]
    delta_ms: float
    processes: Sequence[int] | None = None
    name: str = "clock-bump"
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        for victim in self.victims:
            self.clocks.bump(victim, self.delta_ms)
        self.active = True
        return {**_names(self.victims, self.processes), "delta_ms": self.delta_ms}


@dataclass
class ClockStrobe(_ResetsClocks):
    """Flip the victims' clocks between +``delta_ms`` and their offset every ``period_ms`` for ``duration_s``.

    A clock that keeps jumping back and forth (a flapping time source) breaks
    code that measures intervals with the wall clock. Heal stops it and resets
    the clocks to 0.
    """

    clocks: ClockControl
    victims: Sequence[Key]
    delta_ms: float
    period_ms: float
    duration_s: float
    processes: Sequence[int] | None = None
    name: str = "clock-strobe"
    active: bool = field(default=False)

    def start(self) -> dict[str, Any]:
        for victim in self.victims:
            self.clocks.strobe(victim, self.delta_ms, self.period_ms, self.duration_s)
        self.active = True
        return {
            **_names(self.victims, self.processes),
            "delta_ms": self.delta_ms, "period_ms": self.period_ms, "duration_s": self.duration_s,
        }


def _victim(ctx: FaultContext, rng: random.Random) -> tuple[ClockControl, Worker, float] | None:
    """A ready worker whose clock no fault moves now (a heal resets it to 0), and a delta of ±2-10 ttl.

    The first clock fault of a run goes the way the seed draws, and each next one the other way from the one before:
    a clock ahead and a clock behind catch different bugs (a lease stolen early; a claim that judges a recent holder's
    lease by a lagging clock), and a 30 s run has only four to six clock faults to draw both from, so each direction
    gets half of them (a run of random signs left some seeds one short window behind, and the lagging clock's
    situation a count of 0 or 1)."""
    clocks = ctx.clocks
    if clocks is None:
        return None
    victim = ctx.pick_holder(rng, lambda w: not clocks.is_skewed(w.slot))  # its renews then carry the skew
    if victim is None:
        return None
    sign = rng.choice((-1, 1))
    if clocks.directions:
        sign = -clocks.directions[-1]
    return clocks, victim, sign * rng.uniform(2, 10) * ctx.ttl_ms


def make_clock_bump(ctx: FaultContext, rng: random.Random) -> ClockBump | None:
    """The catalogue's ``clock-bump``: one worker's clock stepped by ±2-10 ttl."""
    aim = _victim(ctx, rng)
    if aim is None:
        return None
    clocks, victim, delta = aim
    return ClockBump(clocks, [victim.slot], delta, processes=[victim.process])


def make_clock_strobe(ctx: FaultContext, rng: random.Random) -> ClockStrobe | None:
    """The catalogue's ``clock-strobe``: one worker's clock flipping by ±2-10 ttl every 10-100 ms for 3 ttl."""
    aim = _victim(ctx, rng)
    if aim is None:
        return None
    clocks, victim, delta = aim
    return ClockStrobe(clocks, [victim.slot], delta, rng.uniform(10, 100), ctx.ttl_s(3), processes=[victim.process])
