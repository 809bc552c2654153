"""Linearizability search: Wing & Gong's algorithm with Lowe's improvements.

This is the general fallback, the same algorithm Porcupine runs: walk the
history's call/return entries, try to linearize each pending call, backtrack at a
return whose op is not yet linearized, and memoise every (linearized set, state
set) already explored. The model is run over *sets* of states (power-set
construction), because an indeterminate claim may have taken any of several
epochs. Ops whose outcome is unknown (``info``) have no return entry: they may
be linearized at any point after their invoke, or never.

Nodes are independent (P-compositionality), so the caller searches one node's
ops at a time. A deadline turns a search that runs too long into ``None``
(unknown) rather than a hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from leasecheck.histories import Op

Step = Callable[[Any, Op], list[Any]]


@dataclass(slots=True)
class SearchResult:
    """``ok`` is True (linearizable), False (not) or None (out of budget).

    On False, ``stuck`` is the op whose return could not be passed at the
    deepest point the search reached, and ``prefix`` the ops linearized then.
    """

    ok: bool | None
    stuck: Op | None = None
    prefix: list[Op] = field(default_factory=list)
    explored: int = 0


class _Link:
    """A place in the doubly linked entry list: the head has only a successor."""

    __slots__ = ("next",)

    def __init__(self) -> None:
        self.next: _Entry | None = None


class _Entry(_Link):
    """A call or return of one op; lifted out of the list while its op is linearized."""

    __slots__ = ("id", "is_call", "match", "op", "prev")

    def __init__(self, op: Op, id_: int, is_call: bool) -> None:
        super().__init__()
        self.op = op
        self.id = id_
        self.is_call = is_call
        self.match: _Entry | None = None
        #: every entry has a predecessor once linked (the head at least)
        self.prev: _Link = self


def _build(ops: Sequence[Op]) -> tuple[_Link, int]:
    """The entry list (calls before returns at equal times: equal times are concurrent)."""
    items: list[tuple[int, int, int, _Entry]] = []
    required = 0
    for i, op in enumerate(ops):
        call = _Entry(op, i, True)
        items.append((op.invoke_time, 0, i, call))
        if op.complete_time is not None:
            ret = _Entry(op, i, False)
            call.match = ret
            items.append((op.complete_time, 1, i, ret))
            required += 1
    items.sort(key=lambda t: (t[0], t[1], t[2]))
    head = _Link()
    prev = head
    for *_, e in items:
        prev.next = e
        e.prev = prev
        prev = e
    return head, required


def _lift(e: _Entry) -> None:
    e.prev.next = e.next
    if e.next is not None:
        e.next.prev = e.prev
    m = e.match
    if m is not None:
        m.prev.next = m.next
        if m.next is not None:
            m.next.prev = m.prev


def _unlift(e: _Entry) -> None:
    m = e.match
    if m is not None:
        m.prev.next = m
        if m.next is not None:
            m.next.prev = m
    e.prev.next = e
    if e.next is not None:
        e.next.prev = e


def search(ops: Sequence[Op], initial: Hashable, step: Step, deadline: float | None = None) -> SearchResult:
    """Is there a linearization of ``ops`` (one object's ops) under ``step``?

    ``ops`` are ok ops (must be linearized) and info ops (may be); failed ops
    did not happen and must not be passed in. ``step(state, op)`` returns the
    list of possible next states, empty when ``op`` cannot happen in ``state``.
    """
    head, required = _build(ops)
    states: frozenset[Any] = frozenset([initial])
    linearized = 0
    remaining = required
    stack: list[tuple[_Entry, frozenset[Any], int, int]] = []
    cache: set[tuple[int, frozenset[Any]]] = set()
    best_depth = -1
    best: SearchResult = SearchResult(False)
    entry = head.next
    explored = 0
    while remaining > 0:
        explored += 1
        if deadline is not None and (explored & 1023) == 0 and time.monotonic() > deadline:
            return SearchResult(None, explored=explored)
        if entry is not None and entry.is_call:
            op = entry.op
            nxt: set[Any] = set()
            for s in states:
                nxt.update(step(s, op))
            if nxt:
                new_lin = linearized | (1 << entry.id)
                new_states = frozenset(nxt)
                key = (new_lin, new_states)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, states, linearized, remaining))
                    states, linearized = new_states, new_lin
                    if entry.match is not None:
                        remaining -= 1
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
            continue
        # a return whose op is not linearized (or the end): this branch is dead
        if len(stack) > best_depth:
            best_depth = len(stack)
            best = SearchResult(
                False,
                stuck=entry.op if entry is not None else None,
                prefix=[e.op for e, _, _, _ in stack],
            )
        if not stack:
            best.explored = explored
            return best
        top, states, linearized, remaining = stack.pop()
        _unlift(top)
        entry = top.next
    return SearchResult(True, explored=explored)
