"""A node's leases as the named checks see them: an epoch that is a number, which claim an op used, when a lease was given back.

Why its own module: the stale checks (:mod:`leasecheck.checker.kinds_stale`)
and the timing checks (:mod:`leasecheck.checker.kinds_timing`) ask these same
questions of a node's ops, on fenced and unfenced nodes alike; written once,
each family answers them the same way.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from leasecheck.checker.model import freeze
from leasecheck.histories import Op


def int_epoch(op: Op) -> bool:
    """Does ``op`` name an epoch (a fenced lease's), rather than none?"""
    return type(op.epoch) is int


def completed(op: Op) -> int:
    """When an op that completed (an ok one) completed."""
    assert op.complete_time is not None
    return op.complete_time


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


class GrantLeases:
    """Fenced leases named by their grant (the ok claim), not by their epoch alone: which ok claim an op used.

    Only asked on a node whose epochs repeat or go back (a ``duplicate-epoch`` or
    ``epoch-regression``), where one epoch may name several grants. An op (renew,
    effect, commit, release) belongs to the latest ok claim granting its epoch that
    completed before the op's invoke, of those its own process made if any, else of
    all (as :mod:`leasecheck.checker.coverage` names leases): a worker acts on the
    lease it was granted, and of grants it did not make the latest is the benefit
    of the doubt (the fewest grants come after it).
    """

    def __init__(self, claims: list[Op]) -> None:
        """``claims``: the node's ok claims with an integer epoch."""
        #: in completion order (ties: by index)
        self.claims = sorted(claims, key=lambda o: (completed(o), o.index))
        self._done = [completed(c) for c in self.claims]
        self._by_epoch: dict[object, list[Op]] = defaultdict(list)
        for c in self.claims:
            self._by_epoch[c.epoch].append(c)
        self._epoch_done = {e: [completed(c) for c in cs] for e, cs in self._by_epoch.items()}

    def of(self, op: Op) -> Op | None:
        """The ok claim whose lease ``op`` used; None if no ok claim of its epoch completed before its invoke."""
        cs = self._by_epoch.get(op.epoch)
        if not cs:
            return None
        i = bisect_left(self._epoch_done[op.epoch], op.invoke_time)  # cs[:i] completed before the op's invoke
        for c in reversed(cs[:i]):
            if c.process == op.process:
                return c
        return cs[i - 1] if i else None

    def newer(self, lease: Op, op: Op) -> Op | None:
        """The first to complete (ties: the lower index) of the ok claims invoked after ``lease`` completed and
        completed before ``op``'s invoke: a grant made after the lease's, before the op; None if there is none."""
        granted = completed(lease)
        start = bisect_right(self._done, granted)  # a claim invoked after it also completed after it
        end = bisect_left(self._done, op.invoke_time)
        for c in self.claims[start:end]:
            if c.invoke_time > granted:
                return c
        return None
