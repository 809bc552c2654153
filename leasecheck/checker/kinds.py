"""The named anomaly kinds of docs/contracts/anomaly-kinds.md, each checked straight from its definition.

Each check is a pure function of one node's ops that appends findings (a row of
:mod:`leasecheck.checker.table` says which kinds it reports, and on which nodes); most are
one pass over the ops with :class:`~leasecheck.checker.precedence.MaxBefore` answering
"the largest epoch observed before this invoke". Epochs are the version order
(the way Elle uses unique writes), so no search is needed for any of them.
Unfenced nodes (``"epoch": null``) are judged by grant order instead: claims
ordered by real time, tokens naming the lease.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from leasecheck.checker.explain import at, describe, outcome
from leasecheck.checker.findings import Findings, NodeHistory
from leasecheck.checker.model import agrees, freeze, result_of
from leasecheck.checker.precedence import MaxBefore
from leasecheck.histories import Op
from leasecheck.histories.format import EffectFence
from leasecheck.histories.vocabulary import STALE_KINDS, SUCCEEDED


def _int_epoch(op: Op) -> bool:
    return type(op.epoch) is int


def _observed(op: Op) -> str:
    """How an op observed its epoch, for explanations."""
    if op.f == "claim":
        return f"had been granted epoch {op.epoch}"
    if op.f == "read":
        return f"had read epoch {op.epoch}"
    return f"had succeeded with epoch {op.epoch}"


# --------------------------------------------------------------------- fenced


def token_stale_effects(ops: Iterable[Op]) -> Iterator[tuple[Op, Op]]:
    """``effect_fence: "token"``: (accepted effect, stale effect) pairs, an ok effect
    invoked after an ok effect with a larger epoch had completed. Exactly when the
    protected resource (a register accepting epochs ≥ the largest it accepted) has
    no linearization."""
    effects = [op for op in ops if op.f == "effect" and op.type == "ok" and _int_epoch(op)]
    accepted = MaxBefore(effects, key=lambda o: o.epoch)
    for op in effects:
        best, x = accepted.query(op.invoke_time)
        if x is not None and best > op.epoch:
            yield x, op


def lease_stale_effects(ops: Iterable[Op]) -> Iterator[tuple[Op, Op]]:
    """``effect_fence: "lease"``: (witness, stale effect) pairs, an ok effect with epoch
    e invoked after an op that observed an epoch > e had completed, exactly like
    ``stale-commit``. The witness is the op with the largest epoch observed before
    the effect's invoke (the first to complete, on a tie), as :func:`epoch_order`
    cites it."""
    ok = [op for op in ops if op.type == "ok" and _int_epoch(op)]
    seen = MaxBefore(ok, key=lambda o: o.epoch)
    for op in ok:
        if op.f != "effect":
            continue
        best, x = seen.query(op.invoke_time)
        if x is not None and best > op.epoch:
            yield x, op


def stale_effects(ops: Iterable[Op], effect_fence: EffectFence) -> Iterator[tuple[Op, Op]]:
    """The ``stale-effect`` pairs (witness, effect) of a fenced node under the history's rule."""
    return lease_stale_effects(ops) if effect_fence == "lease" else token_stale_effects(ops)


#: how each rule's stale effect is explained, after the ops and times
_EFFECT_RULE = {
    "lease": (
        'under effect_fence "lease" the resource is coupled to the lease store, so a claim lifts its fence '
        "and an effect is stale once a newer epoch was observed, like a commit."
    ),
    "token": (
        'under effect_fence "token" the fenced resource rejects epochs below the largest it has accepted.'
    ),
}


def stale_effect_explanation(x: Op, op: Op, effect_fence: EffectFence) -> str:
    """Why the protected resource should have refused ``op``, naming the rule that applied."""
    if effect_fence == "lease":
        return (
            f"the protected resource accepted {describe(op)}, invoked at {at(op.invoke_time)}, after "
            f"{describe(x)} {_observed(x)} at {at(x.complete_time)}: {_EFFECT_RULE['lease']}"
        )
    return (
        f"the protected resource accepted {describe(op)}, invoked at {at(op.invoke_time)}, after it had "
        f"accepted {describe(x)} at {at(x.complete_time)}: {_EFFECT_RULE['token']}"
    )


