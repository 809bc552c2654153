"""The checker: pure functions from a history to a verdict.

``check_source(path)`` reads and checks one history; ``check(header, ops)``
checks ops already in memory; ``linearizable(header, node_ops)`` decides one
node. ``CHECKS`` is the table of anomaly checks that drives ``check`` (one row
per check; the kinds themselves are named in ``leasecheck.histories.vocabulary``).
Nothing here talks to a database or a network: it only judges histories.

What it holds, from a history file to a verdict:

* reading and splitting: :mod:`.core` (the entry point, small or big), :mod:`.in_memory` (ops in memory, node by
  node), :mod:`.split` (when a history is split), :mod:`.partitioned` (a big history split by node, checked on every
  core) with :mod:`.jobs` (the worker processes), :mod:`.online` (a history checked while it is written);
* the named checks: :mod:`.table` (``CHECKS``), :mod:`.findings` (what a check is given and gives back),
  :mod:`.leases` (a node's leases as the checks see them), :mod:`.clean` (one pass that clears an ordinary node),
  and the families of docs/contracts/anomaly-kinds.md, one module each (``kinds_*``: stale, grant order, commits,
  resource, timing);
* linearizability: :mod:`.linearizability` (one node: :mod:`.order`, the epoch order, first; :mod:`.search`, Wing &
  Gong with Lowe's improvements, as fallback), on :mod:`.model` (the lease and resource models) and
  :mod:`.precedence` (real-time order);
* what a verdict says: :mod:`.verdict`, :mod:`.explain` (plain words, ``--explain``), :mod:`.attribution` (which
  fault hit an anomaly's processes), over :mod:`.windows` (a fault's window as the checker reads it);
* coverage, how often a run reached each dangerous interleaving: :mod:`.coverage`, over :mod:`.coverage_leases`
  (a lease as the situations see it), counted by :mod:`.coverage_loops` (a small node) or :mod:`.coverage_sweeps`
  (a big one), and :mod:`.coverage_inside` (a worker stopped or killed mid-op).
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
