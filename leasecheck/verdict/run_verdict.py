"""The run verdict (docs/contracts/run-verdict.md): did the run test anything at all?

The checker says whether a history is consistent; an empty history is
consistent, so a run that never claimed, never contended or never suffered the
faults it asked for would pass a CI gate while testing nothing. Like Jepsen's
``stats`` checker, the run is ``unknown`` unless its history holds:

* an ok ``claim``, ``renew``, ``effect`` and ``commit``;
* a contended claim: one refused ``held``, or one granted over an earlier
  lease that was neither given back (ok or info release) nor committed;
* for every fault of ``--nemesis``, a start and a heal, as nemesis events;
* for every fault of ``--nemesis``, the situations its catalogue row says it
  exists to bring about (``FaultKind.situations``: a ``pause`` run must show a
  claim on an expired lease), counted by :mod:`leasecheck.checker.coverage`.

Faults are told apart by the ``"fault"`` key the schedule puts in every event
value; a history without it is read by event name alone. A killed worker cannot
be healed, only replaced: the catalogue's ``kill`` row names ``start`` as its
heal, and the heal that counts is the runner's ``start`` of a replacement whose
``replaces`` is a process the kill named as its victim (a worker that crashed
by itself is replaced too, but that is no heal of a kill).

:class:`Evidence` is fed raw events in file order, so the runner can watch a
history grow (:mod:`leasecheck.verdict.tails`) with the same code that judges it
at the end.

The checker's coverage knows nothing of faults: it takes fault *windows*.
:func:`fault_windows` makes them from the nemesis events with the catalogue:
a store-side fault (a row needing a store server) from its start event to its
heal event, a worker-clock fault (a row writing ``clock-skew`` events that
needs no server: ``clock-bump``, ``clock-strobe``) likewise, with its victims, and
a worker ``pause`` or ``kill`` (the rows seeking ``paused-inside-*`` /
``killed-inside-*``) with the role saying which.
An event belongs to the row its ``"fault"`` names; in a history without fault
names an event naming worker processes (integers in ``victims`` or
``processes``) belongs to the worker-side rows of its name, any other to the
store-side rows, and the runner's ``start`` of a replacement worker
(``replaces``) to none.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from leasecheck.checker.coverage import Coverage, coverage_source
from leasecheck.checker.verdict import Validity
from leasecheck.checker.windows import CLOCK_BEHIND, KILLED, MEMBER_PARTITION, PAUSED, POWER_LOST, PRIMARY_LOST, Window, skew_of
from leasecheck.histories import Header
from leasecheck.histories.format import NEMESIS, Event, lease_key
from leasecheck.histories.vocabulary import TIMING_KINDS
from leasecheck.nemesis.catalogue import CATALOGUE, FAULTS, FaultKind, Need
from leasecheck.nemesis.host_clock import HOST_CLOCK_STEP
from leasecheck.nemesis.protocol import FAULT_FAILED
from leasecheck.verdict.situations import CoverageGoal, coverage_gaps

#: the ops a run must have seen succeed at least once
PROTOCOL_OPS = ("claim", "renew", "effect", "commit")


@dataclass
class _Span:
    """One fault from its start until its heal, as :class:`Evidence` follows it: whom it hit, and whether it met them."""

    fault: str
    victims: frozenset[int]
    #: a store-side fault, or a network fault on every worker: it hits every process
    everyone: bool
    #: a fault of the workers' own (a pause, a kill, a clock): a victim holding a lease is hit by it, op or not
    on_workers: bool
    exercised: bool = False
    #: a victim holding a lease meets it, op or not: a worker's own fault, or a broker's in a queue run
    meets_holders: bool = False

    def hits(self, process: int) -> bool:
        return self.everyone or process in self.victims


@dataclass
class Evidence:
    """What a history shows the run exercised, accumulated event by event."""

    ok: Counter[str] = field(default_factory=Counter)
    #: claims refused ``held``
    held: int = 0
    #: claims granted while an earlier ok claim of the node was neither released nor committed
    takeovers: int = 0
    #: every nemesis event, as (f, value)
    nemesis: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: the faults (by name) that met an op: see :meth:`unexercised`
    exercised: set[str] = field(default_factory=set)
    _pending: dict[Any, tuple[str, str | None, dict[str, Any]]] = field(default_factory=dict)
    #: per node, the lease (epoch, or token when unfenced) of the latest ok claim not given back
    _holder: dict[str, Any] = field(default_factory=dict)
    #: per worker process, the nodes it holds a lease on (from its ok claim until it commits or gives it back)
    _holding: dict[Any, set[str]] = field(default_factory=dict)
    #: the faults started and not yet healed
    _open: list[_Span] = field(default_factory=list)
    #: a job queue's history (header ``lease_expiry: "queue"``): an execution under way talks to its broker through
    #: the library, outside the ops recorded, so a fault of the broker meets every execution under way while it lasts
    queue: bool = False

    def take_header(self, line: bytes) -> None:
        """What of the history's first line the evidence depends on: is it a job queue's (``lease_expiry: "queue"``)?"""
        try:
            self.queue = msgspec.json.decode(line).get("lease_expiry") == "queue"
        except (msgspec.MsgspecError, AttributeError):
            pass  # the reader that checks the history says what is wrong with its header

    def feed(self, ev: Event) -> None:
        if ev.process == NEMESIS:
            value = ev.value if isinstance(ev.value, dict) else {}
            self.nemesis.append((ev.f, value))
            self._follow_fault(ev.f, value)
            return
        if ev.type == "invoke":
            self._pending[ev.process] = (ev.f, ev.node, ev.value if isinstance(ev.value, dict) else {})
            for span in self._open:  # an op in flight during the fault, by a process it hits
                if not span.exercised and type(ev.process) is int and span.hits(ev.process):
                    span.exercised = True
                    self.exercised.add(span.fault)
            return
        f, node, invoked = self._pending.pop(ev.process, (ev.f, ev.node, {}))
        value = ev.value if isinstance(ev.value, dict) else {}
        if node is None:
            return
        if ev.type == "ok":
            self.ok[f] += 1
            if f == "claim":
                if node in self._holder:
                    self.takeovers += 1
                self._holder[node] = lease_key(value)
                self._holding.setdefault(ev.process, set()).add(node)
            elif f == "commit":
                self._holder.pop(node, None)
                self._holding.get(ev.process, set()).discard(node)
        elif ev.type == "fail" and f == "claim" and value.get("reason") == "held":
            self.held += 1
        if f == "release" and ev.type in ("ok", "info"):
            self._holding.get(ev.process, set()).discard(node)
            if self._holder.get(node) == lease_key(invoked):
                del self._holder[node]

    def _follow_fault(self, f: str, value: dict[str, Any]) -> None:
        """Open a span at a fault's start (met at once if a process it hits has an op in flight or, for a
        worker's fault, holds a lease); close it at its heal."""
        name = value.get("fault")
        kind = FAULTS.get(name) if isinstance(name, str) else None
        if kind is not None and f == kind.events[0]:
            victims = _processes(value)
            network = Need.TOXIPROXY in kind.needs
            store_side = Need.SERVER in kind.needs and not network
            span = _Span(kind.name, victims, store_side or (network and (not victims or value.get("scope") == "all")),
                         on_workers=Need.SERVER not in kind.needs)
            span.meets_holders = span.on_workers or (store_side and self.queue)
            busy = {p for p in self._pending if type(p) is int}
            if span.meets_holders:
                busy |= {p for p, nodes in self._holding.items() if nodes}
            if any(span.hits(p) for p in busy):
                span.exercised = True
                self.exercised.add(span.fault)
            self._open.append(span)
            return
        replaced = value.get("replaces")
        if kind is not None and f == kind.events[1]:
            victims = _processes(value)
            healed = [s for s in self._open if s.fault == kind.name]
            match = next((s for s in healed if s.victims == victims), healed[0] if healed else None)
        elif type(replaced) is int:  # the runner's replacement of a killed worker: the heal of that kill
            match = next((s for s in self._open if s.on_workers and replaced in s.victims
                          and FAULTS[s.fault].events[1] == f), None)
        else:
            return
        if match is not None:
            self._open.remove(match)

    def unexercised(self, kinds: Sequence[FaultKind]) -> list[str]:
        """The faults of ``kinds`` that started but never met the run: no op of a process they hit in flight
        while they lasted (any process's, for a fault on everyone), nor, for a worker's own fault (a broker's in a
        queue run), a lease its victim held as it began. Such a fault tested nothing (a latency that fell between two ops), so it does
        not count as exercised. Only faults whose events name them (``"fault"``) are followed."""
        started = {v.get("fault") for f, v in self.nemesis if isinstance(v.get("fault"), str)}
        return [f"{kind.name} never met an op (no op of a process it hit was in flight while it lasted)"
                for kind in kinds if kind.name in started and kind.name not in self.exercised]