def epoch_order(n: NodeHistory, out: Findings) -> None:
    """duplicate-epoch, epoch-regression, stale-renew, stale-commit, stale-effect.

    One pass family over the ok ops that name an epoch: the epochs observed
    before each invoke (one :class:`MaxBefore`) answer all five. Under
    ``effect_fence: "lease"`` an effect is judged in that same pass, exactly like
    a commit; under ``"token"`` only against the effects the resource accepted.
    """
    node = n.node
    ok = [op for op in n.ops if op.type == "ok" and _int_epoch(op)]
    first_claim: dict[int, Op] = {}
    for op in sorted((o for o in ok if o.f == "claim"), key=lambda o: o.index):
        e = op.epoch
        if e in first_claim:
            c = first_claim[e]
            out.add(
                "duplicate-epoch", node, [c, op],
                f"{describe(c)} and {describe(op)} were both granted epoch {e} "
                f"(at {at(c.complete_time)} and {at(op.complete_time)}); every grant must get a new, larger epoch.",
            )
        else:
            first_claim[e] = op
    fence = n.effect_fence
    judged = ("claim", "renew", "commit", "effect") if fence == "lease" else ("claim", "renew", "commit")
    seen = MaxBefore(ok, key=lambda o: o.epoch)
    for op in ok:
        if op.f not in judged:
            continue
        best, x = seen.query(op.invoke_time)
        if x is None:
            continue
        e = op.epoch
        if op.f == "claim" and best >= e:
            out.add(
                "epoch-regression", node, [x, op],
                f"{describe(op)} was granted epoch {e} at {at(op.complete_time)}, but it was invoked at "
                f"{at(op.invoke_time)}, after {describe(x)} {_observed(x)} at {at(x.complete_time)}: "
                f"epochs must only grow.",
            )
        elif op.f == "effect" and best > e:
            out.add("stale-effect", node, [x, op], stale_effect_explanation(x, op, fence))
        elif op.f != "claim" and best > e:
            out.add(
                STALE_KINDS[op.f], node, [x, op],
                f"{describe(op)} was invoked at {at(op.invoke_time)}, after {describe(x)} {_observed(x)} "
                f"at {at(x.complete_time)}; yet the store accepted the {op.f} with the older epoch {e} "
                f"(completed at {at(op.complete_time)}).",
            )
    if fence == "token":
        for x, op in token_stale_effects(ok):
            out.add("stale-effect", node, [x, op], stale_effect_explanation(x, op, fence))


def commits(n: NodeHistory, out: Findings) -> None:
    """duplicate-commit and lost-commit: a lease is named by its epoch, or by its token when unfenced."""
    node, ops, fenced = n.node, n.ops, n.fenced
    key: Callable[[Op], Any] = (lambda o: o.value.get("epoch")) if fenced else (lambda o: freeze(o.value.get("token")))
    done = sorted((op for op in ops if op.type == "ok" and op.f == "commit"), key=lambda o: o.index)
    if not done:
        return
    first = done[0]
    keys = {key(first)}
    for c in done[1:]:
        if key(c) not in keys:
            keys.add(key(c))
            out.add(
                "duplicate-commit", node, [first, c],
                f"{describe(first)} succeeded at {at(first.complete_time)} and {describe(c)} succeeded at "
                f"{at(c.complete_time)}: two different leases both completed the node.",
            )
    reads = sorted((op for op in ops if op.type == "ok" and op.f == "read"), key=lambda o: o.invoke_time)
    starts = [r.invoke_time for r in reads]
    owners: dict[Any, Any] = {}  # the owner each lease's ok claim asked for (the first claim, on a duplicate)
    for op in ops:
        if op.type == "ok" and op.f == "claim":
            lease = op.result.get("epoch") if fenced else freeze(op.result.get("token"))
            owners.setdefault(lease, op.value.get("owner"))
    for c in done:
        want = key(c)
        assert c.complete_time is not None  # an ok op completed
        for r in reads[bisect_right(starts, c.complete_time):]:
            v = r.result
            seen_key = v.get("epoch") if fenced else freeze(v.get("token"))
            if (
                v.get("status") == SUCCEEDED
                and (seen_key is None or seen_key == want)
                and agrees(result_of(c), v.get("result"))
            ):
                continue
            out.add("lost-commit", node, [c, r], lost_commit_explanation(c, r, fenced, owners.get(want)))


