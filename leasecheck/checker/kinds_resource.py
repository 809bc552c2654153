"""The resource family of docs/contracts/anomaly-kinds.md: what a read of the protected resource proves.

A ``read-resource`` op shows the resource's fence and its log of accepted effects
(epoch or token, and payload), read in one snapshot. The lease model, extended
with that observable register, says what any such read may show: the log only
grows, in non-decreasing epoch order (the resource refuses epochs below its
fence, and the fence is at least every epoch it accepted, and under
``effect_fence: "lease"`` every epoch granted); every entry is the payload of an
effect op that may have taken effect by the read, with its epoch or token; every
effect acknowledged before the read is in it. A read that shows otherwise is
proof that the node has no linearization, so each rule here is a proof kind:

* ``stale-effect`` (1a) an entry of an older epoch logged after a newer one;
  (1b) an entry that appeared after an earlier read proved the fence above it;
* ``fence-regression`` a fence below an epoch the resource had accepted or (lease) granted;
* ``phantom-effect`` an entry no effect op of the history can have written;
* ``lost-effect`` an acknowledged (or once listed) effect missing from a later read.

Soundness first, as everywhere: an ``info`` effect may have taken effect (it is
a possible writer), a ``fail`` one did not; equal times are concurrent (an
effect invoked at the very time a read completed may be in it); a field a read
does not give (a null fence, an entry without a token) is never compared; an
entry with a null epoch (an unfenced backend) is judged only by the rules that
need no epoch. A read that failed or whose outcome is unknown proves nothing.

Each finding names one proof, chosen so that it depends only on ops invoked by
the time the proving read completed and on reads invoked before it (the first
by index): what the checker following a run tells of a history so far is what
it tells of the whole (:mod:`leasecheck.checker.online`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.checker.explain import at, describe
from leasecheck.checker.findings import Findings, NodeHistory
from leasecheck.checker.leases import completed
from leasecheck.checker.model import freeze
from leasecheck.checker.precedence import MaxBefore
from leasecheck.histories import Op
from leasecheck.histories.format import EffectFence
from leasecheck.histories.vocabulary import READ_RESOURCE, AnomalyKind

#: one finding: (kind, cited ops, explanation)
Finding = tuple[AnomalyKind, list[Op], str]

_SNAPSHOT = "fence and log are read in one snapshot"


@dataclass(slots=True)
class _Read:
    """An ok read of the resource, parsed once: its entries and what they say."""

    op: Op
    fence: int | None
    #: (epoch or None, payload, token or None), oldest first
    entries: list[tuple[Any, str, Any]]
    #: payload -> position of its first listing
    first: dict[str, int]
    #: the largest epoch it proves the fence had reached: its fence or a listed epoch (None: neither)
    level: int | None

    @classmethod
    def of(cls, op: Op) -> _Read:
        fence = op.result.get("fence")
        fence = fence if type(fence) is int else None
        entries = [(e.get("epoch"), e["payload"], e.get("token")) for e in op.result["accepted"]]
        first: dict[str, int] = {}
        for i, (_, p, _) in enumerate(entries):
            first.setdefault(p, i)
        epochs = [e for e, _, _ in entries if type(e) is int]
        level = max([*epochs, *([fence] if fence is not None else [])], default=None)
        return cls(op, fence, entries, first, level)


def _entry(e: Any, p: str) -> str:
    return f"{p!r} ({'epoch ' + str(e) if type(e) is int else 'no epoch'})"


class _Effects:
    """The node's effect ops by payload: which of them may have written an entry a read shows."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.by_payload: dict[Any, list[Op]] = {}
        for op in sorted((o for o in ops if o.f == "effect"), key=lambda o: o.index):
            p = op.value.get("payload")
            if type(p) is str:
                self.by_payload.setdefault(p, []).append(op)

    def candidates(self, payload: str, read: Op) -> list[Op]:
        """The effects with ``payload`` invoked by the time ``read`` completed (equal times are concurrent)."""
        return [op for op in self.by_payload.get(payload, ()) if op.invoke_time <= completed(read)]

    def match(self, payload: str, read: Op) -> Op | None:
        """The effect op a citation names for an entry: the first invoked of its candidates."""
        c = self.candidates(payload, read)
        return c[0] if c else None


def fits(op: Op, epoch: Any, token: Any) -> bool:
    """Can ``op`` have written an entry of ``epoch`` (or ``token``)? Only like is compared with like: two epochs,
    or two tokens when both are given."""
    mine = op.value.get("epoch")
    if type(epoch) is int or type(mine) is int:
        return not (type(epoch) is int and type(mine) is int and epoch != mine)
    theirs = op.value.get("token")
    return token is None or theirs is None or freeze(theirs) == freeze(token)


