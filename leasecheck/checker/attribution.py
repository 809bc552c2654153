"""Which fault, if any, hit the processes that prove an anomaly: a fault's victim, or a stall of its own.

A verdict says what the backend did wrong; an auditor also needs to know what
brought it about. The workload stalls workers by itself (a zombie in the
making, no fault needed), and a run's faults stop, kill, cut off or skew
chosen victims. This module tells the two apart, as a pure function of the
history: the anomaly's cited ops, the claims that granted their leases, and the
fault windows its nemesis events make. Which events make a window, and whom
each one hits, is the catalogue's business (``leasecheck.verdict.attribution``): like
coverage, the checker only takes the windows.

Definitions (times are the history's ``time``, ns):

* the *proving ops* of a ``stale-renew``, ``stale-commit`` or ``stale-effect``
  are its stale op alone (the last op it cites: the others only show that a
  newer lease existed); of every other kind, all the ops it cites, and for a
  ``lost-commit`` whose read shows another lease, also that lease's ok commit
  (the latest of the node invoked before the read completed): a zombie's
  commit over the newer one is the fault's doing when the zombie was its victim;
* the *end* of an anomaly is the latest completion among its cited ops (never,
  when one of them never completed);
* a proving op's *lease start* is the invoke of the ok claim that granted its
  lease (for a renew, effect, commit or release: the latest claim of its node
  with its epoch, or its token when unfenced, invoked before it, its own
  process's first; for a claim, a read, or a lease no ok claim granted: its own
  invoke). From there to the op's completion (never, for an op that never
  completed) is the time in which its holder could have stalled, been stopped
  or been cut off (a zombie that wakes from a pause often acts several times
  before its stale op);
* a fault on named victims *hit* a proving op when one of them is the op's
  process and the fault overlaps the op's lease start to its completion (a
  start at or before that completion, an end at or after the lease start):
  what befell the process after its op was done cannot have made the op;
* a fault on every process (a store-side fault; a network fault on everyone)
  *hit* a proving op when it overlaps the op's lease start to the anomaly's end:
  a store that restarts between a commit and the read that lost it did.

An anomaly whose proving ops no window hit *stalled on its own*: no fault
touched its processes, so the workload's own stall (or the backend by itself)
brought it about.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.checker.model import freeze
from leasecheck.checker.verdict import Anomaly, Verdict
from leasecheck.histories import Op
from leasecheck.histories.format import Event
from leasecheck.histories.vocabulary import STALE_KINDS

INF = math.inf
_STALE = frozenset(STALE_KINDS.values())


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """One fault as it hit a run: its name, from ``start`` to ``end`` (ns; None: never healed), and whom it hit.

    ``victims`` are process numbers; ``everyone`` hits every process (the
    store's server stopped, every worker cut off). ``did`` says what it did
    to a victim (``"paused"``), ``did_all`` what it did when it hit everyone
    (``"paused the store"``).
    """

    fault: str
    start: int
    end: int | None = None
    victims: frozenset[int] = frozenset()
    everyone: bool = False
    did: str = "hit"
    did_all: str = "hit every process"

    @property
    def until(self) -> float:
        return INF if self.end is None else self.end

    def hits(self, process: int, start: float, done: float, end: float) -> bool:
        """Did this fault touch ``process``'s op, from its lease ``start`` until it was ``done`` (a fault on
        named victims) or until the anomaly's ``end`` (a fault on everyone)?"""
        if self.everyone:
            return self.start <= end and self.until >= start
        return process in self.victims and self.start <= done and self.until >= start


#: faults(nemesis events) -> every fault window of the history, with its victims
FaultsOf = Callable[[Sequence[Event]], Sequence[FaultWindow]]


def proving_ops(anomaly: Anomaly) -> list[int]:
    """The indices of the ops whose processes an anomaly's attribution is about (see the module's docstring)."""
    if anomaly.kind in _STALE and anomaly.ops:
        return [anomaly.ops[-1]]
    return list(anomaly.ops)


def _lease(op: Op) -> Any:
    """What names an op's lease: its epoch, or its token when unfenced (claims: what they were granted)."""
    e = op.epoch
    return ("epoch", e) if type(e) is int else ("token", freeze(op.token))


