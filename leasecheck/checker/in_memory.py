"""Ops in memory → verdict, node by node: the check both ways of reading a history end in.

Per node (nodes are independent), every row of the table of checks
(:mod:`leasecheck.checker.table`) runs in turn: the named kinds straight from
their definitions, then, unless one of them already proves the node has no
linearization, linearizability (:mod:`leasecheck.checker.linearizability`).
A node that one pass proves clean (:mod:`leasecheck.checker.clean`: most nodes
of a real history) skips the table, which would find nothing there.
This module only groups ops by node, runs the table, and orders and counts
what it found. It exists apart from the driver (:mod:`leasecheck.checker.core`)
because a partition of a big history (:mod:`leasecheck.checker.partitioned`)
is checked by the very same functions, and the driver runs those partitions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

from leasecheck.checker.clean import Rules, clean_counts
from leasecheck.checker.findings import Engine, Findings, NodeHistory
from leasecheck.checker.linearizability import decide_node, is_fenced
from leasecheck.checker.memory import no_gc
from leasecheck.checker.table import CHECKS
from leasecheck.checker.verdict import Validity, Verdict
from leasecheck.histories import Header, Op
from leasecheck.histories.vocabulary import KINDS

#: default time budget (seconds) for all linearizability searches of one history
DEFAULT_BUDGET = 60.0


def linearizable(header: Header, ops: list[Op], engine: Literal["fast", "search"] = "fast", budget: float | None = None) -> bool | None:
    """Is one node's history linearizable? True, False, or None (search out of budget).

    ``engine="fast"`` decides from the epoch order where it can (the checker's
    normal path); ``"search"`` always runs the WGL search. Tests hold the two
    to the same answer. The protected resource is judged by the header's
    ``effect_fence``.
    """
    deadline = None if budget is None else time.monotonic() + budget
    d = decide_node(ops, "auto" if engine == "fast" else "search", deadline, header.effect_fence)
    return None if d is None else d.ok


def check(
    header: Header,
    ops: Iterable[Op],
    *,
    budget: float | None = DEFAULT_BUDGET,
    engine: Engine = "auto",
) -> Verdict:
    """Check a history's ops (any order) and return the verdict of docs/contracts/verdict.md.

    ``engine`` (see :data:`~leasecheck.checker.findings.Engine`): with ``"auto"``
    a node that one pass proves clean (:func:`~leasecheck.checker.clean.clean_counts`)
    skips the table, which would find nothing there; every other node runs it, so
    the verdict is the reference's (``"reference"``) to the letter. Works on any
    subset of a history's nodes: partitions of one history give verdicts that merge.
    """
    with no_gc():
        return check_nodes(header, by_node_of(ops), budget=budget, engine=engine)


def check_nodes(header: Header, by_node: dict[str, list[Op]], *, budget: float | None = DEFAULT_BUDGET,
                engine: Engine = "auto") -> Verdict:
    """:func:`check` of ops already grouped by node (:func:`by_node_of`), so that coverage can count the same groups."""
    with no_gc():
        deadline = None if budget is None else time.monotonic() + budget
        ok = fail = info = 0
        rest: list[str] = []
        if engine == "auto":
            rules = Rules.of(header)
            for node, nops in by_node.items():
                counts = clean_counts(nops, rules)
                if counts is None:
                    rest.append(node)
                else:
                    ok += counts[0]
                    fail += counts[1]
                    info += counts[2]
        else:
            rest = list(by_node)
        types: Counter[str] = Counter({"ok": ok, "fail": fail, "info": info})
        types.update(op.type for node in rest for op in by_node[node])
        node_engine: Engine = "search" if engine == "search" else "auto"
        found = Findings()
        for node in sorted(rest):
            nops = by_node[node]
            check_node(NodeHistory(node, nops, header, is_fenced(nops), node_engine, deadline), found)
        return _verdict(found, by_node, types)


def by_node_of(ops: Iterable[Op]) -> dict[str, list[Op]]:
    """Each node's ops, in the order given (nodes in order of first appearance)."""
    by_node: dict[str, list[Op]] = {}
    for op in ops:
        try:
            by_node[op.node].append(op)
        except KeyError:  # a node's first op: cheaper than a lookup for each of the others
            by_node[op.node] = [op]
    return by_node


def check_node(node: NodeHistory, found: Findings) -> None:
    """Run every row of the table that applies to ``node``, in order."""
    for row in CHECKS:
        if row.applies(node, found):
            row.run(node, found)


def _verdict(found: Findings, by_node: dict[str, list[Op]], types: Counter[str]) -> Verdict:
    """What was found, as the verdict of docs/contracts/verdict.md: anomalies by node and kind order, and the counts."""
    cited: dict[int, Op] = {}
    if found.anomalies:
        wanted = {i for a in found.anomalies for i in a.ops}
        cited = {op.index: op for nops in by_node.values() for op in nops if op.index in wanted}
    return verdict_of(found, len(by_node), types, cited)


def verdict_of(found: Findings, nodes: int, types: Counter[str], cited: dict[int, Op]) -> Verdict:
    """The verdict of what was found on ``nodes`` nodes whose ops were of ``types``; ``cited``: the ops the anomalies cite.

    Apart from :func:`_verdict` because the checker that follows a run
    (:mod:`leasecheck.checker.online`) drops each node once judged: it keeps the
    counts and the cited ops, not the nodes.
    """
    order_of: dict[str, int] = {k: i for i, k in enumerate(KINDS)}
    anomalies = sorted(found.anomalies, key=lambda a: (a.node, order_of[a.kind], a.ops))
    valid: Validity = False if anomalies else ("unknown" if found.unknown_nodes else True)
    stats: dict[str, Any] = {
        "ops": sum(types.values()),
        "nodes": nodes,
        "ok": types["ok"],
        "fail": types["fail"],
        "info": types["info"],
        "searched_nodes": found.searched,
        "anomalies": {k: found.counts[k] for k in KINDS if found.counts[k]},
    }
    if sum(found.counts.values()) > len(anomalies):
        stats["anomalies_listed"] = len(anomalies)
    return Verdict(valid, anomalies, stats, unknown_nodes=found.unknown_nodes, cited=cited)
