"""The conformance scenario of the protected resource: what it accepted, read back as it accepted it.

A run's final phase and its workload read each node's resource
(``read_resource``: the fence and the log of accepted effects); the checker
proves a zombie's lasting damage from those reads. A read that does not tell
the truth (an entry missing, out of order, with another lease's epoch, or a
fence below what the resource already accepted) would hide that damage, or
invent some. So ``resource`` drives one takeover and reads the resource back:

* the first holder writes, a successor takes the node over after the lease
  expired and writes, then the first holder (now a zombie) writes again;
* the resource must list exactly the effects it accepted, oldest first, each
  with the epoch (or, unfenced, the token) of the lease that wrote it: the
  zombie's write is listed if and only if it was accepted (whether it should
  have been is the ``zombie`` scenario's question, not this one's);
* a fence the read gives is at least every epoch it lists and, when a claim
  lifts it (``effect_fence: "lease"``), at least the successor's epoch, read
  right after its claim and before it wrote anything.

A backend that cannot read its resource (an adapter written before
``read_resource`` existed) has nothing to check: the result holds, with
``facts["skipped"]`` set, so a test can say it was skipped.
"""

from __future__ import annotations

import secrets

from leasecheck.kit.scenario_clients import claim_until_granted, closing, fresh_node, takeover_timeout
from leasecheck.kit.scenario_outcomes import Result, lease_name, said, supersedes
from leasecheck.targets.base import Accepted, Lease, ResourceState, Target, reads_resource
from leasecheck.targets.registry import TargetSpec

NAME = "resource"


def effect_fence_of(client: Target) -> str:
    """The rule the backend's resource fences by: an exec child's hello says it, any other backend's class."""
    hello = getattr(client, "hello", None)
    return str(getattr(hello, "effect_fence", None) or client.effect_fence)


def written_by(entry: Accepted, lease: Lease) -> bool:
    """Does ``entry`` name ``lease`` as its writer: its epoch, or (unfenced) its token?"""
    if lease.epoch is not None:
        return entry.epoch == lease.epoch
    return entry.epoch is None and entry.token == lease.token


def listed(state: ResourceState) -> str:
    return "[" + ", ".join(f"{e.payload} ({'epoch ' + str(e.epoch) if e.epoch is not None else 'token ' + repr(e.token)})"
                           for e in state.accepted) + f"], fence {state.fence}"


def judge_log(state: ResourceState, wrote: list[tuple[Lease, str]]) -> str | None:
    """What is wrong with ``state``'s log, given the effects accepted in order (``wrote``); None if nothing."""
    payloads = [p for _, p in wrote]
    if [e.payload for e in state.accepted] != payloads:
        return f"the resource lists {listed(state)}, but accepted {payloads} in that order"
    for entry, (lease, payload) in zip(state.accepted, wrote):
        if not written_by(entry, lease):
            return f"{payload} was written with {lease_name(lease)}, but the resource lists it as {entry.to_json()}"
    return None


def judge_fence(state: ResourceState, floor: int | None, when: str) -> str | None:
    """What is wrong with ``state``'s fence: below an epoch it lists, or below ``floor`` (a claim lifted it)."""
    if state.fence is None:
        return None
    epochs = [e.epoch for e in state.accepted if e.epoch is not None]
    if epochs and state.fence < max(epochs):
        return f"{when}, the fence {state.fence} is below epoch {max(epochs)}, which the resource lists as accepted"
    if floor is not None and state.fence < floor:
        return f"{when}, the fence {state.fence} is below the epoch {floor} the latest claim granted (effect_fence \"lease\")"
    return None


def resource(spec: TargetSpec) -> Result:
    """Write, take over, write, let the zombie write: the resource reads back what it accepted, in order, fenced."""
    old_client, new_client = spec.make(), spec.make()
    node, tag = fresh_node(NAME), secrets.token_hex(4)
    with closing(old_client, new_client):
        if not reads_resource(old_client):
            return Result(NAME, True, f"{type(old_client).__name__} does not read its protected resource "
                          "(read_resource): nothing to check", {"skipped": True})
        lease_rule = effect_fence_of(old_client) == "lease"
        old_client.add_node(node)
        old = old_client.try_claim(node, "first")
        if not isinstance(old, Lease):
            return Result(NAME, False, f"the first claim was {said(old)}")
        first = old_client.effect(old, f"first:{tag}:1")
        if first is not None:
            return Result(NAME, False, f"the holder's effect ({lease_name(old)}) was {said(first)}")
        new = claim_until_granted(new_client, node, "successor", timeout=takeover_timeout(spec))
        if new is None:
            return Result(NAME, False, "nobody could claim after the first lease expired")
        if not supersedes(new, old):
            return Result(NAME, False, f"the takeover's {lease_name(new)} is not a later lease than {lease_name(old)}")
        after_claim = new_client.read_resource(node)
        second = new_client.effect(new, f"successor:{tag}:2")
        if second is not None:
            return Result(NAME, False, f"the successor's effect ({lease_name(new)}) was {said(second)}")
        late = old_client.effect(old, f"zombie:{tag}:3")
        final = old_client.read_resource(node)
    wrote = [(old, f"first:{tag}:1"), (new, f"successor:{tag}:2")] + ([(old, f"zombie:{tag}:3")] if late is None else [])
    floor = new.epoch if lease_rule else None
    facts = {"after_claim": after_claim.to_json(), "final": final.to_json(), "zombie_effect": said(late)}
    problem = (judge_log(after_claim, wrote[:1]) or judge_fence(after_claim, floor, "after the successor's claim")
               or judge_log(final, wrote) or judge_fence(final, floor, "at the end"))
    if problem is not None:
        return Result(NAME, False, problem, facts)
    return Result(NAME, True, f"the zombie's effect was {said(late)}; the resource reads {listed(final)}", facts)
