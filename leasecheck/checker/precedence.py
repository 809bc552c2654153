"""Real-time precedence queries: "of these ops, which completed before time t?"

docs/contracts/anomaly-kinds.md's "A before B" is ``A.complete_time < B.invoke_time``. Most anomaly
checks ask, for many ops B, for the op with the greatest epoch (or block) among
all ops before B. Sorting by completion time once and keeping a running
maximum answers each such question with one binary search: O(n log n) overall.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any, cast

from leasecheck.histories import Op

_DONE = attrgetter("complete_time")


class MaxBefore:
    """Answers ``query(t)``: the op with the greatest key among those completed before ``t``.

    Ties go to the op that completed first. Ops that never completed (info) are
    never before anything and must not be passed in.
    """

    __slots__ = ("_keys", "_ops", "_times")

    def __init__(self, ops: Iterable[Op], key: Callable[[Op], Any]) -> None:
        ordered = sorted(ops, key=_DONE)  # linear when already in completion order
        # every op passed in completed (see above), so every time is an int
        self._times = cast(list[int], [op.complete_time for op in ordered])
        keys: list[Any] = []
        best: list[Op] = []
        self._keys, self._ops = keys, best
        best_key: Any = None
        best_op: Op | None = None
        for op in ordered:
            k = key(op)
            if best_op is None or k > best_key:
                best_key, best_op = k, op
            keys.append(best_key)
            best.append(best_op)

    def query(self, t: int) -> tuple[Any, Op | None]:
        """(greatest key, its op) among ops completed strictly before ``t``; (None, None) if none."""
        i = bisect_left(self._times, t)
        if i == 0:
            return None, None
        return self._keys[i - 1], self._ops[i - 1]


def before(a: Op, b: Op) -> bool:
    """docs/contracts/anomaly-kinds.md: A completed (ok or fail) strictly before B was invoked."""
    return a.complete_time is not None and a.complete_time < b.invoke_time