def resource_reads(n: NodeHistory, out: Findings) -> None:
    """stale-effect (from the resource), fence-regression, phantom-effect, lost-effect: the table's row."""
    for kind, ops, why in resource_findings(n.ops, n.effect_fence):
        out.add(kind, n.node, ops, why)


def resource_findings(ops: Sequence[Op], effect_fence: EffectFence) -> Iterator[Finding]:
    """Every finding the node's ok ``read-resource`` ops prove, rule by rule (nothing when it has none)."""
    reads = sorted((_Read.of(op) for op in ops if op.f == READ_RESOURCE and op.type == "ok"), key=lambda r: r.op.index)
    if not reads:
        return
    effects = _Effects(ops)
    claims = None
    if effect_fence == "lease":
        claims = MaxBefore([op for op in ops if op.f == "claim" and op.type == "ok" and type(op.epoch) is int],
                           key=lambda o: o.epoch)
    yield from _out_of_order(reads, effects)
    yield from _accepted_below_fence(reads, effects, claims, effect_fence)
    yield from _fence_regressions(reads, claims)
    yield from _phantoms(reads, effects)
    yield from _lost(reads, effects, ops)


# ------------------------------------------------------------------ stale-effect


def _out_of_order(reads: list[_Read], effects: _Effects) -> Iterator[Finding]:
    """1a: per read, the first entry logged after an entry of a larger epoch (and the first entry of that epoch)."""
    for r in reads:
        best = -1
        at_best = -1
        for j, (e, p, _) in enumerate(r.entries):
            if type(e) is not int:
                continue
            if e < best:
                newer = r.entries[at_best]
                cited = [r.op] + [x for x in (effects.match(newer[1], r.op), effects.match(p, r.op)) if x is not None]
                yield (
                    "stale-effect", cited,
                    f"{describe(r.op)} read the protected resource over [{at(r.op.invoke_time)} .. "
                    f"{at(r.op.complete_time)}]: it lists {_entry(e, p)} at position {j + 1}, after {_entry(*newer[:2])} "
                    f"at position {at_best + 1}{_writers(effects, r.op, (newer[1], p))}. The resource refuses epochs "
                    "below its fence, which is at least every epoch it accepted, so the order of its log (oldest "
                    "first, as the read shows it in one snapshot) never goes back in epoch: it accepted the older epoch after the newer.",
                )
                break
            if e > best:
                best, at_best = e, j


def _writers(effects: _Effects, read: Op, payloads: tuple[str, ...]) -> str:
    named = [(p, effects.match(p, read)) for p in payloads]
    words = [f"{p!r} is the payload of {describe(op)}" for p, op in named if op is not None]
    return f" ({'; '.join(words)})" if words else ""


def _accepted_below_fence(reads: list[_Read], effects: _Effects, claims: MaxBefore | None,
                          effect_fence: EffectFence) -> Iterator[Finding]:
    """1b: an entry a later read lists and an earlier read (completed before it) did not, although that earlier read
    proves the fence was above the entry's epoch. One finding per payload: the first later read by index, then the
    first earlier read by index."""
    provers = _possible_provers(reads, claims)
    if not provers:
        return
    told: set[str] = set()
    for r2 in reads:
        earlier = [r1 for r1 in provers if completed(r1.op) < r2.op.invoke_time]
        if not earlier:
            continue
        for e, p, _ in r2.entries:
            if type(e) is not int or p in told:
                continue
            for r1 in earlier:
                if p in r1.first:
                    continue
                proof, by = _fence_above(r1, e, claims)
                if proof is None:
                    continue
                told.add(p)
                cited = [*([by] if by is not None else []), r1.op, r2.op]
                stale = effects.match(p, r2.op)
                if stale is not None:
                    cited.append(stale)
                yield (
                    "stale-effect", cited,
                    f"{describe(r2.op)} lists {_entry(e, p)}"
                    + (f", the payload of {describe(stale)}" if stale is not None else "")
                    + f"; {describe(r1.op)}, which completed at {at(r1.op.complete_time)}, before {describe(r2.op)} was "
                    f"invoked at {at(r2.op.invoke_time)}, did not list it, so the resource accepted it after that read "
                    f"(real-time order). But that read proves the fence was above epoch {e} by then: {proof}. The fence "
                    f'never goes down and the resource refuses epochs below it (effect_fence "{effect_fence}").',
                )
                break