def _of(kind: FaultKind, value: dict[str, Any]) -> bool:
    """Was this event written for ``kind``? (Histories without the ``fault`` key: any event of its name.)"""
    return "fault" not in value or value["fault"] == kind.name


def fault_gaps(evidence: Evidence, kinds: Sequence[FaultKind]) -> list[str]:
    """What is missing for each requested fault: ``"pause never started"``, ``"kill never healed"``."""
    gaps = []
    for kind in kinds:
        start_f, heal_f = kind.events
        starts = [v for f, v in evidence.nemesis if f == start_f and _of(kind, v)]
        if not starts:
            gaps.append(f"{kind.name} never started")
            continue
        victims = {str(p) for v in starts for p in v.get("victims", [])}
        healed = False
        for f, v in evidence.nemesis:
            if f != heal_f or not _of(kind, v):
                continue
            if "fault" in v or "replaces" not in v or str(v["replaces"]) in victims:
                healed = True
                break
        if not healed:
            gaps.append(f"{kind.name} never healed")
    return gaps


def failed_faults(evidence: Evidence) -> list[str]:
    """Each fault step the environment failed under (``fault-failed`` events: a host lost mid-run), in words: ``"the
    heal of pause-store failed (db1: kill -CONT ...: the connection was lost before it exited)"``. Such a fault may
    have been half applied, or left on: what the run saw is not what it says it did, so it is never valid."""
    return [f"the {v.get('step', 'start')} of {v.get('fault', 'a fault')} failed ({v.get('error', 'no reason given')})"
            for f, v in evidence.nemesis if f == FAULT_FAILED]


