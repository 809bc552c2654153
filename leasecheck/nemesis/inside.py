"""Aiming a pause or kill *inside* ops: the nemesis arms kinds of op, workers hold them between round trips.

Why: a claim lasts a few milliseconds, so a pause that picks its moment by
luck falls between ops nearly always (16 of 17 in issue 34), and a claim that is
not atomic (read, decide, write) is never stopped in its middle. So the fault
does not pick a moment, it waits for one. Per fault, the nemesis draws (by the
schedule's seeded generator) the kinds of op to land in (:func:`choose`): in a
run with a coverage goal every kind it has landed in fewer times than the goal,
else up to :data:`VICTIMS` of those it has landed in least, and for each which round-trip
boundary (the first, second ... request of the op gone out, the next not sent),
and arms them together in shared memory (:class:`AimSlot`). The next worker to
invoke an op of an armed kind runs it under a hook (:mod:`leasecheck.run.holds`)
that, after each request the adapter sends to its store (an SQLite statement, a
socket send, a psycopg execute), tells the harness which boundary it is at, and
at the armed one holds the op there for ``hold_ms``. The harness passes each
word on as it comes (:class:`Aiming`, :mod:`leasecheck.run.aiming`); the fault
stops that worker during the hold (between two round trips of the op, or between
a request and its reply), then waits for the next, and acts once it has its
victims (up to :data:`VICTIMS`) or the wait is over: one fault, several victims,
each inside an op of another kind. Arming every short kind at once, not the
rarest three: a release or a read comes by a few times a ttl, and an aim that
armed only the rarest waited its whole second for them while the claims and
renews it also needed went by (a default gate: 14 of 31 aims came back empty). A worker holds one op per aim, so the victims are distinct workers.

An op that ends before the drawn boundary (a refused claim makes fewer requests
than a granted one) is held after its last reply instead, before its completion
is stamped: still inside its recorded interval, and its event says so
(``"after_last_reply"``). The recorded interval always contains the real one:
the worker stamps its invoke before the first request and its completion after
the last reply and after any hold. What the fault landed in is its nemesis
event's ``"inside"`` list (:meth:`InFlight.to_json`, one entry per victim); the
history alone says whether it did (``paused-inside-OP``,
:mod:`leasecheck.checker.coverage_inside`).

The slot is a few bytes in a file both sides map (:mod:`mmap`), with a sequence
number around each write as :mod:`leasecheck.nemesis.worker_clocks` has it: a
worker reads it at every invoke for about a microsecond, without a system call.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS

#: the most workers one fault stops inside ops (one per kind of op): a pause or kill of several workers, each in
#: another kind of op, reaches every ``paused-inside-OP`` in a few faults rather than one per fault
VICTIMS = 3
#: the most kinds armed at once: every kind of op there is
SLOTS = len(INSIDE_FUNCTIONS)
#: seq (u64, odd while a write is in progress), the aim's serial (u32), then per arm the op's code (0: none; 1 + its
#: place in INSIDE_FUNCTIONS), the boundary to hold at (1: after the first request) and the hold (µs)
_SEQ = struct.Struct("<Q")
_SERIAL = struct.Struct("<I")
_ARM = struct.Struct("<3I")
_SIZE = _SEQ.size + _SERIAL.size + SLOTS * _ARM.size
_MAX_TRIES = 1000
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
class Arm:
    """What the slot asks of the next op of kind ``f`` (once per worker and ``serial``): hold at request boundary
    ``at`` for ``hold_s``."""

    serial: int
    f: str
    at: int
    hold_s: float


@dataclass(frozen=True)
class InFlight:
    """An op an aim landed in: its worker's process, its kind, its invoke's time and the boundary it is held at."""

    process: int
    f: str
    #: the invoke's history time, ns (with ``process`` it names the op in the history)
    invoked: int
    #: requests of the op gone out to the store when it was held (the stop lands after the ``boundary``-th)
    boundary: int
    hold_ms: float
    #: held after its last reply (it ended before the drawn boundary), before its completion was stamped
    last: bool = False

    def to_json(self) -> dict[str, Any]:
        """One entry of the fault's nemesis event's ``"inside"`` list: what it aimed at, and how the aim was made to land."""
        how = ("held by the worker after its last reply, before its completion was stamped" if self.last
               else "held by the worker between round trips")
        return {"f": self.f, "process": self.process, "invoked": self.invoked, "after_requests": self.boundary,
                "held_ms": round(self.hold_ms, 1), "how": how}


class AimSlot:
    """The shared slot: the nemesis arms and disarms it (one writer), every worker reads it."""

    def __init__(self, path: str | os.PathLike[str], create: bool = False) -> None:
        self.path = Path(path)
        if create:
            self.path.write_bytes(b"\0" * _SIZE)
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)

    def arm(self, serial: int, arms: Sequence[Aim]) -> None:
        """Arm up to :data:`SLOTS` kinds at once under one ``serial`` (a worker holds one op per serial)."""
        (seq,) = _SEQ.unpack_from(self._map, 0)
        _SEQ.pack_into(self._map, 0, seq + 1)
        _SERIAL.pack_into(self._map, _SEQ.size, serial)
        for i in range(SLOTS):
            body = (1 + INSIDE_FUNCTIONS.index(arms[i].f), arms[i].at, int(arms[i].hold_ms * 1000)) if i < len(arms) else (0, 0, 0)
            _ARM.pack_into(self._map, _SEQ.size + _SERIAL.size + i * _ARM.size, *body)
        _SEQ.pack_into(self._map, 0, seq + 2)

    def disarm(self, serial: int) -> None:
        self.arm(serial, ())

    def armed(self) -> tuple[Arm, ...]:
        """What the slot asks now (nothing: an empty tuple)."""
        raw = b""
        for _ in range(_MAX_TRIES):
            (before,) = _SEQ.unpack_from(self._map, 0)
            raw = self._map[_SEQ.size:_SIZE]
            (after,) = _SEQ.unpack_from(self._map, 0)
            if before == after and not before & 1:
                break
        (serial,) = _SERIAL.unpack_from(raw, 0)
        arms = []
        for i in range(SLOTS):
            code, at, hold_us = _ARM.unpack_from(raw, _SERIAL.size + i * _ARM.size)
            if 0 < code <= len(INSIDE_FUNCTIONS):
                arms.append(Arm(serial, INSIDE_FUNCTIONS[code - 1], at, hold_us / 1e6))
        return tuple(arms)

    def close(self) -> None:
        self._map.close()


@dataclass(frozen=True)
class Aim:
    """One arm of a fault's draw: the kind of op, the boundary and the hold."""

    f: str
    at: int
    hold_ms: float


