"""History format v1's records: the header, raw events, and paired operations.

The words they hold (op names, reasons, statuses) are declared in
:mod:`leasecheck.histories.vocabulary`.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

import msgspec

from leasecheck.histories.vocabulary import OpName, Outcome

FORMAT_NAME = "leasecheck-history"
FORMAT_VERSION = 1

#: the ``process`` of every fault event
NEMESIS = "nemesis"

#: the ``f`` of the event that ends a finished history: a nemesis-shaped line (``"process": "nemesis"``,
#: ``"type": "info"``), so that every reader of format v1 reads it as it reads any fault event, and the last line.
#: Why an event and not a line of its own: a reader that knows nothing of it (an older leasecheck, a third
#: party's tool) still reads the history; only a reader that knows it can tell a finished history from one
#: whose writer died (FORMAT.md, "The end of a history").
HISTORY_END = "history-end"
#: the header key by which a writer promises to end the history with its ``history-end`` event
END_MARKER = "end_marker"

#: the header's ``effect_fence``: what the protected resource's fence follows.
#: ``"lease"``: the resource is coupled to the lease store, so granting a claim
#: lifts the fence to the new epoch (an effect is stale once a newer epoch was
#: observed, like a commit). ``"token"``: a storage service that knows only the
#: tokens it was shown, so the fence is the largest epoch it accepted.
EffectFence = Literal["lease", "token"]
EFFECT_FENCES: frozenset[str] = frozenset(get_args(EffectFence))
#: what a header without ``effect_fence`` means (the seed's rule)
DEFAULT_EFFECT_FENCE: Final = "lease"

#: the header's ``lease_expiry``: what ends a lease the holder keeps silent about.
#: ``"deadline"``: the store ends it ttl after its last grant or renew (every lease
#: backend), so the timing kinds judge it by the ttl. ``"holder"``: a lock with no
#: deadline, held as long as its holder's process, connection or session lives
#: (an OS file lock, a Postgres session advisory lock): a stopped holder keeps it
#: forever and a dead one loses it at once, both as promised, so ``overlapping-lease``
#: and ``stuck-lease``, which are defined by the ttl, do not apply. ``"queue"``: an
#: execution of a job queue's job (``leasecheck audit`` of a queue): the library judges
#: when an execution is lost and runs the job again, by timers of its own that the
#: history cannot see start (it took the job before the task could stamp anything), so
#: the ttl-defined kinds do not apply either.
LeaseExpiry = Literal["deadline", "holder", "queue"]
LEASE_EXPIRIES: frozenset[str] = frozenset(get_args(LeaseExpiry))
DEFAULT_LEASE_EXPIRY: Final = "deadline"


class Header(msgspec.Struct, frozen=True):
    """Line 1 of a history: what the checker needs to judge time and effects, plus free metadata.

    ``effect_fence`` is typed (not left in ``meta``) because the checker's
    ``stale-effect`` rule and its lease model depend on it; it comes last so
    that ``Header(ttl, uncertainty, meta)`` keeps meaning what it always did.
    """

    ttl_ms: float
    clock_uncertainty_ms: float
    meta: dict[str, Any] = {}
    effect_fence: EffectFence = DEFAULT_EFFECT_FENCE
    lease_expiry: LeaseExpiry = DEFAULT_LEASE_EXPIRY
    #: the writer promises a ``history-end`` event as the last line (``"end_marker": true``): without it, the
    #: history was never finished. Every :class:`~leasecheck.histories.writer.HistoryWriter` promises it.
    end_marker: bool = False

    def __post_init__(self) -> None:
        # a header is built by the runner from a target's declaration: a typo there
        # must stop the run, not produce a history every reader rejects
        if self.effect_fence not in EFFECT_FENCES:
            raise ValueError(f'effect_fence must be "lease" or "token", not {self.effect_fence!r}')
        if self.lease_expiry not in LEASE_EXPIRIES:
            raise ValueError(f'lease_expiry must be "deadline", "holder" or "queue", not {self.lease_expiry!r}')

    @property
    def deadlines(self) -> bool:
        """Do leases end ttl after their last grant or renew (the timing kinds apply)?"""
        return self.lease_expiry == "deadline"

    def to_json(self) -> dict[str, Any]:
        """The header line as written: metadata first, then the keys the checker reads.

        ``effect_fence`` is always written, even at its default, so that a
        history says which rule it is to be judged by without the reader
        knowing the default.
        """
        return {
            **self.meta,
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "ttl_ms": self.ttl_ms,
            "clock_uncertainty_ms": self.clock_uncertainty_ms,
            "effect_fence": self.effect_fence,
            **({"lease_expiry": self.lease_expiry} if self.lease_expiry != DEFAULT_LEASE_EXPIRY else {}),
            **({END_MARKER: True} if self.end_marker else {}),
        }


class Stamped(msgspec.Struct, gc=False):
    """An event as the process that made it stamped it, before the history gave it a place (``index``): a line of a
    worker's log (:mod:`leasecheck.rundir.worker_logs`), which the merge turns into a history line."""

    time: int
    process: int | str
    type: str
    f: str
    node: str | None = None
    value: Any = None


