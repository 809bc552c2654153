"""The conformance scenarios of ownership: one owner at a time, and each new owner a later lease.

Two processes racing for a node, an owner SIGKILLed and taken over, the queue
delivering a held node twice, and hundreds of claims in a row. The races and the
crash run real clients in separate OS processes (:mod:`.scenario_clients`).
"""

from __future__ import annotations

import os
import signal
from itertools import pairwise
from typing import Any

from leasecheck.kit.scenario_clients import claim_until_granted, closing, fresh_node, next_report, spawn_context, takeover_timeout
from leasecheck.kit.scenario_outcomes import Result, lease_name, said, supersedes
from leasecheck.targets.base import Lease, Refused
from leasecheck.targets.registry import TargetSpec

# ----------------------------------------------------------------------- races


def _race_worker(spec: TargetSpec, owner: str, nodes: list[str], barrier: Any, out: Any) -> None:
    t = spec.make()
    with closing(t):
        for node in nodes:
            barrier.wait(timeout=60)
            out.put((node, owner, t.try_claim(node, owner)))


def race(spec: TargetSpec, rounds: int = 50, prefix: str = "race") -> Result:
    """Two worker processes claim the same READY node at the same instant, ``rounds`` times: one wins each time."""
    t = spec.make()
    nodes = [f"{fresh_node(prefix)}/{i}" for i in range(rounds)]
    for n in nodes:
        t.add_node(n)
    ctx = spawn_context()
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(spec, owner, nodes, barrier, out)) for owner in ("a", "b")]
    for p in procs:
        p.start()
    outcomes: dict[str, list[tuple[str, Lease | Refused]]] = {n: [] for n in nodes}
    try:
        for _ in range(2 * rounds):
            node, owner, what = next_report(out, procs)
            outcomes[node].append((owner, what))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        t.close()
    winners = {n: [o for o, w in got if isinstance(w, Lease)] for n, got in outcomes.items()}
    bad = {n: w for n, w in winners.items() if len(w) != 1}
    if bad:
        example = next(iter(bad))
        seen = "; ".join(f"{o}: {said(w)}" for o, w in outcomes[example])
        detail = f"{len(bad)} of {rounds} races did not have exactly one winner, e.g. {example}: {seen}"
    else:
        detail = f"exactly one claim won each of {rounds} races"
    return Result("race", not bad, detail, {"rounds": rounds, "bad": len(bad)})


# ----------------------------------------------------------------- owner crash


def _owner(spec: TargetSpec, node: str, out: Any) -> None:
    t = spec.make()
    out.put(t.try_claim(node, "doomed"))
    signal.pause()  # hold the lease until SIGKILLed


def crash_takeover(spec: TargetSpec) -> Result:
    """The owner is SIGKILLed: its lease holds until it expires, then a new worker gets a new lease (a larger epoch, or another token)."""
    t = spec.make()
    node = fresh_node("crash")
    t.add_node(node)
    ctx = spawn_context()
    out = ctx.Queue()
    p = ctx.Process(target=_owner, args=(spec, node, out))
    p.start()
    with closing(t):
        old: Lease | Refused = next_report(out, [p])
        assert p.pid is not None  # it has started and reported
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        if not isinstance(old, Lease):
            return Result("crash-takeover", False, f"the first claim did not succeed: {said(old)}")
        early = t.try_claim(node, "successor")
        if isinstance(early, Lease):
            return Result("crash-takeover", False, f"a claim right after the crash was {said(early)} while the dead owner's lease ({lease_name(old)}) was live")
        new = claim_until_granted(t, node, "successor", timeout=takeover_timeout(spec))
    if new is None:
        return Result("crash-takeover", False, f"no claim succeeded after the owner of {lease_name(old)} died")
    facts = {"old": old.to_json(), "new": new.to_json()}
    if not supersedes(new, old):
        return Result("crash-takeover", False, f"the successor's {lease_name(new)} is not a later lease than the dead owner's {lease_name(old)}", facts)
    return Result("crash-takeover", True, f"after the crash the node was refused ({early.reason}), then {said(new)}, a later lease than the dead owner's {lease_name(old)}", facts)


# ---------------------------------------------------------- duplicate delivery


def duplicate_delivery(spec: TargetSpec) -> Result:
    """The queue delivers the same node to a second worker while the first holds it: never two owners."""
    a, b = spec.make(), spec.make()
    node = fresh_node("dup")
    with closing(a, b):
        a.add_node(node)
        first = a.try_claim(node, "first")
        second = b.try_claim(node, "second")
        renewed = a.renew(first) if isinstance(first, Lease) else None
    if not isinstance(first, Lease):
        return Result("duplicate-delivery", False, f"the first delivery's claim was {said(first)}")
    if isinstance(second, Lease):
        return Result("duplicate-delivery", False, f"both deliveries own the node: {lease_name(first)} and {lease_name(second)}")
    if renewed is not None:
        return Result("duplicate-delivery", False, f"the first owner lost its lease to a refused claim: renew -> {renewed.reason}")
    return Result("duplicate-delivery", True, f"the second delivery was refused ({second.reason}); the owner kept its lease")


# ------------------------------------------------------------------- epochs


def epochs_increase(spec: TargetSpec, claims: int = 200) -> Result:
    """Hundreds of claim/release cycles by alternating owners: each claim is a later lease (epochs strictly increase; tokens change)."""
    clients = [spec.make(), spec.make()]
    node = fresh_node("epochs")
    leases: list[Lease] = []
    with closing(*clients):
        clients[0].add_node(node)
        for i in range(claims):
            c = clients[i % 2]
            lease = c.try_claim(node, f"w{i % 2}")
            if not isinstance(lease, Lease):
                return Result("epochs-increase", False, f"claim {i} was refused ({lease.reason}) although the node was released")
            leases.append(lease)
            r = c.release(lease)
            if r is not None:
                return Result("epochs-increase", False, f"release {i} was refused: {r.reason}")
    bad = [(i, a, b) for i, (a, b) in enumerate(pairwise(leases)) if not supersedes(b, a)]
    if bad:
        i, a, b = bad[0]
        return Result("epochs-increase", False, f"claim {i + 1} got {lease_name(b)} after {lease_name(a)} ({len(bad)} such steps)")
    if not leases or leases[0].epoch is None:
        return Result("epochs-increase", True, f"{claims} claims each got a new token (unfenced: no epochs to order)")
    return Result("epochs-increase", True, f"{claims} claims got strictly increasing epochs {leases[0].epoch}..{leases[-1].epoch}")
