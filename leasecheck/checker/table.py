"""The table of anomaly checks that drives the checker, one row per check.

Like Elle's anomaly relations, what the checker looks for is data: each row names
the kinds a check reports, the nodes it applies to (fenced ones are judged by
epoch order, unfenced ones by grant order), the check function, and the kinds
that make it redundant once found on the node. :func:`leasecheck.checker.check`
runs the rows in order on every node (but those :mod:`leasecheck.checker.clean`
proves the rows find nothing on) and knows no kind by name.

A kind's class (does it prove ``non-linearizable``?) is declared once, with its
name, in :mod:`leasecheck.histories.vocabulary`; the ``non-linearizable`` row
reads it from there. Adding a kind: name it in the vocabulary, write its check
(``check(node, found)``, in its family's module: :mod:`leasecheck.checker.kinds_stale`,
:mod:`~leasecheck.checker.kinds_commits`, :mod:`~leasecheck.checker.kinds_resource` (what a read of the
protected resource proves) or :mod:`~leasecheck.checker.kinds_timing`), add a row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from leasecheck.checker import kinds_commits, kinds_resource, kinds_stale, kinds_timing
from leasecheck.checker.findings import Findings, NodeHistory
from leasecheck.checker.linearizability import non_linearizable
from leasecheck.histories.vocabulary import LINEARIZABILITY_KINDS, AnomalyKind

#: a check: reads one node's ops, adds what it finds
NodeCheck = Callable[[NodeHistory, Findings], None]


@dataclass(frozen=True, slots=True)
class Check:
    """One row: a pure function that finds some anomaly kinds on one node."""

    #: the kinds it may report
    reports: tuple[AnomalyKind, ...]
    run: NodeCheck
    #: the nodes it applies to: fenced ones (True), unfenced ones (False), or all (None)
    fenced: bool | None = None
    #: kinds that, already found on the node, make this check pointless (they imply its verdict)
    unless: frozenset[str] = frozenset()
    #: a timing check, defined by the ttl: only for leases that end at a deadline (header ``lease_expiry``)
    timed: bool = False

    def applies(self, node: NodeHistory, found: Findings) -> bool:
        """Should this row run on ``node``, given what earlier rows found there?"""
        if self.fenced is not None and self.fenced != node.fenced:
            return False
        if self.timed and not node.header.deadlines:
            return False
        return not (self.unless and self.unless & found.kinds_on(node.node))


#: every check, in the order they run on each node; a row with ``unless`` runs after
#: the rows that report those kinds
CHECKS: tuple[Check, ...] = (
    Check(
        ("duplicate-epoch", "epoch-regression", "stale-renew", "stale-commit", "stale-effect"),
        kinds_stale.epoch_order,
        fenced=True,
    ),
    Check(("overlapping-lease",), kinds_timing.overlapping_fenced, fenced=True, timed=True),
    Check(("stale-renew", "stale-commit", "stale-effect"), kinds_stale.grant_order, fenced=False),
    Check(("overlapping-lease",), kinds_timing.overlapping_unfenced, fenced=False, timed=True),
    Check(("duplicate-commit", "lost-commit"), kinds_commits.commits),
    Check(("stale-effect", "fence-regression", "phantom-effect", "lost-effect"), kinds_resource.resource_reads),
    Check(("stuck-lease",), kinds_timing.stuck, timed=True),
    Check(("premature-expiry",), kinds_timing.premature_expiry, fenced=True, timed=True),
    Check(("non-linearizable",), non_linearizable, unless=LINEARIZABILITY_KINDS),
)
