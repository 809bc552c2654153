"""A fault window as the checker reads it: when a fault was active, and which processes it hit.

Which nemesis events make a window is the fault catalogue's business, so the
caller's (:func:`leasecheck.verdict.run_verdict.fault_windows`); the checker
only takes the windows it is given. They live apart from coverage because
others read them too: the splitting of a big history hands them to every
partition, and the run report draws them as bands.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from leasecheck.histories.format import Event

INF = math.inf


#: a window's role: its cluster lost the primary at its start (killed, paused, isolated, failed over)
PRIMARY_LOST = "primary-lost"
#: a window's role: its store (or members) lost power at its start, every write never fsynced dropped, and started again
#: at its end (``power-loss``, ``power-loss-member``, ``power-loss-all``)
POWER_LOST = "power-lost"
#: a window's role: links between the cluster's members were cut throughout it
MEMBER_PARTITION = "member-partition"
#: a window's role: it set its victims' clocks behind the host's (a worker-clock fault with a negative delta)
CLOCK_BEHIND = "clock-behind"
#: a window's role: it stopped its victims (a worker ``pause``, SIGSTOP) at its start, or killed them (``kill``);
#: counted by :mod:`leasecheck.checker.coverage_inside`, never as a clock fault
PAUSED = "paused"
KILLED = "killed"
#: how long before its event's stamp a fault may already act, ns: the nemesis acts, then records (well under a ms; a
#: few ms when the harness's threads contend for the interpreter). A window's moments that bound a proof from above
#: (its end, a strobe's flip back to the true time) are trusted only this long before the stamp says
EVENT_LAG_NS = 5_000_000


@dataclass(frozen=True, slots=True)
class Skew:
    """What a worker-clock fault did to its victims' clocks (from its start event's value).

    A step (``clock-bump``) moved them by ``delta_ms`` for the whole window; a strobe (``clock-strobe``, ``period_ms``
    above 0) flipped them between ``delta_ms`` (first) and the true time every ``period_ms``, for ``duration_s``.
    """

    delta_ms: float
    period_ms: float = 0.0
    duration_s: float = 0.0


def skew_of(value: object) -> Skew | None:
    """The :class:`Skew` a worker-clock fault's start event names (None: it names no ``delta_ms``)."""
    if not isinstance(value, dict):
        return None
    delta, period, duration = value.get("delta_ms"), value.get("period_ms", 0.0), value.get("duration_s", 0.0)
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in (delta, period, duration))
    return Skew(float(delta), float(period), float(duration)) if numbers else None  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Window:
    """A fault active from ``start`` to ``end`` (ns; None: never healed), hitting ``victims`` (process numbers).

    ``roles`` say what a cluster fault's window means to the situations (:data:`PRIMARY_LOST`,
    :data:`MEMBER_PARTITION`); the caller, who knows the faults, sets them.
    """

    start: int
    end: int | None = None
    victims: frozenset[int] = frozenset()
    roles: frozenset[str] = frozenset()
    #: a worker-clock fault's skew (None: another fault, or an event that names none)
    skew: Skew | None = None

    @property
    def until(self) -> float:
        return INF if self.end is None else self.end

    def behind_throughout(self, start: int, end: int) -> float:
        """How far behind the true time (ns) this window surely held its victims' clocks throughout [start, end]: its
        skew's, when the interval lies inside the window and, for a strobe, inside one of its behind half-periods; else 0.

        Surely: the fault acted at most :data:`EVENT_LAG_NS` before each event's stamp, so the window (and a strobe's
        phases) may begin that much earlier than the stamps say, never later; what ends a behind stretch is trusted
        only that long before the stamp's reckoning."""
        skew = self.skew
        if skew is None or skew.delta_ms >= 0 or start < self.start or end >= self.until - EVENT_LAG_NS:
            return 0.0
        if skew.period_ms > 0:
            period = skew.period_ms * 1e6
            if end >= self.start + skew.duration_s * 1e9 - EVENT_LAG_NS:
                return 0.0  # the strobe was over (the clock back at the true time) by then, or may have been
            k = (start - self.start) // period
            if k % 2 or end >= self.start + (k + 1) * period - EVENT_LAG_NS:
                return 0.0  # the true time's half-period, or one that may have begun before the interval ended
        return -skew.delta_ms * 1e6


#: windows(nemesis events) -> (store-side fault windows, worker-clock fault windows)
WindowsOf = Callable[[Sequence[Event]], tuple[Sequence[Window], Sequence[Window]]]
