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
#: a window's role: links between the cluster's members were cut throughout it
MEMBER_PARTITION = "member-partition"
#: a window's role: it set its victims' clocks behind the host's (a worker-clock fault with a negative delta)
CLOCK_BEHIND = "clock-behind"
#: a window's role: it stopped its victims (a worker ``pause``, SIGSTOP) at its start, or killed them (``kill``);
#: counted by :mod:`leasecheck.checker.coverage_inside`, never as a clock fault
PAUSED = "paused"
KILLED = "killed"


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

    @property
    def until(self) -> float:
        return INF if self.end is None else self.end


#: windows(nemesis events) -> (store-side fault windows, worker-clock fault windows)
WindowsOf = Callable[[Sequence[Event]], tuple[Sequence[Window], Sequence[Window]]]
