"""History → the ``paused-inside-OP`` and ``killed-inside-OP`` situations: a worker stopped or killed mid-op.

Why they are counted at all: an adapter's operation may be several round trips
(a lock, then a counter, then a record), and a claim that is not atomic is
exposed only when its worker stops *between* them, while another worker claims.
A pause that falls between ops (most of them, left to luck: a claim lasts a few
ms) tests none of that, so a run says how often a stop landed inside each kind of op.

Definitions (times are the history's ``time``, ns). A *stop window* is a worker
``pause`` or ``kill`` window (role :data:`~leasecheck.checker.windows.PAUSED` or
:data:`~leasecheck.checker.windows.KILLED`, made from the nemesis events by the
caller who knows the catalogue) starting at S and naming its victims. An op of a
victim process is *inside* it when it was invoked before S (``< S``) and did not
complete before S: its completion is at or after S, or it is ``info`` (never
completed, or completed ``info``: its interval runs to the end of the history, as
the reader has it, since it may take effect at any later time; the harness records
a killed worker's open op ``info`` the moment it sees the death, which may come
just before the kill's own event is stamped). Sound because the fault's event is
stamped once it acted (the worker stopped or dead), and a stopped worker stamps
nothing: an op invoked before S was invoked before the stop, and one completed at
or after S completed after it.

Each (window, op) pair counts once: the situation ``paused-inside-F`` or
``killed-inside-F``, F the op's ``f``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from leasecheck.checker.windows import KILLED, PAUSED, Window
from leasecheck.histories import Op
from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS

#: a stop window's role -> the fault (nemesis event) whose situations it counts
_FAULT_OF_ROLE = {PAUSED: "pause", KILLED: "kill"}
_SITUATION = {(role, f): f"{word}-inside-{f}" for role, word in ((PAUSED, "paused"), (KILLED, "killed"))
              for f in INSIDE_FUNCTIONS}


def is_stop(window: Window) -> bool:
    """Is ``window`` a worker pause's or kill's (counted here, not as a clock fault)?"""
    return bool(window.roles & _FAULT_OF_ROLE.keys())


def split_stops(windows: Sequence[Window]) -> tuple[Sequence[Window], Sequence[Window]]:
    """(the other windows, the stop windows) of the worker-side windows a caller hands the coverage."""
    if not any(is_stop(w) for w in windows):
        return windows, ()
    return [w for w in windows if not is_stop(w)], [w for w in windows if is_stop(w)]


@dataclass
class Stops:
    """The stop windows by victim: (start, role) pairs, so that a node's ops are matched in a lookup each."""

    by_process: dict[int, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, windows: Iterable[Window]) -> Stops:
        stops = cls()
        for w in windows:
            role = PAUSED if PAUSED in w.roles else KILLED if KILLED in w.roles else None
            if role is None:
                continue
            for victim in w.victims:
                stops.by_process[victim].append((w.start, role))
        return stops

    def count(self, ops: Iterable[Op], counts: Counter[str]) -> None:
        """Add each op's stops that landed inside it (see the module's definitions) to ``counts``."""
        if not self.by_process:
            return
        for op in ops:
            starts = self.by_process.get(op.process)
            if not starts:
                continue
            for start, role in starts:
                if op.invoke_time < start and _open_at(op, start):
                    counts[_SITUATION[role, op.f]] += 1


def _open_at(op: Op, start: int) -> bool:
    """Was ``op`` (invoked before ``start``) still in flight at ``start``? (an ``info`` op has no completion time)"""
    return op.complete_time is None or op.complete_time >= start