class Aiming(Protocol):
    """The harness's side of an aim (:class:`leasecheck.run.aiming.Aimer`), as a fault factory sees it."""

    #: the op kinds this run's workers do (``read-resource`` only when the target reads its resource)
    @property
    def ops(self) -> tuple[str, ...]: ...

    #: the run's coverage goal, as a count per kind of op and fault (None: the run has none)
    @property
    def want(self) -> int | None: ...

    def landed(self, fault: str) -> Counter[str]:
        """How many times ``fault`` has landed inside each kind of op so far (a live count: the caller adds to it)."""

    def required(self, fault: str) -> frozenset[str]:
        """The kinds of op the run requires ``fault`` to land inside (``--require paused-inside-claim``)."""

    def boundaries(self, f: str) -> int:
        """The most request boundaries an op of kind ``f`` has shown so far (a guess before any was seen)."""

    def aim(self, aims: Sequence[Aim], timeout_s: float, gather_s: float) -> Iterator[InFlight]:
        """Arm ``aims``; yield each op a worker holds for one of them, as it comes (each kind once, each worker once),
        until every one landed, ``timeout_s`` passed since arming with none landed, or ``gather_s`` since the first
        landed; disarm when done (or closed: the caller has its victims)."""


def aims_inside(aiming: Aiming | None, fault: str, rng: random.Random) -> bool:
    """Does this ``fault`` aim inside ops (:func:`choose`), or stop a worker that holds a lease between them? A kill
    always aims (a killed worker's transaction ends with it); a pause aims while a kind is short of the run's goal or
    of what it requires, else :data:`PAUSE_INSIDE_SHARE` of the time (by ``rng``: the seed's)."""
    if aiming is None or not aiming.ops:
        return False
    if fault != "pause":
        return True
    landed, want = aiming.landed(fault), aiming.want
    if want is not None and any(landed[f] < want for f in aiming.ops):
        return True
    if any(landed[f] < 1 for f in aiming.required(fault)):
        return True
    return rng.random() < PAUSE_INSIDE_SHARE


def choose(aiming: Aiming, fault: str, rng: random.Random, most: int = 1) -> list[Aim]:
    """Draw the aims for ``fault``, each a different kind of op: with a coverage goal (:attr:`Aiming.want`), every kind
    it has landed inside fewer times than the goal; else (or once none is short) the ``most`` it has landed inside
    least. A kind the run requires it to land inside and it has not yet comes first, then landed least first, ties
    broken by ``rng``; each with a boundary among those its ops have shown, and a
    hold. The draws are as many whatever ``most``, so the later ones follow the seed."""
    ops: Sequence[str] = aiming.ops
    if not ops:
        return []
    landed, want, required = aiming.landed(fault), aiming.want, aiming.required(fault)
    draws = {f: (rng.random(), rng.random(), rng.uniform(*HOLD_MS)) for f in ops}
    kinds = sorted(ops, key=lambda f: (not (f in required and landed[f] < 1), landed[f], draws[f][0]))
    short = [f for f in kinds if want is not None and landed[f] < want]
    return [Aim(f, 1 + int(draws[f][1] * aiming.boundaries(f)), draws[f][2]) for f in short or kinds[:max(1, most)]]