def lost_commit_explanation(c: Op, r: Op, fenced: bool, owner: Any = None) -> str:
    """Why read ``r`` loses commit ``c``: each field it shows otherwise (status, epoch or token, owner,
    result) with both values, and the fields it agrees on.

    ``owner`` is what the lease's claim asked to be recorded (None: no claim
    said): it never makes the anomaly (docs/contracts/anomaly-kinds.md compares status, epoch and
    result), but a read that shows another owner says whose lease the store
    kept, so it is named too. A field the read does not give is not compared,
    except the result of a read that shows SUCCEEDED.
    """
    v = r.result
    lease = "epoch" if fenced else "token"
    stated = c.value.get("result")
    #: (field, what the commit made it, what the read shows, compared)
    fields: list[tuple[str, Any, Any, bool]] = [
        ("status", SUCCEEDED, v.get("status"), True),
        (lease, c.value.get(lease), v.get(lease), v.get(lease) is not None),
        ("owner", owner, v.get("owner"), owner is not None and v.get("owner") is not None),
        ("result", stated, v.get("result"),
         stated is not None and (v.get("result") is not None or v.get("status") == SUCCEEDED)),
    ]

    def value(name: str, x: Any) -> str:
        return str(x) if name == "status" else repr(x)

    def field_(name: str, x: Any) -> str:
        return f"no {name}" if x is None else f"{name} {value(name, x)}"

    compared = [(name, made, seen) for name, made, seen, yes in fields if yes]
    differ = [f"{field_(name, seen)} instead of {value(name, made)}" for name, made, seen in compared if freeze(made) != freeze(seen)]
    same = [field_(name, made) for name, made, seen in compared if freeze(made) == freeze(seen)]
    made = [field_(name, x) for name, x, _, _ in fields[1:] if x is not None]
    agreed = f" ({_listed(same)} agree)" if same else ""
    return (
        f"{describe(c)} succeeded at {at(c.complete_time)}, making the node SUCCEEDED"
        f"{' with ' + _listed(made) if made else ''}; but {describe(r)}, invoked later at {at(r.invoke_time)}, "
        f"shows {_listed(differ) or outcome(r)}{agreed}."
    )


def _listed(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)


