"""The conformance scenarios of skewed worker clocks: expiry is the store's, never a worker's.

A worker whose clock runs ahead cannot take a live lease (``skewed-client``); a
holder whose clock runs behind keeps its lease by renewing (``skewed-renew``).
"""

from __future__ import annotations

from leasecheck.kit.scenario_clients import closing, fresh_node
from leasecheck.kit.scenario_outcomes import Result, lease_name, said
from leasecheck.targets.base import Lease, OffsetClock
from leasecheck.targets.registry import TargetSpec


def skewed_client(spec: TargetSpec, ahead_ttls: float = 10.0) -> Result:
    """A worker whose clock runs ``ahead_ttls`` ttls ahead cannot take a live lease (expiry is the store's)."""
    honest = spec.make()
    skewed = spec.make(clock=OffsetClock(ahead_ttls * spec.config.ttl_ms))
    node = fresh_node("skew")
    with closing(honest, skewed):
        honest.add_node(node)
        first = honest.try_claim(node, "honest")
        stolen = skewed.try_claim(node, "skewed")
    if not isinstance(first, Lease):
        return Result("skewed-client", False, f"claim {said(first)}")
    if isinstance(stolen, Lease):
        return Result("skewed-client", False, f"a worker {ahead_ttls:g} ttls ahead took the live lease ({lease_name(first)}) with {lease_name(stolen)}")
    return Result("skewed-client", True, f"the skewed worker was refused ({stolen.reason})")


def skewed_renew(spec: TargetSpec, behind_ttls: float = 10.0, renews: int = 3) -> Result:
    """A holder whose clock runs ``behind_ttls`` ttls behind keeps its lease by renewing (expiry is the store's).

    It claims, renews ``renews`` times back to back and commits, all well
    within one ttl: the store granted the claim and each renew a whole ttl by
    its own clock, so every one of them must be accepted. A store that takes
    the deadline from the worker's clock ends the lease at the first renew,
    and refuses the next op ``expired`` (``premature-expiry``).
    """
    skewed = spec.make(clock=OffsetClock(-behind_ttls * spec.config.ttl_ms))
    node = fresh_node("behind")
    with closing(skewed):
        skewed.add_node(node)
        lease = skewed.try_claim(node, "behind")
        if not isinstance(lease, Lease):
            return Result("skewed-renew", False, f"claim {said(lease)}")
        for i in range(renews):
            r = skewed.renew(lease)
            if r is not None:
                return Result("skewed-renew", False, f"premature-expiry: renew {i + 1} of a live lease {said(r)}")
        done = skewed.commit(lease, "behind")
    if done is not None:
        return Result("skewed-renew", False, f"premature-expiry: commit after {renews} renews {said(done)}")
    return Result("skewed-renew", True, f"a holder {behind_ttls:g} ttls behind renewed {renews} times and committed")
