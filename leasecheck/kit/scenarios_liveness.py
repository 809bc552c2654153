"""The conformance scenarios of liveness: a heartbeat keeps a lease, and a silent owner's lease ends on time.

A heartbeat proves liveness, never success (``heartbeat``); once an owner stops,
another worker's claim is granted within ttl + margin (``stuck-lease``).
:func:`claim_after_expiry` is that wait, judged on the successor's own
timestamps; the restart scenarios (:mod:`.scenarios_restarts`) use it too.
"""

from __future__ import annotations

import time

from leasecheck.histories.vocabulary import RUNNING
from leasecheck.kit.scenario_clients import closing, fresh_node
from leasecheck.kit.scenario_outcomes import Result, lease_name, said
from leasecheck.targets.base import Lease, Target
from leasecheck.targets.registry import TargetSpec


def heartbeat_never_completes(spec: TargetSpec, renews: int = 20) -> Result:
    """A heartbeat proves liveness, never success: after many renews the node is still RUNNING."""
    t = spec.make()
    node = fresh_node("heartbeat")
    with closing(t):
        t.add_node(node)
        lease = t.try_claim(node, "beater")
        if not isinstance(lease, Lease):
            return Result("heartbeat", False, f"claim {said(lease)}")
        refused = [r for r in (t.renew(lease) for _ in range(renews)) if r is not None]
        state = t.read(node)
    if refused:
        return Result("heartbeat", False, f"a renew by the live owner was refused: {refused[0].reason}")
    if state.status != RUNNING:
        return Result("heartbeat", False, f"after {renews} renews the node is {state.status}")
    return Result("heartbeat", True, f"after {renews} renews the node is RUNNING, held by {lease_name(lease)}")


def claim_after_expiry(
    successor: Target, node: str, scenario: str, *, since: float, ttl: float, margin: float, after: str,
) -> tuple[Lease, int, float] | Result:
    """Claim ``node`` until granted: (the lease, the claims refused held, when it completed).

    A claim refused ``held`` although it was invoked more than ttl + margin
    after ``since`` (the lease's last sign of life) ends the scenario as
    failed: the store kept a dead owner's lease (``stuck-lease``). Only the
    successor's own timestamps count, so a slow machine can only be kinder.
    """
    held = 0
    while True:
        invoked = time.monotonic()
        got = successor.try_claim(node, "successor")
        done = time.monotonic()
        if isinstance(got, Lease):
            return got, held, done
        if got.reason != "held":
            return Result(scenario, False, f"after {after} a claim was {said(got)}")
        held += 1
        if invoked > since + ttl + margin:
            return Result(
                scenario, False,
                f"stuck-lease: {invoked - since:.3f} s after {after} (ttl {ttl:g} s, margin {margin:g} s) "
                f"a claim was still refused held ({held} refusals so far)",
                {"held_for_s": invoked - since, "refusals": held},
            )
        time.sleep(min(0.01, ttl / 20))


def stuck_lease(spec: TargetSpec, heartbeats: int = 10, margin_s: float | None = None) -> Result:
    """The owner heartbeats, then stops: once ttl + margin has passed since its last heartbeat, another worker's claim is granted.

    A store that keeps the node held longer (a heartbeat that adds its ttl to
    the old expiry instead of to now, a unit error in the expiry) leaves the
    node stuck after its owner is gone: the checker's ``stuck-lease``. The
    verdict rests on the successor's timestamps alone, so a slow machine can
    only make it kinder: a refusal counts against the store only when that
    claim was invoked after the deadline, and an early grant only when the
    claim completed before the owner's last heartbeat was invoked plus
    ttl − margin (then the store cut the renewed lease short).

    ``margin_s`` is how much the store's clock may misjudge a ttl (default: half
    a ttl plus 50 ms); everything beyond it is the store's doing.
    """
    ttl = spec.config.ttl_ms / 1000
    margin = ttl / 2 + 0.05 if margin_s is None else margin_s
    owner, successor = spec.make(), spec.make()
    node = fresh_node("stuck")
    with closing(owner, successor):
        owner.add_node(node)
        lease = owner.try_claim(node, "beater")
        if not isinstance(lease, Lease):
            return Result("stuck-lease", False, f"claim {said(lease)}")
        beat_invoked = beat_done = 0.0
        for i in range(heartbeats):
            beat_invoked = time.monotonic()
            r = owner.renew(lease)
            beat_done = time.monotonic()
            if r is not None:
                return Result("stuck-lease", False, f"heartbeat {i + 1} of the live owner was {said(r)}")
        waited = claim_after_expiry(
            successor, node, "stuck-lease", since=beat_done, ttl=ttl, margin=margin,
            after="the owner's last heartbeat",
        )
        if isinstance(waited, Result):
            return waited
        got, held, done = waited
    facts = {"granted_after_s": done - beat_done, "refusals": held}
    if done < beat_invoked + ttl - margin:
        return Result(
            "stuck-lease", False,
            f"the node was {said(got)} {done - beat_invoked:.3f} s after the owner's last heartbeat was sent, "
            f"although that heartbeat renewed the lease for {ttl:g} s",
            facts,
        )
    return Result(
        "stuck-lease", True,
        f"after {heartbeats} heartbeats and {held} claims refused held, the node was {said(got)} "
        f"{done - beat_done:.3f} s after the last heartbeat (ttl {ttl:g} s)",
        facts,
    )