def gaps(evidence: Evidence, kinds: Sequence[FaultKind], cov: Coverage, require: Sequence[str] = (),
         ops: Sequence[str] = PROTOCOL_OPS, goal: CoverageGoal | None = None) -> list[str]:
    """Everything the run verdict finds missing, in words; empty when the run tested the protocol.

    ``ops``: the ops that must have succeeded once (a job queue without a heartbeat has no ``renew``); ``goal``: the
    counts ``--until-covered`` waits for (the deadline's always; the verdict's only with ``--strict-coverage``)."""
    missing = [f"no ok {f}" for f in ops if not evidence.ok[f]]
    if not evidence.held and not evidence.takeovers:
        missing.append("no contended claim (none refused held, none granted over an earlier lease)")
    faults = fault_gaps(evidence, kinds)
    whole = [kind for kind in kinds if not any(gap.startswith(f"{kind.name} never") for gap in faults)]  # started and healed
    short = goal.gaps(cov) if goal is not None else []
    return missing + faults + evidence.unexercised(whole) + coverage_gaps(cov, kinds, require) + short


def run_verdict(checked: Validity, evidence: Evidence, kinds: Sequence[FaultKind], cov: Coverage,
                require: Sequence[str] = (), ops: Sequence[str] = PROTOCOL_OPS,
                found: Collection[str] | None = None, goal: CoverageGoal | None = None) -> tuple[Validity, str | None]:
    """(validity, reason) of a run from the checker's validity, the history's evidence and its coverage.

    An anomaly wins (a vacuous but anomalous run is invalid: the anomaly is proven);
    a vacuous run is ``unknown`` with the reason naming what is missing, never valid. One exception: when the
    host's wall clock stepped during the run (``host-clock-step`` events) and every kind ``found`` is a timing kind,
    the step may be what they show (a store judging leases by that clock expired them early or late): ``unknown``.
    ``goal``: a strict ``--until-covered`` goal, whose shortfall at the cap is ``unknown`` too. A fault step the
    environment failed under (:func:`failed_faults`) makes an unproven run ``unknown`` before anything else.
    """
    missing = gaps(evidence, kinds, cov, require, ops, goal if goal is not None and goal.strict else None)
    steps = [v.get("delta_ms") for f, v in evidence.nemesis if f == HOST_CLOCK_STEP]
    if checked is False and steps and found and set(found) <= TIMING_KINDS:
        said = ", ".join(f"{d:+g} ms" for d in steps if isinstance(d, int | float))
        return "unknown", (f"the host's wall clock stepped during the run ({said}: a virtual machine restored or "
                           "resumed, a clock set by hand), and a store that judges leases by it expires them early or "
                           f"late: the timing findings ({', '.join(sorted(set(found)))}) may be the step's; run again")
    if checked is False:
        return False, None
    failed = failed_faults(evidence)
    if failed:
        return "unknown", (f"a fault may have been left half done or on, so what the run tested is not sure: {'; '.join(failed)}"
                           " (`leasecheck heal --hosts FILE` undoes what is left)")
    if missing:
        return "unknown", "the run did not test enough: " + "; ".join(missing)
    if checked is True:
        return True, None
    return "unknown", "the linearizability search ran out of its budget"


def evidence_of(lines: Iterable[bytes]) -> Evidence:
    """The evidence in a whole history's lines (for tests and tools)."""
    decode = msgspec.json.Decoder(Event).decode
    evidence = Evidence()
    for i, line in enumerate(lines):
        if i == 0:
            evidence.take_header(line)
            continue
        if not line.strip():
            continue
        try:
            evidence.feed(decode(line))
        except msgspec.MsgspecError:
            continue
    return evidence


