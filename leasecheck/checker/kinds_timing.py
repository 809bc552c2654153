"""The timing family of docs/contracts/anomaly-kinds.md: what a lease's ttl promises, broken.

``overlapping-lease`` (two holders at once, by epoch order when fenced, by
grant order when not), ``stuck-lease`` (a claim refused after every lease had
provably expired) and ``premature-expiry`` (a lease cut short while it provably
held), each checked straight from its definition. They are the vocabulary's
timing kinds: defined by the ttl and the clock uncertainty, so the table runs
them only on leases that end at a deadline (header ``lease_expiry``), and none
of them explains ``non-linearizable``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict

from leasecheck.checker.explain import at, describe
from leasecheck.checker.findings import Findings, NodeHistory
from leasecheck.checker.leases import TokenLeases, first_releases, int_epoch
from leasecheck.checker.model import freeze
from leasecheck.histories import Op


def overlapping_fenced(n: NodeHistory, out: Findings) -> None:
    """overlapping-lease, exactly as docs/contracts/anomaly-kinds.md defines it for fenced leases."""
    node, ops, header = n.node, n.ops, n.header
    window = n.surely_held_ns
    if window <= 0:
        return
    claims = sorted((op for op in ops if op.type == "ok" and op.f == "claim" and int_epoch(op)), key=lambda o: o.epoch)
    if len(claims) < 2:
        return
    epochs = [c.epoch for c in claims]
    renews: dict[int | None, list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "renew" and op.type == "ok":
            renews[op.value.get("epoch")].append(op)
    released = first_releases(ops, lambda op: op.value.get("epoch"))
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
                f"{at(t + window)} (ttl {header.ttl_ms:g} ms minus clock uncertainty "
                f"{header.clock_uncertainty_ms:g} ms), and it was never released.",
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
    leases = TokenLeases(ops)
    if len(leases.claims) < 2:
        return
    released = first_releases(ops, lambda op: freeze(op.value.get("token")))
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
                    f"until at least {at(t + window)}, and it was not released.",
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
                f"{at(last_done + slack)} (ttl {header.ttl_ms:g} ms plus clock uncertainty "
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
    refused = [op for op in ops if op.type == "fail" and op.f in _CUT_SHORT and int_epoch(op)
               and op.result.get("reason") == "expired"]
    if not refused:
        return
    grants: dict[int, list[Op]] = defaultdict(list)  # epoch -> its ok claim(s) and ok renews
    for op in ops:
        if op.type == "ok" and (op.f == "claim" or op.f == "renew") and int_epoch(op):
            grants[op.epoch].append(op)
    released = first_releases(ops, lambda op: op.value.get("epoch"))
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
                f"held the lease until at least {at(until)} (ttl {header.ttl_ms:g} ms minus clock uncertainty "
                f"{header.clock_uncertainty_ms:g} ms), and it was never released.",
            )
