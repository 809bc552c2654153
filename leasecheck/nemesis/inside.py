"""Aiming a pause or kill *inside* an op: the nemesis arms a kind of op, a worker holds it between round trips.

Why: a claim lasts a few milliseconds, so a pause that picks its moment by
luck falls between ops nearly always (16 of 17 in issue 34), and a claim that is
not atomic (read, decide, write) is never stopped in its middle. So the fault
does not pick a moment, it waits for one. Per fault, the nemesis draws (by the
schedule's seeded generator) the kind of op to land in, among those it has not
landed in yet (:func:`choose`), and which round-trip boundary of it (the first,
second ... request of the op gone out, the next not sent), and arms the kind in
shared memory (:class:`AimSlot`). The next worker to invoke an op of that kind
runs it under a hook (:mod:`leasecheck.run.holds`) that, after each request the
adapter sends to its store (an SQLite statement, a socket send, a psycopg
execute), tells the harness which boundary it is at, and at the armed one holds
the op there for ``hold_ms``. The harness passes the word on (:class:`Aiming`,
:mod:`leasecheck.run.aiming`); the fault stops or kills that worker during the
hold: between two round trips of the op, or between a request and its reply.

The recorded interval still contains the real one: the worker stamps its invoke
before the first request and its completion after the last reply, and the hold
is between them. What the fault landed in is its nemesis event's ``"inside"``
value (:meth:`InFlight.to_json`); the history alone says whether it did
(``paused-inside-OP``, :mod:`leasecheck.checker.coverage_inside`).

The slot is a few bytes in a file both sides map (:mod:`mmap`), with a sequence
number around each write as :mod:`leasecheck.nemesis.worker_clocks` has it: a
worker reads it at every invoke for about a microsecond, without a system call.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS

#: seq (u64, odd while a write is in progress), then serial, the armed op's code (0: none; 1 + its place in
#: INSIDE_FUNCTIONS), the boundary to hold at (1: after the first request) and the hold (µs)
_SEQ = struct.Struct("<Q")
_BODY = struct.Struct("<4I")
_SIZE = _SEQ.size + _BODY.size
_MAX_TRIES = 1000
#: how long an armed worker holds its op at the boundary, ms (drawn per fault): long enough for the word to reach the
#: nemesis and its signal to land (a few ms on a loaded machine), short beside a lease
HOLD_MS = (30.0, 80.0)


@dataclass(frozen=True)
class Arm:
    """What the slot asks of the next op of kind ``f``: hold at request boundary ``at`` for ``hold_s``."""

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

    def to_json(self) -> dict[str, Any]:
        """The fault's nemesis event's ``"inside"`` value: what it aimed at, and how the aim was made to land."""
        return {"f": self.f, "process": self.process, "invoked": self.invoked, "after_requests": self.boundary,
                "held_ms": round(self.hold_ms, 1), "how": "held by the worker between round trips"}


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

    def _write(self, serial: int, code: int, at: int, hold_us: int) -> None:
        (seq,) = _SEQ.unpack_from(self._map, 0)
        _SEQ.pack_into(self._map, 0, seq + 1)
        _BODY.pack_into(self._map, _SEQ.size, serial, code, at, hold_us)
        _SEQ.pack_into(self._map, 0, seq + 2)

    def arm(self, serial: int, f: str, at: int, hold_ms: float) -> None:
        self._write(serial, 1 + INSIDE_FUNCTIONS.index(f), at, int(hold_ms * 1000))

    def disarm(self, serial: int) -> None:
        self._write(serial, 0, 0, 0)

    def armed(self) -> Arm | None:
        """What the slot asks now (None: nothing)."""
        body: tuple[int, ...] = (0, 0, 0, 0)
        for _ in range(_MAX_TRIES):
            (before,) = _SEQ.unpack_from(self._map, 0)
            body = _BODY.unpack_from(self._map, _SEQ.size)
            (after,) = _SEQ.unpack_from(self._map, 0)
            if before == after and not before & 1:
                break
        serial, code, at, hold_us = body
        if not 0 < code <= len(INSIDE_FUNCTIONS):
            return None
        return Arm(serial, INSIDE_FUNCTIONS[code - 1], at, hold_us / 1e6)

    def close(self) -> None:
        self._map.close()


class Aiming(Protocol):
    """The harness's side of an aim (:class:`leasecheck.run.aiming.Aimer`), as a fault factory sees it."""

    #: the op kinds this run's workers do (``read-resource`` only when the target reads its resource)
    @property
    def ops(self) -> tuple[str, ...]: ...

    def hit(self, fault: str) -> set[str]:
        """The kinds ``fault`` has landed inside so far in this round (a live set: the caller adds to it)."""

    def boundaries(self, f: str) -> int:
        """The most request boundaries an op of kind ``f`` has shown so far (a guess before any was seen)."""

    def aim(self, f: str, at: int, hold_ms: float, timeout_s: float) -> InFlight | None:
        """Arm kind ``f``; wait up to ``timeout_s`` for a worker to hold one at boundary ``at``; disarm. None: none did."""


@dataclass(frozen=True)
class Aim:
    """One fault's draw: the kind of op, the boundary and the hold."""

    f: str
    at: int
    hold_ms: float


def choose(aiming: Aiming, fault: str, rng: random.Random) -> Aim | None:
    """Draw an aim for ``fault``: a kind it has not landed inside yet this round (a new round once it has hit them all),
    a boundary among those its ops have shown, and a hold. Always three draws, so later ones follow the seed."""
    ops: Sequence[str] = aiming.ops
    if not ops:
        return None
    hit = aiming.hit(fault)
    if hit >= set(ops):
        hit.clear()
    f = rng.choice([f for f in ops if f not in hit])
    at = 1 + int(rng.random() * aiming.boundaries(f))
    return Aim(f, at, rng.uniform(*HOLD_MS))
