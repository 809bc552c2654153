"""What a check is given (one node's ops) and what it gives back (findings).

Every row of the table in :mod:`leasecheck.checker.table` is a pure function
``check(node, found)``: it reads a :class:`NodeHistory` and adds anomalies to
:class:`Findings`. Keeping the two signatures the same for every kind is what lets
one table drive the checker.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Literal

from leasecheck.checker.verdict import Anomaly
from leasecheck.histories import Header, Op
from leasecheck.histories.format import EffectFence
from leasecheck.histories.vocabulary import AnomalyKind

#: how linearizability (and the rest) is decided. ``"auto"``: ordinary fenced nodes proven
#: clean in one pass (:mod:`leasecheck.checker.clean`), the table with the epoch-order
#: decision on the others; ``"reference"``: the table on every node (what ``"auto"`` is held
#: to); ``"search"``: the table on every node with the WGL search for linearizability
Engine = Literal["auto", "reference", "search"]

#: detailed findings kept per (node, kind); the rest are only counted
MAX_PER_KIND = 100

NS_PER_MS = 1_000_000


@dataclass(slots=True)
class NodeHistory:
    """One node's ops (nodes are independent) and what every check needs to judge them."""

    node: str
    ops: list[Op]
    header: Header
    #: any op names an integer epoch: judged by epoch order, else by grant order
    fenced: bool
    #: ``"search"`` always runs the WGL search for linearizability (tests hold it to the fast path)
    engine: Engine = "auto"
    #: ``time.monotonic()`` after which a linearizability search gives up (None: never)
    deadline: float | None = None

    @property
    def effect_fence(self) -> EffectFence:
        """The header's rule for the protected resource: does a claim lift its fence (``"lease"``)
        or only an accepted effect (``"token"``)? ``stale-effect`` and the model follow it."""
        return self.header.effect_fence

    @property
    def surely_held_ns(self) -> float:
        """How long after its last grant or renew was invoked a lease is provably still held.

        The store may misjudge the ttl by up to the clock uncertainty, so only
        ttl − uncertainty is sure.
        """
        return (self.header.ttl_ms - self.header.clock_uncertainty_ms) * NS_PER_MS

    @property
    def surely_expired_ns(self) -> float:
        """How long after its last grant or renew completed a lease has provably expired (ttl + uncertainty)."""
        return (self.header.ttl_ms + self.header.clock_uncertainty_ms) * NS_PER_MS


@dataclass
class Findings:
    """Collects anomalies, keeping at most ``limit`` per (node, kind) and counting all.

    Also what the linearizability check learns about the whole history: the
    nodes whose search gave up, and how many nodes needed a search at all.
    """

    limit: int = MAX_PER_KIND
    anomalies: list[Anomaly] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    unknown_nodes: list[str] = field(default_factory=list)
    searched: int = 0
    _per: Counter[tuple[str, str]] = field(default_factory=Counter)
    _kinds: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, kind: AnomalyKind, node: str, ops: list[Op], explanation: str) -> None:
        self.counts[kind] += 1
        self._per[node, kind] += 1
        self._kinds[node].add(kind)
        if self._per[node, kind] <= self.limit:
            self.anomalies.append(Anomaly(kind, node, [op.index for op in ops], explanation))

    def kinds_on(self, node: str) -> set[str]:
        """The kinds found on ``node`` so far (listed or only counted)."""
        return self._kinds.get(node, set())