def lease_starts(ops: Iterable[Op], wanted: Iterable[Op]) -> dict[int, int]:
    """For each ``wanted`` renew, effect, commit or release (by index), when the claim of its lease was invoked.

    The claim is the latest ok claim of the op's node granting its epoch (its
    token when unfenced) invoked before it, one of the op's own process if
    there is one. Ops with no such claim, and claims and reads, are left out.
    """
    targets: defaultdict[str, list[Op]] = defaultdict(list)
    for op in wanted:
        if op.f not in ("claim", "read", "read-resource"):
            targets[op.node].append(op)
    if not targets:
        return {}
    claims: defaultdict[tuple[str, Any], list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "claim" and op.type == "ok" and op.node in targets:
            claims[op.node, _lease(op)].append(op)
    out: dict[int, int] = {}
    for node, mine in targets.items():
        for op in mine:
            before = [c for c in claims.get((node, _lease(op)), ()) if c.invoke_time < op.invoke_time]
            own = [c for c in before if c.process == op.process]
            if own or before:
                out[op.index] = max(c.invoke_time for c in own or before)
    return out


def _shown(read: Op) -> Any:
    """The lease a read shows, named as :func:`_lease` names an op's (None: it shows none)."""
    e, token = read.result.get("epoch"), read.result.get("token")
    if type(e) is int:
        return ("epoch", e)
    return ("token", freeze(token)) if token is not None else None


def overwriting_commits(ops: Iterable[Op], reads: Iterable[Op]) -> dict[int, Op]:
    """For each read (by index), the ok commit of the lease it shows: the latest of its node invoked before the read completed."""
    wanted: defaultdict[str, list[Op]] = defaultdict(list)
    for r in reads:
        if _shown(r) is not None:
            wanted[r.node].append(r)
    if not wanted:
        return {}
    commits: defaultdict[tuple[str, Any], list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "commit" and op.type == "ok" and op.node in wanted:
            commits[op.node, _lease(op)].append(op)
    out: dict[int, Op] = {}
    for node, rs in wanted.items():
        for r in rs:
            done = INF if r.complete_time is None else r.complete_time
            before = [c for c in commits.get((node, _shown(r)), ()) if c.invoke_time < done]
            if before:
                out[r.index] = max(before, key=lambda c: (c.invoke_time, c.index))
    return out


def _s(t: float) -> float | None:
    return None if t == INF else round(t / 1e9, 6)


def _when(w: FaultWindow) -> str:
    start = f"{w.start / 1e9:.3f}"
    return f"{start}–{w.end / 1e9:.3f} s" if w.end is not None else f"from {start} s on (never healed)"


def _processes(pairs: Sequence[tuple[int, int]]) -> str:
    """``process 4 (op 91)``, ``processes 1 and 4 (ops 57, 91)``."""
    procs = list(dict.fromkeys(p for p, _ in pairs))
    ops = ", ".join(str(i) for _, i in pairs)
    if len(procs) == 1:
        return f"process {procs[0]} (op{'s' if len(pairs) > 1 else ''} {ops})"
    names = ", ".join(map(str, procs[:-1])) + f" and {procs[-1]}"
    return f"processes {names} (ops {ops})"


def attribute_one(
    anomaly: Anomaly, cited: Mapping[int, Op], starts: Mapping[int, int], windows: Sequence[FaultWindow],
    overwrote: Op | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """(the faults that hit the anomaly's proving ops, as JSON; one sentence saying so, or that none did).

    ``overwrote``: for a ``lost-commit``, the commit of the lease its read shows (a proving op too).
    """
    ops = [cited[i] for i in anomaly.ops if i in cited]
    end: float = max((INF if o.complete_time is None else o.complete_time for o in ops), default=INF)
    proving = [cited[i] for i in proving_ops(anomaly) if i in cited]
    extra = ""
    if overwrote is not None and overwrote.index not in anomaly.ops:
        proving.append(overwrote)
        extra = f" Op {overwrote.index} is the commit of the lease that op {ops[-1].index} shows."
    hits: dict[FaultWindow, list[tuple[int, int]]] = {}
    for op in proving:
        start = starts.get(op.index, op.invoke_time)
        for w in windows:
            if w.hits(op.process, start, INF if op.complete_time is None else op.complete_time, end):
                hits.setdefault(w, []).append((op.process, op.index))
    faults: list[dict[str, Any]] = []
    words: list[str] = []
    for w, pairs in sorted(hits.items(), key=lambda item: (item[0].start, item[0].fault)):
        for process, index in pairs:
            faults.append({"fault": w.fault, "process": process, "op": index, "start_s": _s(w.start),
                           "end_s": _s(w.until), "everyone": w.everyone})
        if w.everyone:
            words.append(f"`{w.fault}` {w.did_all} {_when(w)}, which hits every process: {_processes(pairs)}")
        else:
            who = _processes(pairs)
            words.append(f"{who} {'was' if who.startswith('process ') else 'were'} {w.did} by `{w.fault}` {_when(w)}")
    if words:
        return faults, "Fault: " + "; ".join(words) + "." + extra
    who = _processes([(op.process, op.index) for op in proving])
    if anomaly.kind in _STALE:
        return faults, f"No fault touched {who} from the claim of its lease to the stale op: it stalled on its own."
    their = "its" if who.startswith("process ") else "their"
    return faults, f"No fault touched {who} from the claim of {their} lease to the anomaly's last op: it happened without a fault.{extra}"


def attribute(verdict: Verdict, ops: Iterable[Op], windows: Sequence[FaultWindow]) -> None:
    """Give every listed anomaly of ``verdict`` its ``faults`` and ``attribution`` (``ops``: the whole history's)."""
    if not verdict.anomalies:
        return
    nodes = {a.node for a in verdict.anomalies}
    grants = [op for op in ops if op.type == "ok" and op.f in ("claim", "commit") and op.node in nodes]
    cited = verdict.cited
    lost = [cited[a.ops[-1]] for a in verdict.anomalies if a.kind == "lost-commit" and a.ops and a.ops[-1] in cited]
    overwrote = overwriting_commits(grants, [r for r in lost if r.f == "read"])
    wanted = [cited[i] for i in sorted({i for a in verdict.anomalies for i in proving_ops(a)}) if i in cited]
    starts = lease_starts(grants, [*wanted, *overwrote.values()])
    for a in verdict.anomalies:
        shown = overwrote.get(a.ops[-1]) if a.kind == "lost-commit" and a.ops else None
        a.faults, a.attribution = attribute_one(a, cited, starts, windows, shown)


def attribution_of(anomaly: Mapping[str, Any]) -> str | None:
    """An anomaly's attribution sentence, from its JSON (None: its verdict was checked without one)."""
    words = anomaly.get("attribution")
    return words if isinstance(words, str) and words else None


__all__ = ["FaultWindow", "FaultsOf", "attribute", "attribute_one", "attribution_of", "lease_starts",
           "overwriting_commits", "proving_ops"]
