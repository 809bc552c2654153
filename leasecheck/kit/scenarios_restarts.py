"""The conformance scenarios that restart the store: an acknowledged commit survives, a silent owner's lease still expires.

They take the restart as their second argument (the table's ``RESTARTING``):
a test that can restart its store passes one; the scaffold's test leaves them out.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from leasecheck.histories.vocabulary import SUCCEEDED
from leasecheck.kit.scenario_clients import closing, fresh_node, read_or_none
from leasecheck.kit.scenario_outcomes import Result, said
from leasecheck.kit.scenarios_liveness import claim_after_expiry
from leasecheck.targets.base import Lease
from leasecheck.targets.registry import TargetSpec
from leasecheck.waiting import poll


def durable_commit(spec: TargetSpec, restart: Callable[[], None]) -> Result:
    """An acknowledged commit is still there after the store restarts."""
    t = spec.make()
    node = fresh_node("durable")
    with closing(t):
        t.add_node(node)
        lease = t.try_claim(node, "committer")
        if not isinstance(lease, Lease):
            return Result("durable-commit", False, f"claim {said(lease)}")
        r = t.commit(lease, "the-result")
        if r is not None:
            return Result("durable-commit", False, f"commit refused: {r.reason}")
    restart()
    t = spec.make()
    with closing(t):
        state = poll(lambda: read_or_none(t, node), timeout=30)
    want = (SUCCEEDED, lease.epoch, "the-result")
    got = None if state is None else (state.status, state.epoch, state.result)
    ok = got == want if lease.epoch is not None else got is not None and got[0] == SUCCEEDED and got[2] == "the-result"
    return Result("durable-commit", ok, f"after the restart the node reads {got}, committed {want}")


def expiry_across_restart(spec: TargetSpec, restart: Callable[[], None], margin_s: float | None = None) -> Result:
    """A lease whose owner went silent expires on time even if the store restarted meanwhile.

    The owner claims and falls silent; the store restarts; a bystander that was
    connected before reconnects (a client library's recovery routine runs
    then); a successor's claim must be granted once ttl + margin has passed
    since the owner's claim. A store or client that re-arms leases after an
    outage ("a grace period after failover") keeps the node held by a dead
    owner: the checker's ``stuck-lease`` for a lease that expired while the
    store was down. Judged, like ``stuck-lease``, on the successor's own
    timestamps: a slow restart can only make it kinder.
    """
    ttl = spec.config.ttl_ms / 1000
    margin = ttl / 2 + 0.05 if margin_s is None else margin_s
    owner, bystander = spec.make(), spec.make()
    node = fresh_node("restart-expiry")
    with closing(owner, bystander):
        owner.add_node(node)
        bystander.read(node)  # connected before the outage
        lease = owner.try_claim(node, "silent")
        claimed = time.monotonic()
        if not isinstance(lease, Lease):
            return Result("expiry-across-restart", False, f"claim {said(lease)}")
        restart()
        if poll(lambda: read_or_none(bystander, node), timeout=30) is None:
            return Result("expiry-across-restart", False, "the store did not answer within 30 s of its restart")
        successor = spec.make()
        with closing(successor):
            waited = claim_after_expiry(
                successor, node, "expiry-across-restart", since=claimed, ttl=ttl, margin=margin,
                after="the silent owner's claim and a store restart",
            )
        if isinstance(waited, Result):
            return waited
        got, held, _ = waited
    return Result(
        "expiry-across-restart", True,
        f"after the restart the node was {said(got)} {time.monotonic() - claimed:.3f} s after the silent owner's claim "
        f"(ttl {ttl:g} s, {held} claims refused held)",
    )
