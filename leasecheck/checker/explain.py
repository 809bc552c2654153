"""Plain-words descriptions of ops and anomalies, and the ``--explain`` chains.

Every anomaly carries a one-paragraph explanation with times, so that a person
can check the finding against the history by hand. ``--explain`` goes further:
it builds the precedence graph of the cited ops with networkx (real-time edges
"completed before invoked", and the edges the lease model forces, "must follow
in epoch order") and renders the cycle or chain that proves the anomaly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only --explain draws graphs: the verdict's explanations need no networkx
    import networkx as nx

from leasecheck.checker.verdict import Anomaly
from leasecheck.histories import Op


def at(t: float | None) -> str:
    """A history time (ns) in milliseconds to 3 decimals (microseconds): ``1234.568 ms``.

    Leases are judged in milliseconds (ttl, clock uncertainty), so that is the
    unit a reader compares; nanosecond digits only hid the ones that matter. A
    deadline computed from a ttl too large for any clock is infinite: said so.
    """
    if t is None:
        return "never (outcome unknown)"
    if t == math.inf:
        return "forever (the ttl outlasts any clock)"
    return f"{t / 1e6:.3f} ms"


def outcome(op: Op) -> str:
    """What the op did, in a few words."""
    if op.type == "fail":
        return f"failed ({op.result.get('reason')})"
    if op.type == "info":
        return "outcome unknown"
    if op.f == "claim":
        e = op.result.get("epoch")
        return f"granted epoch {e}" if e is not None else f"granted token {op.result.get('token')!r}"
    if op.f == "read-resource":
        r = op.result
        fence = "no fence" if r.get("fence") is None else f"fence {r.get('fence')}"
        return f"read the resource: {fence}, {len(r.get('accepted') or ())} accepted effect(s)"
    if op.f == "read":
        r = op.result
        bits = [str(r.get("status"))]
        if r.get("epoch") is not None:
            bits.append(f"epoch {r.get('epoch')}")
        elif r.get("token") is not None:  # an unfenced store names its leases by token
            bits.append(f"token {r.get('token')!r}")
        if r.get("owner") is not None:
            bits.append(f"owner {r.get('owner')!r}")
        if r.get("result") is not None:
            bits.append(f"result {r.get('result')!r}")
        return "read " + ", ".join(bits)
    return "ok"


def carried(op: Op) -> str:
    """The epoch or token an op carried, as words."""
    e = op.value.get("epoch")
    if e is not None:
        return f"epoch {e}"
    return f"token {op.value.get('token')!r}"


def describe(op: Op) -> str:
    """``op 91 (commit with epoch 41 by process 3)``."""
    if op.f in ("claim", "read", "read-resource"):
        who = f" by {op.value.get('owner')!r}" if op.f == "claim" and op.value.get("owner") is not None else ""
        return f"op {op.index} ({op.f}{who}, process {op.process})"
    return f"op {op.index} ({op.f} with {carried(op)}, process {op.process})"


def interval(op: Op) -> str:
    return f"[{at(op.invoke_time)} .. {at(op.complete_time)}]"


def precedence_graph(ops: list[Op]) -> nx.DiGraph:
    """Real-time edges among the cited ops, plus the epoch order the model forces."""
    import networkx as nx

    g: nx.DiGraph[int] = nx.DiGraph()
    for op in ops:
        g.add_node(op.index, op=op)
    for a in ops:
        for b in ops:
            if a is b:
                continue
            if a.complete_time is not None and a.complete_time < b.invoke_time:
                g.add_edge(a.index, b.index, why="completed before it was invoked")
    for a in ops:
        for b in ops:
            ea, eb = _epoch(a), _epoch(b)
            if a is not b and ea is not None and eb is not None and ea < eb and not g.has_edge(a.index, b.index):
                g.add_edge(a.index, b.index, why=f"must take effect before it (epoch {ea} < {eb})")
    return g


def _epoch(op: Op) -> int | None:
    if op.type != "ok":
        return None
    e = op.epoch
    return e if type(e) is int else None


def render_chain(anomaly: Anomaly, ops: Mapping[int, Op]) -> str:
    """The chain of ops that proves ``anomaly``, one line per op and edge."""
    cited = [ops[i] for i in anomaly.ops if i in ops]
    lines = [f"{anomaly.kind} on {anomaly.node}:"]
    for op in sorted(cited, key=lambda o: o.invoke_time):
        lines.append(f"  {describe(op)} {interval(op)}: {outcome(op)}")
    import networkx as nx

    g = precedence_graph(cited)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = []
    if cycle:
        lines.append("  cycle (no order of these ops satisfies both real time and the model):")
        for a, b in cycle:
            lines.append(f"    op {a} -> op {b}: {g.edges[a, b]['why']}")
    else:
        order = list(nx.topological_sort(g))
        for a, b in pairwise(order):
            if g.has_edge(a, b):
                lines.append(f"    op {a} -> op {b}: {g.edges[a, b]['why']}")
    return "\n".join(lines)