def _possible_provers(reads: list[_Read], claims: MaxBefore | None) -> list[_Read]:
    """The reads that can be the earlier read of a 1b finding, in index order; the others are left out of its search.

    A read proves an entry stale only if it does not list the entry's payload although it proves the fence above the
    entry's epoch (:func:`_fence_above`: its fence, an epoch it lists, or a claim granted before it). A read that lists
    every payload any read lists with an epoch below that level proves nothing, which is every read of a correct
    resource: so the search, quadratic in reads times entries, runs only where something is wrong (a hot node with
    hundreds of reads of a long log is checked in linear time)."""
    least: dict[str, int] = {}  # payload -> the least epoch any read lists it with
    for r in reads:
        for e, p, _ in r.entries:
            if type(e) is int and (p not in least or e < least[p]):
                least[p] = e
    ordered = sorted(least.values())
    out = []
    for r in reads:
        level = r.level
        if claims is not None:
            best, c = claims.query(r.op.invoke_time)
            if c is not None and (level is None or best > level):
                level = best
        if level is None:
            continue
        below = bisect_left(ordered, level)  # payloads listed somewhere with an epoch below the level
        if below and sum(1 for q in r.first if q in least and least[q] < level) < below:
            out.append(r)
    return out


def _fence_above(r1: _Read, e: int, claims: MaxBefore | None) -> tuple[str | None, Op | None]:
    """Why ``r1`` proves the fence was above ``e`` when it was read, and the claim that proves it (if one does)."""
    if r1.fence is not None and r1.fence > e:
        return f"it read fence {r1.fence}", None
    for e2, p2, _ in r1.entries:
        if type(e2) is int and e2 > e:
            return f"it lists {_entry(e2, p2)}, and the fence is at least every epoch accepted", None
    if claims is not None:
        best, c = claims.query(r1.op.invoke_time)
        if c is not None and best > e:
            return (f"{describe(c)} had been granted epoch {best} at {at(c.complete_time)}, before it was invoked, "
                    'and under effect_fence "lease" a granted claim lifts the fence'), c
    return None, None


# ------------------------------------------------------------------ fence-regression


def _fence_regressions(reads: list[_Read], claims: MaxBefore | None) -> Iterator[Finding]:
    """A read's fence below an epoch it lists itself, or below what an earlier read proved (its fence or a listed
    epoch), or (lease) below the epoch of a claim granted before it was invoked. One finding per read: its own list
    first, else the larger of the two witnesses (an earlier read on a tie)."""
    by_index = {r.op.index: r for r in reads}
    levels = MaxBefore([r.op for r in reads if r.level is not None], key=lambda o: by_index[o.index].level)
    rule = "a resource's fence never goes down and is at least every epoch it accepted"
    if claims is not None:
        rule += ' and (effect_fence "lease") every epoch granted'
    for r in reads:
        f = r.fence
        if f is None:
            continue
        own = [(e, p) for e, p, _ in r.entries if type(e) is int and e > f]
        if own:
            e, p = max(own, key=lambda x: x[0])
            yield ("fence-regression", [r.op],
                   f"{describe(r.op)} read fence {f} over [{at(r.op.invoke_time)} .. {at(r.op.complete_time)}] and, "
                   f"in the same snapshot, lists {_entry(e, p)} above it: {rule}.")
            continue
        lv, w = levels.query(r.op.invoke_time)
        best_c: Any = None
        c: Op | None = None
        if claims is not None:
            best_c, c = claims.query(r.op.invoke_time)
        if w is not None and lv > f and (c is None or lv >= best_c):
            r1 = by_index[w.index]
            shown = f"read fence {r1.fence}" if r1.fence == lv else f"listed an accepted effect of epoch {lv}"
            yield ("fence-regression", [w, r.op],
                   f"{describe(w)} {shown} and completed at {at(w.complete_time)}, before {describe(r.op)} was invoked at "
                   f"{at(r.op.invoke_time)}; yet it shows fence {f} (real-time order): {rule}.")
        elif c is not None and best_c > f:
            yield ("fence-regression", [c, r.op],
                   f"{describe(c)} was granted epoch {best_c} at {at(c.complete_time)}, before {describe(r.op)} was "
                   f"invoked at {at(r.op.invoke_time)}; yet it shows fence {f} (real-time order): {rule}.")


# ------------------------------------------------------------------ phantom-effect


