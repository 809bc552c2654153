"""The checker that follows a history while it is written: each anomaly as soon as it is proven, the verdict at the end.

Why: checking after the run makes a broken backend whose first anomaly is proven
3 s into a 30 s run wait for the whole run, and a night-long soak hold its verdict
until morning. The checks are per node, and most of a node's history is settled
long before the run ends, so the checker can follow the run (as runtime monitors
do) and still give, at the end, the very verdict ``leasecheck check`` gives.

How it stays the offline checker: a node is *judged* by the same rows of the table
(:func:`~leasecheck.checker.in_memory.check_node`) on the same ops in the same
order once it is *closed*: the caller promises it gets no more ops (the harness
closes a node once it is done, nobody can touch it again and it was read, or at
the end of the run). The verdict sums the judged nodes as
:func:`~leasecheck.checker.in_memory.check_nodes` sums them (:func:`verdict_of`),
so anomalies, stats and cited ops are the offline checker's by construction.

Before a node is closed, a node that changed is *probed*: its ops so far, with
those still in flight as ``info`` (one may have taken effect or not: the benefit
of the doubt), through the same rows. What a probe finds is proven whatever
follows: the history so far is a prefix in time (the merge writes in time order),
linearizability is prefix-closed, and each named kind is proven by ops already
complete. A probe reports a finding only once, and only a kind whose finding no
later op can reword (:data:`STABLE_KINDS`; ``tests/pure/checker/test_online.py`` holds every
reported finding to appear in the final verdict, over simulated, planted, mutated
and corpus histories in every order the merge can write them).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.checker.attribution import FaultsOf, attribute
from leasecheck.checker.clean import Rules, clean_counts
from leasecheck.checker.coverage import Coverage, node_coverage
from leasecheck.checker.findings import Engine, Findings, NodeHistory
from leasecheck.checker.in_memory import DEFAULT_BUDGET, check_node, verdict_of
from leasecheck.checker.linearizability import is_fenced
from leasecheck.checker.table import CHECKS
from leasecheck.checker.verdict import Anomaly, Verdict, add_reading
from leasecheck.checker.windows import POWER_LOST, WindowsOf
from leasecheck.histories import Event, Header, HistoryReader, Op
from leasecheck.histories.reader import never_completed_ops
from leasecheck.histories.vocabulary import KINDS, SITUATIONS

#: the kinds a probe may report before its node is closed. ``non-linearizable`` is not among them: a named kind
#: proven later on the same node makes the offline checker skip it (the table's ``unless``), so it waits for the close
STABLE_KINDS: frozenset[str] = frozenset(KINDS) - {"non-linearizable"}

#: per kind, the ops that, still in flight (invoked before the finding's proof was complete), may yet make the
#: whole history's finding another one of the same kind (an earlier witness, a lease that started earlier, an owner
#: named): the probe holds such a finding back until they complete. Found by tests/pure/checker/test_online.py's searches
REWORDED_BY: dict[str, frozenset[str]] = {
    "duplicate-epoch": frozenset({"claim"}),
    "duplicate-commit": frozenset({"commit"}),
    "overlapping-lease": frozenset({"claim", "renew"}),
    "lost-commit": frozenset({"claim"}),
    # the resource kinds name one proof per payload or per effect: the first read (by index) that proves it, which
    # may be a read still in flight; a phantom entry's writers may be an effect still in flight (info so far)
    "stale-effect": frozenset({"read-resource"}),
    "phantom-effect": frozenset({"effect", "read-resource"}),
    "lost-effect": frozenset({"read-resource"}),
}

#: a finding that cites a read of the resource is judged against every effect invoked by the time that read
#: completed (equal times are concurrent), and one invoked at that very time may be written after the read's
#: completion: a probe holds it back until the history has moved past the read's completion
RESOURCE_READ = "read-resource"

#: kinds a probe tells *provisionally*: that the node's ops so far have no linearization is proven whatever follows
#: (linearizability is prefix-closed), but the whole history's verdict may name it by a proof kind found later on
#: the same node (which makes the table skip ``non-linearizable``). Told at once, so that ``--fail-fast`` and the
#: reader need not wait for the node's close; the verdict then lists this kind or a proof kind on that node
PROVISIONAL_KINDS: frozenset[str] = frozenset({"non-linearizable"})

#: the longest one probe's linearizability search may take (a probe that gives up proves nothing, and is retried)
PROBE_BUDGET_S = 0.2


@dataclass(frozen=True, slots=True)
class Proven:
    """An anomaly the checker proved while the history was still being written, and when its proof was complete."""

    anomaly: Anomaly
    #: the history time (ns) at which its last proving op completed (or was invoked, if still in flight)
    proof_ns: int
    #: found by a probe of a node still open (True), or when the node was judged (False)
    early: bool
    #: a :data:`PROVISIONAL_KINDS` finding of a probe: the node is invalid, the verdict may name it by another kind
    provisional: bool = False


def proof_time(anomaly: Anomaly, ops: Iterable[Op]) -> int:
    """When ``anomaly``'s proof was complete: the latest completion (or invoke, for an op in flight) of the ops it cites."""
    wanted = set(anomaly.ops)
    return max((op.invoke_time if op.complete_time is None else op.complete_time for op in ops if op.index in wanted),
               default=0)


