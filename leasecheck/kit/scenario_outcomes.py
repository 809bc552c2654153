"""What a conformance scenario found, and how it words and compares what the store answered.

Every scenario module judges with these: :class:`Result` (did the promise hold,
and the evidence), the refusals that mean "superseded", a lease and an answer in
words, and the two questions a scenario asks of leases.

A lease is judged by what it is, a :class:`Lease` the store granted, never by
the shape of its name: a fenced backend names it by an integer epoch, an
unfenced one by an opaque token (``epoch`` None). Where a scenario compares two
leases it asks :func:`supersedes`, which compares epochs when there are epochs
and otherwise only asks for a different token: an unfenced backend orders its
leases by grant time alone, as the checker does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leasecheck.histories.vocabulary import RUNNING, Refusal
from leasecheck.targets.base import Lease, NodeState, Outcome, Refused


@dataclass
class Result:
    """A scenario's outcome: did the promise hold, and what was seen."""

    scenario: str
    held: bool
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)


#: what a store may answer a lease that lost its node to a newer claim: each means "not applied,
#: and not yours any more", and which one a backend gives is its own business (a fenced store
#: knows the lease is stale; a token store may only see that this token's lease ran out)
SUPERSEDED_REFUSALS: frozenset[Refusal] = frozenset({"stale", "expired", "not-owner"})


def lease_name(lease: Lease) -> str:
    """A lease in words: its epoch, or its token when the backend has no fencing token."""
    return f"epoch {lease.epoch}" if lease.epoch is not None else f"token {lease.token!r}"


def said(outcome: Lease | Outcome) -> str:
    """What the store answered, in words: ``granted epoch 3``, ``refused held``, ``ok``."""
    if isinstance(outcome, Lease):
        return f"granted {lease_name(outcome)}"
    if isinstance(outcome, Refused):
        return f"refused {outcome.reason}" + (f" ({outcome.message})" if outcome.message else "")
    return "ok"


def supersedes(new: Lease, old: Lease) -> bool:
    """Is ``new`` a later lease than ``old``, as the backend can show it?

    Fenced: a strictly larger epoch. Unfenced (no epochs on either): another
    token, since grant order is all a token store has. One of each is a
    backend that fences only sometimes, which nothing can order.
    """
    if new.epoch is not None and old.epoch is not None:
        return new.epoch > old.epoch
    if new.epoch is None and old.epoch is None:
        return new.token is not None and new.token != old.token
    return False


def holds(state: NodeState, lease: Lease) -> bool:
    """Does a read show ``lease`` as the node's running lease (by every field the read gives)?"""
    if state.status != RUNNING or state.owner != lease.owner:
        return False
    if lease.epoch is not None:
        return state.epoch == lease.epoch
    return state.token is None or state.token == lease.token
