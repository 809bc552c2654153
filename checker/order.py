"""Deciding linearizability from the epoch order, without a search.

Under the lease model every op of a fenced node belongs to one epoch, and a
linearization is a sequence of *blocks*: the initial READY state, then for each
epoch in increasing order its claim, its renews and RUNNING reads, at most one
release or commit, and the reads of the state that left. Block keys are
``4·epoch + phase`` (phase 0 claim, 1 running, 2 end, 3 after). Ops inside a
block do not change the state, so they may go in any order. A real-time order
can be extended to a total order that respects given blocks iff no op completes
before the invoke of an op in an earlier block, which one pass over the ops
sorted by completion time decides.

Indeterminate ops only ever take effect when something needs them: an info
claim when an epoch is used but never granted by an ok claim (matched with a
bipartite matching), an info release or commit when a read shows its result
(the earliest-invoked candidate is always best). With those choices made this
is an exact decision procedure; the search is only the fallback for nodes it
does not cover (unfenced tokens, reads without an epoch).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import networkx as nx

from leasecheck.checker.explain import at, describe
from leasecheck.checker.kinds import stale_effects
from leasecheck.checker.model import READY, RUNNING, SUCCEEDED, agrees, owner_of, result_of
from leasecheck.checker.precedence import MaxBefore
from leasecheck.histories import Op

PHASE = {"claim": 0, "renew": 1, "commit": 2, "release": 2}


@dataclass(slots=True)
class Decision:
    """``ok`` False comes with the ops that prove it and why, in plain words."""

    ok: bool
    ops: list[Op] = field(default_factory=list)
    why: str = ""
    #: True when the WGL search decided (the epoch order could not)
    searched: bool = False


class Undecided(Exception):
    """The node is outside what the epoch order decides: search it instead."""


def _block(op: Op) -> int:
    e = op.epoch
    if op.f == "read":
        status = op.result.get("status")
        return 4 * e + (1 if status == RUNNING else 3)
    return 4 * e + PHASE[op.f]


def _no(ops: list[Op], why: str) -> Decision:
    return Decision(False, sorted(ops, key=lambda o: o.index), why)


def decide(ops: list[Op]) -> Decision:
    """Is the lease object of one fenced node linearizable? Raises :class:`Undecided`.

    ``ops`` are the node's ops (any order); effects, failed ops, and info reads
    and renews are ignored here (the protected resource is checked separately,
    and the others cannot change the state).
    """
    done: list[Op] = []
    maybe_claims: list[Op] = []
    maybe_ends: list[Op] = []
    for op in ops:
        if op.f == "effect" or op.type == "fail":
            continue
        if op.type == "ok":
            if type(op.epoch) is not int:
                raise Undecided(f"op {op.index} names no epoch")
            done.append(op)
        elif op.f == "claim":
            maybe_claims.append(op)
        elif op.f in ("commit", "release"):
            if type(op.value.get("epoch")) is not int:
                raise Undecided(f"op {op.index} names no epoch")
            maybe_ends.append(op)

    claim: dict[int, Op] = {}
    end: dict[int, Op] = {}
    after: dict[int, list[Op]] = defaultdict(list)
    used: dict[int, Op] = {}
    for op in sorted(done, key=lambda o: o.index):
        e = op.epoch
        if op.f == "claim":
            if e <= 0:
                return _no([op], f"{describe(op)} was granted epoch {e}, but epochs start above 0.")
            if e in claim:
                return _no([claim[e], op], f"{describe(claim[e])} and {describe(op)} were both granted epoch {e}.")
            claim[e] = op
            continue
        if op.f in ("commit", "release"):
            if e in end:
                return _no([end[e], op], f"{describe(end[e])} and {describe(op)} both ended the lease of epoch {e}.")
            end[e] = op
        elif op.f == "read" and op.result.get("status") != RUNNING:
            if e == 0:
                if op.result.get("status") != READY:
                    return _no([op], f"{describe(op)} read {op.result.get('status')} with epoch 0, before any claim.")
                continue
            after[e].append(op)
        if e <= 0:
            return _no([op], f"{describe(op)} names epoch {e}, which no claim can grant.")
        used.setdefault(e, op)

    # which end each epoch's after-reads need: an ok one, or the earliest fitting info one
    if done:
        seen = MaxBefore((o for o in done), key=_block)
    chosen: list[tuple[Op, int]] = []
    for e, reads in after.items():
        statuses = {r.result.get("status") for r in reads}
        if len(statuses) > 1:
            a = next(r for r in reads if r.result.get("status") == READY)
            b = next(r for r in reads if r.result.get("status") == SUCCEEDED)
            return _no([a, b], f"{describe(a)} and {describe(b)} saw epoch {e} both released and committed.")
        want = "release" if READY in statuses else "commit"
        results = {repr(r.result.get("result")) for r in reads} if want == "commit" else set()
        if len(results) > 1:
            return _no(reads[:2], f"{describe(reads[0])} and {describe(reads[1])} read different results of epoch {e}.")
        sample = reads[0]
        if e in end:
            x = end[e]
            if x.f != want or (want == "commit" and not agrees(result_of(x), sample.result.get("result"))):
                return _no([x, sample], f"{describe(sample)} {_shows(sample)}, but epoch {e} ended with {describe(x)}.")
            continue
        fits = [
            m for m in maybe_ends
            if m.value.get("epoch") == e and m.f == want
            and (want == "release" or agrees(result_of(m), sample.result.get("result")))
        ]
        fits.sort(key=lambda m: m.invoke_time)
        if not fits:
            return _no([sample], f"{describe(sample)} {_shows(sample)}, but no {want} of epoch {e} could have done that.")
        chosen.append((fits[0], 4 * e + 2))

    # at most one commit, and it ends everything
    committed = [x for x in end.values() if x.f == "commit"] + [m for m, _ in chosen if m.f == "commit"]
    if len(committed) > 1:
        a, b = sorted(committed, key=lambda o: o.index)[:2]
        return _no([a, b], f"{describe(a)} and {describe(b)} both committed the node.")
    if committed:
        c = committed[0]
        ce = c.value.get("epoch")
        higher = [o for o in done if o.epoch > ce]
        if higher:
            h = min(higher, key=lambda o: o.index)
            return _no([c, h], f"{describe(c)} committed the node with epoch {ce}, but {describe(h)} names the later "
                               f"epoch {h.epoch}: no lease follows a commit.")

    # epochs used with no ok claim need an info claim each
    owners: dict[int, set[object]] = defaultdict(set)
    for op in done:
        if op.f == "read" and op.result.get("status") in (RUNNING, SUCCEEDED):
            owners[op.epoch].add(repr(op.result.get("owner")))
            if op.epoch in claim and not agrees(owner_of(claim[op.epoch]), op.result.get("owner")):
                c = claim[op.epoch]
                return _no([c, op], f"{describe(op)} shows owner {op.result.get('owner')!r} for epoch {op.epoch}, "
                                    f"but {describe(c)} was granted it for {owner_of(c)!r}.")
    needed = sorted(e for e in used if e not in claim)
    if needed:
        for e in needed:
            if len(owners[e]) > 1:
                r = [o for o in done if o.f == "read" and o.epoch == e][:2]
                return _no(r, f"reads show two owners for epoch {e}.")
        shown = {op.epoch: op.result.get("owner") for op in done
                 if op.f == "read" and op.result.get("status") in (RUNNING, SUCCEEDED)}
        g = nx.Graph()
        g.add_nodes_from(("e", e) for e in needed)
        for m in maybe_claims:
            g.add_node(("c", m.index))
            limit = seen.query(m.invoke_time)[0]
            for e in needed:
                if limit is not None and limit > 4 * e:
                    continue
                if e in shown and not agrees(owner_of(m), shown[e]):
                    continue
                g.add_edge(("e", e), ("c", m.index))
        match = nx.bipartite.hopcroft_karp_matching(g, top_nodes=[("e", e) for e in needed]) if g.number_of_edges() else {}
        by_index = {m.index: m for m in maybe_claims}
        for e in needed:
            if ("e", e) not in match:
                op = used[e]
                return _no([op], f"{describe(op)} names epoch {e}, but no claim granted it, and no indeterminate claim "
                                 f"could have (none was invoked early enough, or for the owner that reads show).")
            chosen.append((by_index[match["e", e][1]], 4 * e))

    # the real-time order must respect the block order
    if not done:
        return Decision(True)
    for op in done:
        chosen.append((op, _block(op)))
    for op, block in chosen:
        worst, x = seen.query(op.invoke_time)
        if x is not None and worst > block:
            return _no(
                [x, op],
                f"{describe(x)} completed at {at(x.complete_time)}, before {describe(op)} was invoked at "
                f"{at(op.invoke_time)}, yet the lease model needs {describe(op)} to take effect first "
                f"({_phase_words(op, block)} comes before {_phase_words(x, _block(x))}).",
            )
    return Decision(True)


def _shows(read: Op) -> str:
    r = read.result
    return f"shows {r.get('status')} with epoch {r.get('epoch')}"


def _phase_words(op: Op, block: int) -> str:
    e, phase = divmod(block, 4)
    return ["the claim of", "the running lease of", "the end of", "what follows the end of"][phase] + f" epoch {e}"


def decide_register(ops: list[Op]) -> Decision:
    """The protected resource of one node: a fenced register accepting epochs ≥ its largest.

    Its ok effects must be orderable by non-decreasing epoch consistently with
    real time, which fails exactly at a ``stale-effect``. Info effects never need
    to take effect: accepting more only raises the bar.
    """
    for x, op in stale_effects(ops):
        return _no([x, op], f"the protected resource accepted {describe(op)} after {describe(x)} had been accepted.")
    return Decision(True)
