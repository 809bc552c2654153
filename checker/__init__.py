"""The checker: pure functions from a history to a verdict.

``check_source(path)`` reads and checks one history; ``check(header, ops)``
checks ops already in memory; ``linearizable(header, node_ops)`` decides one
node. Nothing here talks to a database or a network: it only judges histories.
"""

from leasecheck.checker.core import DEFAULT_BUDGET, check, check_source, decide_node, is_fenced, linearizable
from leasecheck.checker.verdict import KINDS, LINEARIZABILITY_KINDS, Anomaly, Verdict

__all__ = [
    "DEFAULT_BUDGET",
    "KINDS",
    "LINEARIZABILITY_KINDS",
    "Anomaly",
    "Verdict",
    "check",
    "check_source",
    "decide_node",
    "is_fenced",
    "linearizable",
]