# ---------------------------------------------------------------- coverage

#: faults on the store's side: a lease that expires meanwhile is judged by a store that cannot answer
STORE_FAULTS: tuple[FaultKind, ...] = tuple(kind for kind in CATALOGUE if Need.SERVER in kind.needs)
#: faults that skew a worker's clock (not the store's)
WORKER_CLOCK_FAULTS: tuple[FaultKind, ...] = tuple(kind for kind in CATALOGUE if kind.family == "worker-clock")
#: faults that stop or kill a worker (``pause``, ``kill``): the rows that seek a situation of landing inside an op
WORKER_STOP_FAULTS: tuple[FaultKind, ...] = tuple(kind for kind in CATALOGUE if kind.family == "worker")


def _processes(value: dict[str, Any]) -> frozenset[int]:
    """The worker processes an event names (``victims``, or ``processes`` in older histories)."""
    named = value.get("victims", value.get("processes", []))
    return frozenset(v for v in named if type(v) is int) if isinstance(named, list) else frozenset()


def _belongs(kind: FaultKind, value: dict[str, Any]) -> bool:
    """Was this event (of one of ``kind``'s event names) written for ``kind``? See the module's docstring."""
    if "fault" in value:
        return bool(value["fault"] == kind.name)
    if kind.loses_power:  # a power loss always names its fault: a store's kill that names
        return False  # none (an older history's, a simulation's) is a kill-store, never a power cut too
    if "replaces" in value:  # the runner's replacement of a worker: the heal of a worker kill, of nothing else
        return Need.SERVER not in kind.needs
    return (Need.SERVER in kind.needs) != bool(_processes(value))


def _roles(kind: FaultKind) -> frozenset[str]:
    """What a cluster fault's window means to the situations, from the situations its row exists to bring about."""
    roles = set()
    if "lease-granted-before-primary-lost" in kind.situations:
        roles.add(PRIMARY_LOST)
    if "claim-during-member-partition" in kind.situations:
        roles.add(MEMBER_PARTITION)
    if kind.loses_power:
        roles.add(POWER_LOST)
    if kind.family == "worker":  # a worker stopped (``pause``) or killed (``kill``) at the window's start
        roles.add(PAUSED if kind.events[0] == "pause" else KILLED)
    return frozenset(roles)


def _windows(events: Sequence[Event], kinds: Sequence[FaultKind]) -> list[Window]:
    """Each start of one of ``kinds`` until its heal (the earliest open start of that row, with the same victims if any)."""
    windows: list[Window] = []
    for kind in kinds:
        start_f, heal_f = kind.events
        open_: list[Window] = []
        for ev in events:
            value = ev.value if isinstance(ev.value, dict) else {}
            if ev.f not in (start_f, heal_f) or not _belongs(kind, value):
                continue
            victims = _processes(value)
            if ev.f == start_f:
                behind = isinstance(value.get("delta_ms"), int | float) and value["delta_ms"] < 0
                open_.append(Window(ev.time, None, victims, _roles(kind) | ({CLOCK_BEHIND} if behind else set()), skew_of(value)))
                continue
            replaced = value.get("replaces")
            if type(replaced) is int:  # heals the kill whose victim it replaces, or nothing (a worker that crashed itself)
                healed = next((w for w in open_ if replaced in w.victims), None)
            else:
                healed = next((w for w in open_ if w.victims == victims), open_[0] if open_ else None)
            if healed is not None:
                open_.remove(healed)
                windows.append(Window(healed.start, ev.time, healed.victims, healed.roles, healed.skew))
        windows.extend(open_)  # never healed: to the end of the history
    return sorted(windows, key=lambda w: (w.start, w.until))


def fault_windows_of(events: Sequence[Event], kind: FaultKind) -> list[Window]:
    """Every window of one fault row (the run report draws them as bands)."""
    return _windows(events, (kind,))


def fault_windows(events: Sequence[Event]) -> tuple[list[Window], list[Window]]:
    """(store-side fault windows, worker-side fault windows) of a history's nemesis events: the worker-side ones are
    the clock faults' and the worker pauses' and kills' (role ``paused`` / ``killed``: the ops they landed inside)."""
    return _windows(events, STORE_FAULTS), _windows(events, WORKER_CLOCK_FAULTS) + _windows(events, WORKER_STOP_FAULTS)


def history_coverage(source: str | os.PathLike[str] | Iterable[bytes | str]) -> tuple[Header, Coverage]:
    """Read a history (a path, or lines) and count its situations; raises ``HistoryError`` on bad input."""
    return coverage_source(source, fault_windows)