class OnlineChecker:
    """Follows one history's ops as they complete (see the module docstring).

    Feed it :meth:`add` with every op the history's reader yields, in that order,
    and keep :attr:`in_flight` the reader's dict of ops in flight
    (``HistoryReader.ops(open_ops=checker.in_flight)``); call :meth:`probe` as
    often as you like, :meth:`close` for a node that gets no more ops, and
    :meth:`finish` once the reader is exhausted.
    """

    def __init__(self, header: Header, nemesis: Sequence[Event] = (), *, budget: float | None = DEFAULT_BUDGET,
                 engine: Engine = "auto", windows: WindowsOf | None = None, faults: FaultsOf | None = None,
                 losses_ahead: bool = False) -> None:
        """``losses_ahead``: a power loss may come (the run has a power-loss fault). A lease granted since the previous
        restart counts as ``granted-before-power-loss`` at the next loss, however long before it its node was judged,
        so a judged node's situations are counted only once a loss started after its last grant (or at the end);
        without, at its judging, and no node waits."""
        self.header = header
        #: the reader's nemesis events so far (its list: it grows as the reader reads)
        self.nemesis = nemesis
        self.budget = budget
        self.engine = engine
        self.windows = windows
        self.faults = faults
        #: process -> invoke event of the ops in flight (the reader's dict)
        self.in_flight: dict[int, Any] = {}
        self._rules = Rules.of(header)
        self._open: dict[str, list[Op]] = {}
        self._dirty: set[str] = set()
        #: per open node, the findings a probe reported already: (kind, ops, explanation) (two findings may cite the
        #: same ops: a read that lists two entries nobody wrote)
        self._told: dict[str, set[tuple[str, tuple[int, ...], str]]] = {}
        self._found = Findings()
        self._types: Counter[str] = Counter()
        self._nodes = 0
        self._cited: dict[int, Op] = {}
        #: the ok claims and commits of every node with an anomaly (what attribution reads), with the cited ops
        self._kept: list[Op] = []
        self._coverage: Counter[str] = Counter()
        self.losses_ahead = losses_ahead
        #: judged nodes whose situations wait for the next power loss (``losses_ahead``)
        self._awaiting: list[list[Op]] = []
        self._windows_of: tuple[int, Any] = (-1, ((), ()))
        self._spent = 0.0
        self.closed = 0
        #: some op of the history named an integer epoch: a node with none so far may still turn out fenced, and be
        #: judged by the other rules (a backend that fences some nodes only): its findings wait for its close
        self._fenced_seen = False
        #: the latest time of an op read so far (a probe knows every op invoked before it)
        self._latest = 0

    # ------------------------------------------------------------------ feeding

    def add(self, op: Op) -> None:
        """An op the reader yielded (completed, or still open at the history's end)."""
        nops = self._open.get(op.node)
        if nops is None:
            nops = self._open[op.node] = []
        nops.append(op)
        self._dirty.add(op.node)
        t = op.invoke_time if op.complete_time is None else op.complete_time
        if t > self._latest:
            self._latest = t
        if not self._fenced_seen and op.epoch.__class__ is int:
            self._fenced_seen = True

    @property
    def open_nodes(self) -> int:
        return len(self._open)

    def probe(self) -> list[Proven]:
        """Check every node that changed since the last probe on its ops so far; the findings not reported before."""
        out: list[Proven] = []
        dirty, self._dirty = self._dirty, set()
        if not dirty:
            return out
        flying: dict[str, list[Any]] = {}
        now = self._latest
        for inv in self.in_flight.values():
            now = max(now, inv.time)
            if inv.node in dirty:
                flying.setdefault(inv.node, []).append(inv)
        if self.nemesis:
            now = max(now, self.nemesis[-1].time)
        waiting: set[str] = set()
        for node in sorted(dirty):
            nops = self._open.get(node)
            if nops is None:
                continue
            pending = flying.get(node, [])
            if pending:
                nops = with_in_flight(nops, pending)
            elif clean_counts(nops, self._rules) is not None:
                continue
            fenced = is_fenced(nops)
            if not fenced and self._fenced_seen:
                continue
            found = Findings()
            history = NodeHistory(node, nops, self.header, fenced, self._node_engine, time.monotonic() + PROBE_BUDGET_S)
            for row in CHECKS:
                if row.applies(history, found):
                    row.run(history, found)
            told = self._told.setdefault(node, set())
            for a in found.anomalies:
                key = (a.kind, tuple(a.ops), a.explanation)
                if a.kind in PROVISIONAL_KINDS:
                    if (a.kind, (), "") not in told:  # once per node: its verdict is the news
                        told.add((a.kind, (), ""))
                        out.append(Proven(a, proof_time(a, nops), early=True, provisional=True))
                    continue
                if a.kind not in STABLE_KINDS or key in told:
                    continue
                proof = proof_time(a, nops)
                rewording = REWORDED_BY.get(a.kind, frozenset())
                if any(inv.f in rewording and inv.time <= proof for inv in pending):
                    continue  # asked again once they complete (the node is dirty then)
                if any(op.f == RESOURCE_READ and op.index in a.ops and (op.complete_time or now) >= now for op in nops):
                    waiting.add(node)  # asked again at the next probe, until the history moved past the read
                    continue
                told.add(key)
                out.append(Proven(a, proof, early=True))
        self._dirty |= waiting
        return out

    # ------------------------------------------------------------------ judging

    def close(self, node: str) -> list[Proven]:
        """Judge ``node`` (it gets no more ops) and forget its ops; its anomalies no probe reported."""
        return self._judge([node])

    def close_all(self) -> list[Proven]:
        """Judge every node still open (the reader is exhausted: the history is whole); their anomalies no probe reported."""
        return self._judge(sorted(self._open))

    def finish(self) -> Verdict:
        """:meth:`close_all`, then the whole history's verdict."""
        self.close_all()
        return self.verdict()

    def verdict(self) -> Verdict:
        """The verdict of the nodes judged so far (the whole history's, after :meth:`finish`)."""
        found = self._found
        found.unknown_nodes.sort()
        verdict = verdict_of(found, self._nodes, self._types, dict(self._cited))
        if self.windows is not None:
            counts = self._coverage + self._awaiting_counts()
            verdict.coverage = Coverage({s: counts[s] for s in SITUATIONS})
        if self.faults is not None:
            attribute(verdict, self._kept, self.faults(self.nemesis))
        return verdict

    def verdict_of(self, reader: HistoryReader) -> Verdict:
        """:meth:`verdict`, once ``reader`` (the one this checker followed) is exhausted, with what the reader saw of the
        history: its header, warnings and event counts, as ``check_source`` gives them."""
        return add_reading(self.verdict(), reader.header, reader)

    def coverage_so_far(self) -> Coverage:
        """The situations the ops read so far reached: the judged nodes' counts, with the open nodes' as they stand.

        What a run's deadline asks while it waits for a situation (re-reading the file would cost a soak's whole
        history in memory); ``leasecheck check`` counts the same on the file once the nodes are closed. A deadline
        ends the run on it, so it must not count what an op in flight may yet take back: an open node with ops in
        flight counts, per situation, the lesser of its ops as they stand and with those in flight as ``info`` (a
        commit in flight ends its lease at its invoke: a Postgres run under power-loss counted two leases expiring
        during the cut while their commits waited on the dead store, ended on that, and was ``unknown`` for want of
        them)."""
        counts = self._coverage + self._awaiting_counts()
        if self.windows is not None and self._open:
            store, skewed = self._current_windows()
            flying: dict[str, list[Any]] = {}
            for inv in self.in_flight.values():
                flying.setdefault(inv.node, []).append(inv)
            settled = [nops for node, nops in self._open.items() if node not in flying]
            counts.update(node_coverage(self.header, settled, store, skewed).counts)
            for node, invs in flying.items():
                nops = self._open.get(node)
                if nops is None:
                    continue
                as_is = node_coverage(self.header, [nops], store, skewed).counts
                as_info = node_coverage(self.header, [with_in_flight(nops, invs)], store, skewed).counts
                counts.update({s: min(as_is[s], as_info[s]) for s in SITUATIONS})
        return Coverage({s: counts[s] for s in SITUATIONS})

    @property
    def _node_engine(self) -> Engine:
        """The engine each node's check runs with (``check_nodes``' choice)."""
        return "search" if self.engine == "search" else "auto"

    def _judge(self, nodes: list[str]) -> list[Proven]:
        out: list[Proven] = []
        found = self._found
        began = time.monotonic()
        deadline = None if self.budget is None else began + max(0.0, self.budget - self._spent)
        judged: list[list[Op]] = []
        for node in nodes:
            nops = self._open.pop(node, None)
            self._dirty.discard(node)
            told = self._told.pop(node, set())
            if nops is None:
                continue
            self._nodes += 1
            self.closed += 1
            judged.append(nops)
            if self.engine == "auto":
                counts = clean_counts(nops, self._rules)
                if counts is not None:
                    self._types.update({"ok": counts[0], "fail": counts[1], "info": counts[2]})
                    continue
            self._types.update(op.type for op in nops)
            before = len(found.anomalies)
            check_node(NodeHistory(node, nops, self.header, is_fenced(nops), self._node_engine, deadline), found)
            new = found.anomalies[before:]
            if new:
                wanted = {i for a in new for i in a.ops}
                self._cited.update((op.index, op) for op in nops if op.index in wanted)
                self._kept.extend(op for op in nops if op.index in wanted
                                  or (op.type == "ok" and op.f in ("claim", "commit")))
                out.extend(Proven(a, proof_time(a, nops), early=False) for a in new
                           if (a.kind, tuple(a.ops), a.explanation) not in told)
        self._spent += time.monotonic() - began
        if self.windows is not None and judged:
            self._count(judged)
        return out

    def _count(self, judged: list[list[Op]]) -> None:
        """Count the situations of judged nodes, and of those waiting for a power loss that now had theirs."""
        store, skewed = self._current_windows()
        if self.losses_ahead:
            latest = max((w.start for w in store if POWER_LOST in w.roles), default=None)
            waiting, judged, self._awaiting = self._awaiting + judged, [], []
            for nops in waiting:
                (judged if _settled(nops, latest) else self._awaiting).append(nops)
        if judged:
            self._coverage.update(node_coverage(self.header, judged, store, skewed).counts)

    def _awaiting_counts(self) -> Counter[str]:
        """The situations of the judged nodes still waiting for a power loss, as they stand now."""
        if not self._awaiting:
            return Counter()
        store, skewed = self._current_windows()
        return Counter(node_coverage(self.header, self._awaiting, store, skewed).counts)

    def _current_windows(self) -> Any:
        """The fault windows of the nemesis events read so far (made again only when there are new ones)."""
        n = len(self.nemesis)
        if self._windows_of[0] != n:
            assert self.windows is not None
            self._windows_of = (n, self.windows(self.nemesis))
        return self._windows_of[1]