class Event(Stamped, gc=False, kw_only=True):
    """One line after the header, as decoded (types checked by msgspec, in C): a stamped event and its place."""

    index: int


class Op(msgspec.Struct, gc=False, array_like=True):
    """One client operation: its invoke paired with its completion.

    Encoded (when a big history is split by node and spilled) as an array of
    its fields, not an object: half the bytes, and a fifth less time to write
    and read back, than with every field's name. ``f`` and ``type`` are typed
    by their words, so that decoding hands back the one interned string of
    each rather than two new strings per op to make and free.

    ``index`` is the invoke event's index: the name by which every anomaly cites
    the operation. ``type`` is the completion's type; an invoke that never
    completed is an ``info`` op with ``complete_time`` None, like an explicit
    ``info`` completion (its effect may land at any later time, or never).
    """

    index: int
    process: int
    f: OpName
    node: str
    value: dict[str, Any]
    type: Outcome
    result: dict[str, Any]
    invoke_time: int
    complete_time: int | None
    complete_index: int | None = None
    #: the epoch this op names: returned by an ok claim or read, else carried
    #: by its invoke value (see :func:`named_epoch`); None when unfenced
    epoch: Any = None

    @property
    def token(self) -> Any:
        """The opaque lease token of an unfenced backend (None when fenced)."""
        if self.f == "claim":
            return self.result.get("token")
        return self.value.get("token")


def named_epoch(f: str, type_: str, value: dict[str, Any], result: dict[str, Any]) -> Any:
    """The epoch an op names: an ok claim or read returns it; a read of the resource names none (its entries
    have epochs of their own, judged by the resource kinds); every other op carries it."""
    if f == "read-resource":
        return None
    if f == "claim" or f == "read":
        return result.get("epoch") if type_ == "ok" else None
    return value.get("epoch")


def lease_key(value: dict[str, Any]) -> Any:
    """A lease's name in an op value (the harness's takeovers and the run verdict agree on it): its epoch, or its token when the backend has no fencing token."""
    epoch = value.get("epoch")
    return epoch if epoch is not None else ("token", repr(value.get("token")))


def make_op(
    index: int,
    process: int,
    f: OpName,
    node: str,
    value: dict[str, Any],
    type_: Outcome,
    result: dict[str, Any],
    invoke_time: int,
    complete_time: int | None,
    complete_index: int | None = None,
) -> Op:
    """An :class:`Op` with its derived ``epoch`` filled in (for tests and tools)."""
    return Op(
        index, process, f, node, value, type_, result, invoke_time, complete_time, complete_index,
        named_epoch(f, type_, value, result),
    )
