"""The checker: pure functions from a history to a verdict.

``check_source(path)`` reads and checks one history; ``check(header, ops)``
checks ops already in memory; ``linearizable(header, node_ops)`` decides one
node. ``CHECKS`` is the table of anomaly checks that drives ``check`` (one row
per check; the kinds themselves are named in ``leasecheck.histories.vocabulary``).
Nothing here talks to a database or a network: it only judges histories.
"""

from leasecheck.checker.core import check_source
from leasecheck.checker.in_memory import DEFAULT_BUDGET, check, linearizable
from leasecheck.checker.linearizability import decide_node, is_fenced
from leasecheck.checker.table import CHECKS, Check
from leasecheck.checker.verdict import Anomaly, Verdict
from leasecheck.histories.vocabulary import KINDS, LINEARIZABILITY_KINDS, TIMING_KINDS

__all__ = [
    "CHECKS",
    "DEFAULT_BUDGET",
    "KINDS",
    "LINEARIZABILITY_KINDS",
    "TIMING_KINDS",
    "Anomaly",
    "Check",
    "Verdict",
    "check",
    "check_source",
    "decide_node",
    "is_fenced",
    "linearizable",
]