def with_in_flight(nops: list[Op], invokes: Iterable[Any]) -> list[Op]:
    """A node's ops read so far with its ``invokes`` still in flight as ``info`` ops (the benefit of the doubt: each
    may have taken effect or not), as a probe judges them and the coverage so far counts them."""
    return nops + list(never_completed_ops({inv.process: inv for inv in invokes}))


def _settled(nops: list[Op], latest_loss: float | None) -> bool:
    """Can no power loss to come change what a judged node's ops reached? Yes when a loss started after its last
    grant (the first loss after a grant decides whether it was acknowledged in the last unsynced interval), or when
    it has no grant at all (its claims were all made before any restart still to come)."""
    grants = [op.complete_time for op in nops if op.type == "ok" and op.f == "claim" and op.complete_time is not None]
    return not grants or (latest_loss is not None and max(grants) < latest_loss)


def follow(source: str | os.PathLike[str] | Iterable[bytes | str], *, probe_every: int = 1, budget: float | None = DEFAULT_BUDGET,
           engine: Engine = "auto", windows: WindowsOf | None = None, faults: FaultsOf | None = None,
           losses_ahead: bool = False) -> tuple[Verdict, list[Proven]]:
    """Check a whole history (a path, or lines) as the harness follows a run: probing every ``probe_every`` ops,
    each node judged at the end. (verdict, every finding in the order it was reported); raises ``HistoryError``."""
    reader = HistoryReader(source)
    checker = OnlineChecker(reader.header, reader.nemesis, budget=budget, engine=engine, windows=windows, faults=faults,
                            losses_ahead=losses_ahead)
    proofs: list[Proven] = []
    for n, op in enumerate(reader.ops(open_ops=checker.in_flight), 1):
        checker.add(op)
        if n % probe_every == 0:
            proofs += checker.probe()
    proofs += checker.close_all()
    return checker.verdict_of(reader), proofs


__all__ = ["PROBE_BUDGET_S", "PROVISIONAL_KINDS", "REWORDED_BY", "STABLE_KINDS", "OnlineChecker", "Proven", "follow", "proof_time"]
