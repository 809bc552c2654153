"""A node's leases as the named checks see them: an epoch that is a number, which claim an unfenced op used, when a lease was given back.

Why its own module: the stale checks (:mod:`leasecheck.checker.kinds_stale`)
and the timing checks (:mod:`leasecheck.checker.kinds_timing`) ask these same
questions of a node's ops, on fenced and unfenced nodes alike; written once,
each family answers them the same way.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from leasecheck.checker.model import freeze
from leasecheck.histories import Op


def int_epoch(op: Op) -> bool:
    """Does ``op`` name an epoch (a fenced lease's), rather than none?"""
    return type(op.epoch) is int


def first_releases(ops: list[Op], lease: Callable[[Op], Any]) -> dict[Any, int]:
    """When each lease (named by ``lease(op)``) was given back at the earliest: the first
    invoke of an ok or info release of it (an info release may take effect at once)."""
    released: dict[Any, int] = {}
    for op in ops:
        if op.f == "release" and op.type in ("ok", "info"):
            k = lease(op)
            released[k] = min(released.get(k, op.invoke_time), op.invoke_time)
    return released


class TokenLeases:
    """Unfenced leases by token: which ok claim an op with a token belongs to.

    Some libraries reuse a token (a client id) for every lease of one worker, so
    an op belongs to the latest claim of its token invoked before it.
    """

    def __init__(self, ops: list[Op]) -> None:
        self.claims = sorted((o for o in ops if o.type == "ok" and o.f == "claim"), key=lambda o: o.invoke_time)
        self._by_token: dict[object, list[Op]] = defaultdict(list)
        for c in self.claims:
            self._by_token[freeze(c.result.get("token"))].append(c)
        self._starts = {t: [c.invoke_time for c in cs] for t, cs in self._by_token.items()}

    def of(self, op: Op) -> Op | None:
        """The claim whose lease ``op`` (renew, effect, commit, release) used."""
        tok = freeze(op.value.get("token"))
        starts = self._starts.get(tok)
        if not starts:
            return None
        i = bisect_left(starts, op.invoke_time) - 1
        return self._by_token[tok][max(i, 0)]
