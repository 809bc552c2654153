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
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where an info claim must be matched to an epoch: checking never pays for it otherwise
    import networkx as nx

from leasecheck.checker.explain import at, describe
from leasecheck.checker.kinds_stale import stale_effect_explanation, stale_effects
from leasecheck.checker.model import agrees, owner_of, result_of
from leasecheck.checker.precedence import MaxBefore
from leasecheck.histories import Op
from leasecheck.histories.format import EffectFence
from leasecheck.histories.vocabulary import READY, RUNNING, SUCCEEDED

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
    """The block an ok op must be linearized in: ``4·epoch + phase`` (see above)."""
    e = op.epoch
    if op.f == "read":
        status = op.result.get("status")
        return 4 * e + (1 if status == RUNNING else 3)
    return 4 * e + PHASE[op.f]


class _Refuted(Exception):
    """Raised by a step of :func:`decide` that found why no linearization exists."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.why)
        self.decision = decision


def _refutation(ops: list[Op], why: str) -> Decision:
    """The node has no linearization: ``ops`` (cited by index order) prove it, ``why`` says how."""
    return Decision(False, sorted(ops, key=lambda o: o.index), why)


def _no(ops: list[Op], why: str) -> _Refuted:
    """The refutation as an exception, for a step of :func:`decide` to raise."""
    return _Refuted(_refutation(ops, why))


@dataclass(slots=True)
class _Epochs:
    """The ok ops of one fenced node, by the epoch (block) they belong to."""

    #: the ok claim that granted each epoch
    claim: dict[int, Op] = field(default_factory=dict)
    #: the ok commit or release that ended each epoch's lease
    end: dict[int, Op] = field(default_factory=dict)
    #: the ok reads showing the state an epoch's end left (READY or SUCCEEDED)
    after: dict[int, list[Op]] = field(default_factory=lambda: defaultdict(list))
    #: the first op (by index) naming each epoch other than by its claim
    used: dict[int, Op] = field(default_factory=dict)


def decide(ops: list[Op]) -> Decision:
    """Is the lease object of one fenced node linearizable? Raises :class:`Undecided`.

    ``ops`` are the node's ops (any order); effects, failed ops, and info reads
    and renews are ignored here (the protected resource is checked separately,
    and the others cannot change the state). Each step below either refutes the
    node (and says why) or narrows what the next one must consider; their order
    decides which proof is reported when there are several.
    """
    done, maybe_claims, maybe_ends = _split(ops)
    if not done:
        return Decision(True)
    try:
        epochs = _by_epoch(done)
        seen = MaxBefore(done, key=_block)
        chosen = _needed_ends(epochs, maybe_ends)
        _nothing_after_commit(epochs, chosen, done)
        chosen += _needed_claims(epochs, done, maybe_claims, seen)
        chosen += [(op, _block(op)) for op in done]
        _real_time_respects_blocks(chosen, seen)
    except _Refuted as no:
        return no.decision
    return Decision(True)


def _split(ops: list[Op]) -> tuple[list[Op], list[Op], list[Op]]:
    """(ok ops, info claims, info commits and releases): what can change the lease's state.

    Every op that must have happened needs an epoch to be placed in a block; an
    op without one (a fenced node with a null epoch somewhere) is for the search.
    """
    done: list[Op] = []
    maybe_claims: list[Op] = []
    maybe_ends: list[Op] = []
    for op in ops:
        if op.f == "effect" or op.f == "read-resource" or op.type == "fail":
            continue  # the resource and its reads are judged apart; a failed op did not happen
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
    return done, maybe_claims, maybe_ends


def _by_epoch(done: list[Op]) -> _Epochs:
    """Sort the ok ops into epochs, refuting what no block order can hold.

    An epoch is granted once and ended at most once; epochs start above 0, and
    only a READY read may show epoch 0 (nothing was ever claimed).
    """
    epochs = _Epochs()
    claim, end = epochs.claim, epochs.end
    for op in sorted(done, key=lambda o: o.index):
        e = op.epoch
        if op.f == "claim":
            if e <= 0:
                raise _no([op], f"{describe(op)} was granted epoch {e}, but epochs start above 0.")
            if e in claim:
                raise _no([claim[e], op], f"{describe(claim[e])} and {describe(op)} were both granted epoch {e}.")
            claim[e] = op
            continue
        if op.f in ("commit", "release"):
            if e in end:
                raise _no([end[e], op], f"{describe(end[e])} and {describe(op)} both ended the lease of epoch {e}.")
            end[e] = op
        elif op.f == "read" and op.result.get("status") != RUNNING:
            if e == 0:
                if op.result.get("status") != READY:
                    raise _no([op], f"{describe(op)} read {op.result.get('status')} with epoch 0, before any claim.")
                continue
            epochs.after[e].append(op)
        if e <= 0:
            raise _no([op], f"{describe(op)} names epoch {e}, which no claim can grant.")
        epochs.used.setdefault(e, op)
    return epochs


def _fits_result(end: Op, read: Op) -> bool:
    """Could ``end`` (a commit) have left the result ``read`` shows? A read that gives none is not compared."""
    return "result" not in read.result or agrees(result_of(end), read.result["result"])


def _needed_ends(epochs: _Epochs, maybe_ends: list[Op]) -> list[tuple[Op, int]]:
    """The info ends that reads of an ended epoch need, placed in their epoch's end block.

    Reads after an epoch's end must agree on how it ended (released or committed,
    with which result). If an ok op ended it, that op must be the one; else the
    earliest-invoked fitting info op is always the best choice (it constrains
    the real-time order least).
    """
    chosen: list[tuple[Op, int]] = []
    for e, reads in epochs.after.items():
        statuses = {r.result.get("status") for r in reads}
        if len(statuses) > 1:
            a = next(r for r in reads if r.result.get("status") == READY)
            b = next(r for r in reads if r.result.get("status") == SUCCEEDED)
            raise _no([a, b], f"{describe(a)} and {describe(b)} saw epoch {e} both released and committed.")
        want = "release" if READY in statuses else "commit"
        # a read that gives no result (a job queue that stores none) is not compared on it (read_matches's reading)
        told = [r for r in reads if "result" in r.result]
        results = {repr(r.result["result"]) for r in told} if want == "commit" else set()
        if len(results) > 1:
            raise _no(told[:2], f"{describe(told[0])} and {describe(told[1])} read different results of epoch {e}.")
        sample = told[0] if told else reads[0]
        if e in epochs.end:
            x = epochs.end[e]
            if x.f != want or (want == "commit" and not _fits_result(x, sample)):
                raise _no([x, sample], f"{describe(sample)} {_shows(sample)}, but epoch {e} ended with {describe(x)}.")
            continue
        fits = [
            m for m in maybe_ends
            if m.value.get("epoch") == e and m.f == want and (want == "release" or _fits_result(m, sample))
        ]
        fits.sort(key=lambda m: m.invoke_time)
        if not fits:
            raise _no([sample], f"{describe(sample)} {_shows(sample)}, but no {want} of epoch {e} could have done that.")
        chosen.append((fits[0], 4 * e + 2))
    return chosen


def _nothing_after_commit(epochs: _Epochs, chosen: list[tuple[Op, int]], done: list[Op]) -> None:
    """At most one commit, and it ends everything: a SUCCEEDED node grants no later epoch."""
    committed = [x for x in epochs.end.values() if x.f == "commit"] + [m for m, _ in chosen if m.f == "commit"]
    if len(committed) > 1:
        a, b = sorted(committed, key=lambda o: o.index)[:2]
        raise _no([a, b], f"{describe(a)} and {describe(b)} both committed the node.")
    if committed:
        c = committed[0]
        ce = c.value.get("epoch")
        higher = [o for o in done if o.epoch > ce]
        if higher:
            h = min(higher, key=lambda o: o.index)
            raise _no([c, h], f"{describe(c)} committed the node with epoch {ce}, but {describe(h)} names the later "
                              f"epoch {h.epoch}: no lease follows a commit.")


def _needed_claims(epochs: _Epochs, done: list[Op], maybe_claims: list[Op], seen: MaxBefore) -> list[tuple[Op, int]]:
    """An info claim for each epoch that ops use but no ok claim granted, placed in its claim block.

    Reads pin the owner of an epoch. Which info claim grants which epoch is a
    bipartite matching (an info claim grants at most one epoch, and only one it
    could have been granted: invoked before anything of a later block completed,
    for the owner that reads show).
    """
    claim = epochs.claim
    owners: dict[int, set[object]] = defaultdict(set)
    for op in done:
        if op.f == "read" and op.result.get("status") in (RUNNING, SUCCEEDED):
            owners[op.epoch].add(repr(op.result.get("owner")))
            if op.epoch in claim and not agrees(owner_of(claim[op.epoch]), op.result.get("owner")):
                c = claim[op.epoch]
                raise _no([c, op], f"{describe(op)} shows owner {op.result.get('owner')!r} for epoch {op.epoch}, "
                                   f"but {describe(c)} was granted it for {owner_of(c)!r}.")
    needed = sorted(e for e in epochs.used if e not in claim)
    if not needed:
        return []
    for e in needed:
        if len(owners[e]) > 1:
            r = [o for o in done if o.f == "read" and o.epoch == e][:2]
            raise _no(r, f"reads show two owners for epoch {e}.")
    shown = {op.epoch: op.result.get("owner") for op in done
             if op.f == "read" and op.result.get("status") in (RUNNING, SUCCEEDED)}
    edges: list[tuple[Op, int]] = []
    for m in maybe_claims:
        limit = seen.query(m.invoke_time)[0]
        for e in needed:
            if limit is not None and limit > 4 * e:
                continue
            if e in shown and not agrees(owner_of(m), shown[e]):
                continue
            edges.append((m, e))
    perfect = _perfect_matching(needed, edges)
    if perfect is not None:
        return [(perfect[e], 4 * e) for e in needed]
    import networkx as nx

    g: nx.Graph[tuple[str, int]] = nx.Graph()
    g.add_nodes_from(("e", e) for e in needed)
    g.add_nodes_from(("c", m.index) for m in maybe_claims)
    g.add_edges_from((("e", e), ("c", m.index)) for m, e in edges)
    match = nx.bipartite.hopcroft_karp_matching(g, top_nodes=[("e", e) for e in needed]) if g.number_of_edges() else {}
    by_index = {m.index: m for m in maybe_claims}
    chosen: list[tuple[Op, int]] = []
    for e in needed:
        if ("e", e) not in match:
            op = epochs.used[e]
            raise _no([op], f"{describe(op)} names epoch {e}, but no claim granted it, and no indeterminate claim "
                            f"could have (none was invoked early enough, or for the owner that reads show).")
        chosen.append((by_index[match["e", e][1]], 4 * e))
    return chosen


#: above this many epochs to match, the augmenting paths below could recurse too deep: networkx matches
_SMALL_MATCHING = 200


def _perfect_matching(needed: list[int], edges: list[tuple[Op, int]]) -> dict[int, Op] | None:
    """An info claim for every needed epoch, each claim used once (Kuhn's augmenting paths), or None.

    Which perfect matching it finds does not matter: an edge exists only where the
    claim may take effect in that epoch's claim block, so every chosen claim passes
    :func:`_real_time_respects_blocks`. When there is none, ``hopcroft_karp_matching``
    (networkx, imported only then) decides which epoch the refutation names, as it
    always has; a valid history never needs networkx.
    """
    if len(needed) > _SMALL_MATCHING:
        return None
    candidates: dict[int, list[Op]] = {e: [] for e in needed}
    for m, e in edges:
        candidates[e].append(m)
    epoch_of: dict[int, int] = {}  # an info claim's index -> the epoch it grants
    chosen: dict[int, Op] = {}

    def augment(e: int, tried: set[int]) -> bool:
        for m in candidates[e]:
            if m.index in tried:
                continue
            tried.add(m.index)
            other = epoch_of.get(m.index)
            if other is None or augment(other, tried):
                epoch_of[m.index] = e
                chosen[e] = m
                return True
        return False

    for e in needed:
        if not augment(e, set()):
            return None
    return chosen


def _real_time_respects_blocks(chosen: list[tuple[Op, int]], seen: MaxBefore) -> None:
    """No op may complete before the invoke of an op in an earlier block.

    That is exactly when the real-time order extends to a total order of the
    blocks (ops inside a block commute), so this is the final, exact test.
    """
    for op, block in chosen:
        worst, x = seen.query(op.invoke_time)
        if x is not None and worst > block:
            raise _no(
                [x, op],
                f"{describe(x)} completed at {at(x.complete_time)}, before {describe(op)} was invoked at "
                f"{at(op.invoke_time)}, yet the lease model needs {describe(op)} to take effect first "
                f"({_phase_words(op, block)} comes before {_phase_words(x, _block(x))}).",
            )


def _shows(read: Op) -> str:
    r = read.result
    return f"shows {r.get('status')} with epoch {r.get('epoch')}"


def _phase_words(op: Op, block: int) -> str:
    e, phase = divmod(block, 4)
    return ["the claim of", "the running lease of", "the end of", "what follows the end of"][phase] + f" epoch {e}"


def decide_register(ops: list[Op], effect_fence: EffectFence) -> Decision:
    """The protected resource of one node whose lease object :func:`decide` found linearizable.

    ``"token"``: a register on its own, accepting epochs ≥ the largest it
    accepted; its ok effects must be orderable by non-decreasing epoch
    consistently with real time, which fails exactly at a ``stale-effect``.

    ``"lease"``: the register is part of the lease object (a claim lifts the
    fence), and the combined object is linearizable iff no ok effect with epoch
    e was invoked after an op that observed an epoch > e had completed. Why
    that suffices: give each effect e the level just after the blocks of epoch
    e (before the claim of any later epoch). The model's orders (blocks, effects
    by epoch, an effect before every claim of a larger epoch) all go up in
    level and never from a lease op to an effect, so a cycle with real time
    needs a real-time edge going down. Between lease ops :func:`decide` rules it
    out; from a lease op or an effect to an effect it is this stale effect; from
    an effect down to a lease op it cannot close a cycle alone, and real time
    is an interval order (a→b, c→d imply a→d or c→b), so two real-time edges
    of a cycle always shorten to one. The property tests hold it to the search.

    Info effects never need to take effect: accepting more only raises the bar.
    """
    for x, op in stale_effects(ops, effect_fence):
        return _refutation([x, op], stale_effect_explanation(x, op, effect_fence))
    return Decision(True)