def _phantoms(reads: list[_Read], effects: _Effects) -> Iterator[Finding]:
    """An entry that no effect op invoked by the read's completion can have written: none has its payload, the
    ones that have it failed or carried another epoch (token), or it is listed more often than they can have
    written it. One finding per payload, at the first read (by index) that proves it."""
    told: set[str] = set()
    for r in reads:
        counts: dict[str, int] = {}
        for _, p, _ in r.entries:
            counts[p] = counts.get(p, 0) + 1
        for e, p, tok in r.entries:
            if p in told:
                continue
            cands = effects.candidates(p, r.op)
            writers = [op for op in cands if op.type != "fail" and fits(op, e, tok)]
            if len(writers) >= counts[p]:
                continue
            told.add(p)
            first = cands[0] if cands else None
            if writers:
                why = (f"it is listed {counts[p]} times, but only {len(writers)} effect op(s) with this payload can "
                       "have written it, each once")
            elif first is None:
                why = f"no effect op with this payload was invoked by {at(r.op.complete_time)}, when the read completed"
            elif not fits(first, e, tok):
                why = (f"{describe(first)}, the first effect with this payload, carried another "
                       f"{'epoch' if type(e) is int else 'token'}")
            else:
                why = f"{describe(first)}, the first effect with this payload, failed ({first.result.get('reason')}): it did not happen"
            if first is not None and len(cands) > 1:
                why += f", and none of the {len(cands) - 1} other(s) can have written it either"
            yield ("phantom-effect", [*([first] if first is not None else []), r.op],
                   f"{describe(r.op)} read the protected resource over [{at(r.op.invoke_time)} .. "
                   f"{at(r.op.complete_time)}] and lists {_entry(e, p)}, but {why}. Every entry of the resource is the "
                   "payload of an effect op invoked before the read completed (equal times are concurrent) that may "
                   "have taken effect (ok, or outcome unknown), with the same epoch or token.")


# ------------------------------------------------------------------ lost-effect


def _lost(reads: list[_Read], effects: _Effects, ops: Sequence[Op]) -> Iterator[Finding]:
    """An ok effect completed before a read was invoked that the read does not list (one finding per effect, at the
    first such read by index); an entry an earlier read listed that a later one does not, where no ok effect of its
    payload explains it already (one finding per payload: the first later read by index, then the first earlier)."""
    for op in sorted((o for o in ops if o.f == "effect" and o.type == "ok"), key=lambda o: o.index):
        p = op.value.get("payload")
        if type(p) is not str:
            continue  # an effect that names no payload cannot be looked for
        for r in reads:
            if completed(op) < r.op.invoke_time and p not in r.first:
                yield ("lost-effect", [op, r.op],
                       f"{describe(op)} was accepted (ok) at {at(op.complete_time)}, before {describe(r.op)} was invoked "
                       f"at {at(r.op.invoke_time)}, yet the read does not list its payload {p!r} among the "
                       f"{len(r.entries)} effects the resource accepted (real-time order: an accepted effect stays in "
                       f"the resource's log; {_SNAPSHOT}).")
                break
    told: set[str] = set()
    for r2 in _missing_something(reads):
        for r1 in reads:
            if not completed(r1.op) < r2.op.invoke_time:
                continue
            for e, p, _ in r1.entries:
                if p in told or p in r2.first:
                    continue
                if any(x.type == "ok" and completed(x) < r2.op.invoke_time for x in effects.by_payload.get(p, ())):
                    continue  # the rule above cites the acknowledged effect
                told.add(p)
                writer = effects.match(p, r1.op)
                yield ("lost-effect", [*([writer] if writer is not None else []), r1.op, r2.op],
                       f"{describe(r1.op)} lists {_entry(e, p)} and completed at {at(r1.op.complete_time)}, before "
                       f"{describe(r2.op)} was invoked at {at(r2.op.invoke_time)}, yet that read does not list it "
                       "(real-time order: the resource's log of accepted effects only grows).")


def _missing_something(reads: list[_Read]) -> list[_Read]:
    """The reads that miss a payload some read completed before them listed, in index order: the only ones the
    second rule of :func:`_lost` can find anything in (none, for a correct resource; so its search, quadratic in reads
    times entries, runs only where something is wrong)."""
    first_done: dict[str, int] = {}  # payload -> the earliest completion of a read listing it
    for r in reads:
        for p in r.first:
            if p not in first_done or completed(r.op) < first_done[p]:
                first_done[p] = completed(r.op)
    ordered = sorted(first_done.values())
    out = []
    for r in reads:
        t = r.op.invoke_time
        before = bisect_left(ordered, t)  # payloads a read completed before this one was invoked listed
        if before and sum(1 for p in r.first if first_done[p] < t) < before:
            out.append(r)
    return out
