"""Aiming a pause or kill *inside* ops: the nemesis arms kinds of op, workers hold them between round trips.

Why: a claim lasts a few milliseconds, so a pause that picks its moment by
luck falls between ops nearly always (16 of 17 in issue 34), and a claim that is
not atomic (read, decide, write) is never stopped in its middle. So the fault
does not pick a moment, it waits for one. Per fault, the nemesis draws (by the
schedule's seeded generator) the kinds of op to land in (:func:`choose`): in a
run with a coverage goal every kind it has landed in fewer times than the goal,
else up to :data:`VICTIMS` of those it has landed in least, and for each which round-trip
boundary (the first, second ... request of the op gone out, the next not sent),
and arms them together in shared memory (:class:`~leasecheck.machine.aim_slot.AimSlot`). The next worker to
invoke an op of an armed kind runs it under a hook (:mod:`leasecheck.run.holds`)
that, after each request the adapter sends to its store (an SQLite statement, a
socket send, a psycopg execute), tells the harness which boundary it is at, and
at the armed one holds the op there for ``hold_ms``. The harness passes each
word on as it comes (:class:`Aiming`, :mod:`leasecheck.frame.aiming`); the fault
stops that worker during the hold (between two round trips of the op, or between
a request and its reply), then waits for the next, and acts once it has its
victims (up to :data:`VICTIMS`) or the wait is over: one fault, several victims,
each inside an op of another kind. Arming every short kind at once, not the
rarest three: a release or a read comes by a few times a ttl, and an aim that
armed only the rarest waited its whole second for them while the claims and
renews it also needed went by (a default gate: 14 of 31 aims came back empty). A worker holds one op per aim, so the victims are distinct workers.
A stop that lands after the hold ran out (the harness gathers its victims one by
one, and on a loaded machine a 50 ms hold can end first) claims no op: the worker
marks its holds (:class:`~leasecheck.machine.aim_slot.HoldMark`), and the fault
reads the mark once the worker is stopped.

An op that ends before the drawn boundary (a refused claim makes fewer requests
than a granted one) is held after its last reply instead, before its completion
is stamped: still inside its recorded interval, and its event says so
(``"after_last_reply"``). The recorded interval always contains the real one:
the worker stamps its invoke before the first request and its completion after
the last reply and after any hold. What the fault landed in is its nemesis
event's ``"inside"`` list (:meth:`InFlight.to_json`, one entry per victim); the
history alone says whether it did (``paused-inside-OP``,
:mod:`leasecheck.checker.coverage_inside`).

The slot is a few bytes in a file both sides map (:mod:`leasecheck.machine.aim_slot`):
a worker reads it at every invoke for about a microsecond, without a system call.

A job queue's task is aimed *before* its write instead (an :class:`Aiming` whose
ops have no boundaries: :attr:`InFlight.before`): after its heartbeat, before the
write's invoke is stamped, the moment a pause makes a zombie of it (its next
attempt starts elsewhere while it sleeps, and it writes first thing on waking). A
hold inside that write would keep the resource's one writer's lock from the
newer attempt, so no zombie could ever show.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS

#: the fewest workers an aimed fault leaves running (further victims of one fault; the first too, for an aiming that
#: holds ops before their invoke: :attr:`Aiming.before`), so the run still contends
MIN_RUNNING = 2
#: the most workers one fault stops inside ops (one per kind of op): a pause or kill of several workers, each in
#: another kind of op, reaches every ``paused-inside-OP`` in a few faults rather than one per fault
VICTIMS = 3
#: the most kinds armed at once: every kind of op there is (the slot, :mod:`leasecheck.machine.aim_slot`, has room)
SLOTS = len(INSIDE_FUNCTIONS)
#: how long an armed worker holds its op at the boundary, ms (drawn per arm): long enough for the word to reach the
#: nemesis and its signal to land (a few ms on a loaded machine), short beside a lease
HOLD_MS = (30.0, 80.0)
#: the share of pauses aimed inside ops once no kind is short of a goal or of what the run requires: the rest stop a
#: worker between ops that holds a lease, the zombie in the making. A stop inside an op of a store with one writer's
#: lock (SQLite: every write is a transaction that holds it) freezes every other worker's write for the whole pause,
#: so no rival can take the lease over and no zombie is ever made: TtlOnlySqlite under five 1-second pauses came out
#: valid on 2 seeds of 6 when every pause aimed inside (ci, seed 1 of the plugin's expect-invalid test)
PAUSE_INSIDE_SHARE = 0.5


@dataclass(frozen=True)
class InFlight:
    """An op an aim landed in: its worker's process, its kind, its invoke's time and the boundary it is held at."""

    process: int
    f: str
    #: the invoke's history time, ns (with ``process`` it names the op in the history)
    invoked: int
    #: requests of the op gone out to the store when it was held (the stop lands after the ``boundary``-th); 0: held
    #: before the op (a job queue's task, after its heartbeat and before its write's invoke, :attr:`before`)
    boundary: int
    hold_ms: float
    #: held after its last reply (it ended before the drawn boundary), before its completion was stamped
    last: bool = False

    @property
    def before(self) -> bool:
        """Held before the op was invoked (its ``invoked`` is the hold's start): the fault lands between ops."""
        return self.boundary == 0

    def to_json(self) -> dict[str, Any]:
        """One entry of the fault's nemesis event's ``"inside"`` list (``"before"`` for an op held before its invoke):
        what it aimed at, and how the aim was made to land."""
        if self.before:
            return {"f": self.f, "process": self.process, "held_at": self.invoked, "held_ms": round(self.hold_ms, 1),
                    "how": "held by the task after its heartbeat, before its write's invoke was stamped"}
        how = ("held by the worker after its last reply, before its completion was stamped" if self.last
               else "held by the worker between round trips")
        return {"f": self.f, "process": self.process, "invoked": self.invoked, "after_requests": self.boundary,
                "held_ms": round(self.hold_ms, 1), "how": how}


@dataclass(frozen=True)
class Aim:
    """One arm of a fault's draw: the kind of op, the boundary and the hold."""

    f: str
    at: int
    hold_ms: float


class Aiming(Protocol):
    """The harness's side of an aim (:class:`leasecheck.frame.aiming.Aimer`), as a fault factory sees it."""

    #: the op kinds this run's workers do (``read-resource`` only when the target reads its resource)
    @property
    def ops(self) -> tuple[str, ...]: ...

    #: the run's coverage goal, as a count per kind of op and fault (None: the run has none)
    @property
    def want(self) -> int | None: ...

    #: its ops are held before their invoke (a job queue's task, :attr:`InFlight.before`): then every pause aims, one
    #: whose aim found nothing waits for the next tick (a pause anywhere else meets the library's heartbeat check and
    #: tests nothing the task's own stalls do not), and none stops a worker unless :data:`MIN_RUNNING` others run on
    #: (a pause that waits for its job to run again, :meth:`outlast`, leaves workers to run it)
    @property
    def before(self) -> bool: ...

    def landed(self, fault: str) -> Counter[str]:
        """How many times ``fault`` has landed inside each kind of op so far (a live count: the caller adds to it)."""

    def required(self, fault: str) -> frozenset[str]:
        """The kinds of op the run requires ``fault`` to land inside (``--require paused-inside-claim``)."""

    def boundaries(self, f: str) -> int:
        """The most request boundaries an op of kind ``f`` has shown so far (a guess before any was seen); 0: its ops
        are held before their invoke (:attr:`InFlight.before`)."""

    def outlast(self, op: InFlight) -> Callable[[], bool] | None:
        """What a pause that landed on ``op`` waits for past its drawn end: True while it still waits (a job queue's
        task held before its write: until its job's next execution has begun); None: its drawn duration, no more."""

    def holding(self, pid: int) -> bool:
        """Is the worker ``pid`` still holding the op it came with? Asked once it is stopped: on a loaded machine a hold
        may run out before the stop lands, and the op it was aimed at is then over (:class:`~leasecheck.machine.aim_slot.HoldMark`)."""

    def aim(self, aims: Sequence[Aim], timeout_s: float, gather_s: float) -> Iterator[InFlight]:
        """Arm ``aims``; yield each op a worker holds for one of them, as it comes (each kind once, each worker once),
        until every one landed, ``timeout_s`` passed since arming with none landed, or ``gather_s`` since the first
        landed; disarm when done (or closed: the caller has its victims)."""


def aims_inside(aiming: Aiming | None, fault: str, rng: random.Random) -> bool:
    """Does this ``fault`` aim inside ops (:func:`choose`), or stop a worker that holds a lease between them? A kill
    always aims (a killed worker's transaction ends with it); a pause aims while a kind is short of the run's goal or
    of what it requires, else :data:`PAUSE_INSIDE_SHARE` of the time (by ``rng``: the seed's); always, for an aiming
    that holds ops before their invoke (:attr:`Aiming.before`)."""
    if aiming is None or not aiming.ops:
        return False
    if fault != "pause":
        return True
    landed, want = aiming.landed(fault), aiming.want
    if want is not None and any(landed[f] < want for f in aiming.ops):
        return True
    if any(landed[f] < 1 for f in aiming.required(fault)):
        return True
    return aiming.before or rng.random() < PAUSE_INSIDE_SHARE


def choose(aiming: Aiming, fault: str, rng: random.Random, most: int = 1) -> list[Aim]:
    """Draw the aims for ``fault``, each a different kind of op: with a coverage goal (:attr:`Aiming.want`), every kind
    it has landed inside fewer times than the goal; else (or once none is short) the ``most`` it has landed inside
    least. A kind the run requires it to land inside and it has not yet comes first, then landed least first, ties
    broken by ``rng``; each with a boundary among those its ops have shown (0, before the op, for a kind that has
    none: :meth:`Aiming.boundaries`), and a hold. The draws are as many whatever ``most``, so the later ones follow the seed."""
    ops: Sequence[str] = aiming.ops
    if not ops:
        return []
    landed, want, required = aiming.landed(fault), aiming.want, aiming.required(fault)
    draws = {f: (rng.random(), rng.random(), rng.uniform(*HOLD_MS)) for f in ops}
    kinds = sorted(ops, key=lambda f: (not (f in required and landed[f] < 1), landed[f], draws[f][0]))
    short = [f for f in kinds if want is not None and landed[f] < want]
    return [Aim(f, _boundary(draws[f][1], aiming.boundaries(f)), draws[f][2]) for f in short or kinds[:max(1, most)]]


def _boundary(draw: float, boundaries: int) -> int:
    """One of ``boundaries`` request boundaries (1 to it), by ``draw`` in [0, 1); 0 (before the op) when there are none."""
    return 1 + int(draw * boundaries) if boundaries else 0