def overlapping_fenced(n: NodeHistory, out: Findings) -> None:
    """overlapping-lease, exactly as docs/contracts/anomaly-kinds.md defines it for fenced leases."""
    node, ops, header = n.node, n.ops, n.header
    window = n.surely_held_ns
    if window <= 0:
        return
    claims = sorted((op for op in ops if op.type == "ok" and op.f == "claim" and _int_epoch(op)), key=lambda o: o.epoch)
    if len(claims) < 2:
        return
    epochs = [c.epoch for c in claims]
    renews: dict[int | None, list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "renew" and op.type == "ok":
            renews[op.value.get("epoch")].append(op)
    released = _first_releases(ops, lambda op: op.value.get("epoch"))
    renew_starts = {e: sorted(r.invoke_time for r in rs) for e, rs in renews.items()}
    renew_ops = {e: sorted(rs, key=lambda r: r.invoke_time) for e, rs in renews.items()}
    for c in claims:
        done = c.complete_time
        assert done is not None  # an ok op completed
        j = bisect_left(epochs, c.epoch) - 1
        while j >= 0 and claims[j].invoke_time >= done:
            j -= 1
        if j < 0:
            continue
        p = claims[j]
        pe = p.epoch
        if released.get(pe, done) < done:
            continue
        t, via = p.invoke_time, None
        starts = renew_starts.get(pe)
        if starts:
            k = bisect_left(starts, done) - 1
            if k >= 0 and starts[k] > t:
                t, via = starts[k], renew_ops[pe][k]
        if done < t + window:
            cited = [p, via, c] if via is not None else [p, c]
            since = f"{describe(via)} renewed it at {at(t)}" if via else f"it was invoked at {at(t)}"
            out.add(
                "overlapping-lease", node, cited,
                f"{describe(c)} was granted epoch {c.epoch} at {at(done)}, while the previous holder, "
                f"{describe(p)} (epoch {pe}), still held its lease: {since}, so it ran until at least "
                f"{at(int(t + window))} (ttl {header.ttl_ms:g} ms minus clock uncertainty "
                f"{header.clock_uncertainty_ms:g} ms), and it was never released.",
            )


def _first_releases(ops: list[Op], lease: Callable[[Op], Any]) -> dict[Any, int]:
    """When each lease (named by ``lease(op)``) was given back at the earliest: the first
    invoke of an ok or info release of it (an info release may take effect at once)."""
    released: dict[Any, int] = {}
    for op in ops:
        if op.f == "release" and op.type in ("ok", "info"):
            k = lease(op)
            released[k] = min(released.get(k, op.invoke_time), op.invoke_time)
    return released


# ------------------------------------------------------------------- unfenced


class _Leases:
    """Unfenced leases by token: which ok claim an op with a token belongs to.

    Some libraries reuse a token (a client id) for every lease of one worker, so
    an op belongs to the latest claim of its token invoked before it.
    """

    def __init__(self, ops: list[Op]) -> None:
        self.claims = sorted((o for o in ops if o.type == "ok" and o.f == "claim"), key=lambda o: o.invoke_time)
        self._by_token: dict[object, list[Op]] = defaultdict(list)
        for c in self.claims:
            self._by_token[freeze(c.result.get("token"))].append(c)
        self._starts = {t: [c.invoke_time for c in cs] for t, cs in self._by_token.items()}

    def of(self, op: Op) -> Op | None:
        """The claim whose lease ``op`` (renew, effect, commit, release) used."""
        tok = freeze(op.value.get("token"))
        starts = self._starts.get(tok)
        if not starts:
            return None
        i = bisect_left(starts, op.invoke_time) - 1
        return self._by_token[tok][max(i, 0)]


def grant_order(n: NodeHistory, out: Findings) -> None:
    """stale-renew / stale-commit / stale-effect of unfenced leases, by grant order.

    A holder's op is stale when it was invoked after a newer claim (one invoked
    after the holder's claim completed, with another token) had completed.
    """
    node, ops = n.node, n.ops
    leases = _Leases(ops)
    claims = leases.claims
    if len(claims) < 2:
        return
    starts = [c.invoke_time for c in claims]
    for op in ops:
        if op.type != "ok" or op.f not in ("renew", "commit", "effect"):
            continue
        h = leases.of(op)
        if h is None:
            continue
        tok = freeze(h.result.get("token"))
        newer: Op | None = None
        newer_done = 0
        assert h.complete_time is not None  # an ok op completed
        for c in claims[bisect_right(starts, h.complete_time):]:
            if c.invoke_time >= op.invoke_time:
                break
            c_done = c.complete_time
            assert c_done is not None
            if (c_done < op.invoke_time and freeze(c.result.get("token")) != tok
                    and (newer is None or c_done < newer_done)):
                newer, newer_done = c, c_done
        if newer is not None:
            out.add(
                STALE_KINDS[op.f], node, [h, newer, op],
                f"{describe(op)}, whose lease {describe(h)} was granted at {at(h.complete_time)}, was invoked at "
                f"{at(op.invoke_time)}, after the newer {describe(newer)} (invoked at {at(newer.invoke_time)}) "
                f"had been granted at {at(newer.complete_time)}; yet it was accepted.",
            )


def overlapping_unfenced(n: NodeHistory, out: Findings) -> None:
    """overlapping-lease by grant order: a claim granted while an earlier lease was provably held.

    With no epochs, two claims are ordered only when one completed before the
    other was invoked; for two concurrent grants, both leases were surely held
    at once if both completed within ttl − uncertainty of the earlier invoke.
    """
    node, ops = n.node, n.ops
    window = n.surely_held_ns
    if window <= 0:
        return
    leases = _Leases(ops)
    if len(leases.claims) < 2:
        return
    released = _first_releases(ops, lambda op: freeze(op.value.get("token")))
    grants: list[tuple[int, Op, Op]] = [(c.invoke_time, c, c) for c in leases.claims]
    for op in ops:
        if op.type == "ok" and op.f == "renew":
            holder = leases.of(op)
            if holder is not None:
                grants.append((op.invoke_time, op, holder))
    grants.sort(key=lambda g: g[0])
    starts = [g[0] for g in grants]
    for c in leases.claims:
        done = c.complete_time
        assert done is not None  # an ok op completed
        ctok = freeze(c.result.get("token"))
        lo = bisect_right(starts, done - window)
        hi = bisect_left(starts, done)
        for t, via, p in reversed(grants[lo:hi]):
            ptok = freeze(p.result.get("token"))
            if p is c or ptok == ctok:
                continue
            p_done = p.complete_time
            assert p_done is not None
            if p_done < c.invoke_time:
                if released.get(ptok, done) < done:
                    continue
                cited = [p, via, c] if via is not p else [p, c]
                out.add(
                    "overlapping-lease", node, cited,
                    f"{describe(c)} was granted at {at(done)}, while {describe(p)}, granted earlier at "
                    f"{at(p_done)}, still held its lease: it was claimed or renewed at {at(t)}, so it ran "
                    f"until at least {at(int(t + window))}, and it was not released.",
                )
                break
            if via is p and p.index < c.index:
                last = max(p_done, done)
                if last >= min(p.invoke_time, c.invoke_time) + window:
                    continue
                if released.get(ptok, last) < last or released.get(ctok, last) < last:
                    continue
                out.add(
                    "overlapping-lease", node, [p, c],
                    f"{describe(p)} and {describe(c)} were both granted between "
                    f"{at(min(p.invoke_time, c.invoke_time))} and {at(last)}, less than the ttl apart, and "
                    f"neither lease was released: two holders at once.",
                )


# ---------------------------------------------------------------------- both


def stuck(n: NodeHistory, out: Findings) -> None:
    """stuck-lease: a claim refused as ``held`` after every lease had provably expired."""
    node, ops, header = n.node, n.ops, n.header
    refused = [op for op in ops if op.type == "fail" and op.f == "claim" and op.result.get("reason") == "held"]
    if not refused:
        return
    slack = n.surely_expired_ns
    maybe = [op.invoke_time for op in ops if op.type == "info" and op.f in ("claim", "renew")]
    first_maybe = min(maybe) if maybe else None
    grants = sorted((op for op in ops if op.type == "ok" and op.f in ("claim", "renew")), key=lambda o: o.invoke_time)
    starts = [g.invoke_time for g in grants]
    #: for each prefix of ``grants``: the latest completion among them, and its op
    latest: list[tuple[int, Op]] = []
    for g in grants:
        g_done = g.complete_time
        assert g_done is not None  # an ok op completed
        latest.append((g_done, g) if not latest or g_done > latest[-1][0] else latest[-1])
    for f in refused:
        done = f.complete_time
        assert done is not None  # a failed op completed
        if first_maybe is not None and first_maybe < done:
            continue
        k = bisect_left(starts, done)
        if k == 0:
            out.add(
                "stuck-lease", node, [f],
                f"{describe(f)} was refused as held at {at(done)}, but no lease on the node had been granted "
                f"or could have been.",
            )
            continue
        last_done, last = latest[k - 1]
        if f.invoke_time > last_done + slack:
            out.add(
                "stuck-lease", node, [last, f],
                f"{describe(f)} was invoked at {at(f.invoke_time)} and refused as held, but the last lease "
                f"activity, {describe(last)}, completed at {at(last_done)}: every lease had expired by "
                f"{at(int(last_done + slack))} (ttl {header.ttl_ms:g} ms plus clock uncertainty "
                f"{header.clock_uncertainty_ms:g} ms).",
            )


#: the ops a store refuses ``expired`` when it thinks their lease ran out
_CUT_SHORT = frozenset({"renew", "commit", "release"})


def premature_expiry(n: NodeHistory, out: Findings) -> None:
    """premature-expiry: a renew, commit or release refused ``expired`` while its lease provably held.

    docs/contracts/anomaly-kinds.md's definition, for the refused op R of epoch e: T is the latest
    invoke among e's ok claim and ok renews that completed before R was
    invoked; R completed before T + ttl − clock uncertainty; no ok or info
    release of e was invoked before R completed. The store cut the lease
    short. Cites the grant that sets T, then R.
    """
    node, ops, header = n.node, n.ops, n.header
    window = n.surely_held_ns
    if window <= 0:
        return
    refused = [op for op in ops if op.type == "fail" and op.f in _CUT_SHORT and _int_epoch(op)
               and op.result.get("reason") == "expired"]
    if not refused:
        return
    grants: dict[int, list[Op]] = defaultdict(list)  # epoch -> its ok claim(s) and ok renews
    for op in ops:
        if op.type == "ok" and (op.f == "claim" or op.f == "renew") and _int_epoch(op):
            grants[op.epoch].append(op)
    released = _first_releases(ops, lambda op: op.value.get("epoch"))
    for r in refused:
        done = r.complete_time
        assert done is not None  # a failed op completed
        if released.get(r.epoch, done) < done:
            continue  # given back (or maybe given back) before the refusal: "expired" may be the store's word for it
        held = [g for g in grants.get(r.epoch, ()) if g.complete_time is not None and g.complete_time < r.invoke_time]
        if not held:
            continue
        last = max(held, key=lambda g: (g.invoke_time, g.index))
        until = last.invoke_time + window
        if done < until:
            out.add(
                "premature-expiry", node, [last, r],
                f"{describe(r)} was refused as expired at {at(done)}, but {describe(last)}, invoked at "
                f"{at(last.invoke_time)} and completed at {at(last.complete_time)} before the refused op was invoked, "
                f"held the lease until at least {at(int(until))} (ttl {header.ttl_ms:g} ms minus clock uncertainty "
                f"{header.clock_uncertainty_ms:g} ms), and it was never released.",
            )
