"""The conformance scenarios of ownership: one owner at a time, and each new owner a later lease.

Two processes racing for a node, an owner SIGKILLed and taken over, the queue
delivering a held node twice, and hundreds of claims in a row. The races and the
crash run real clients in separate OS processes (:mod:`.scenario_clients`).
"""

from __future__ import annotations

import os
import signal
import time
from itertools import pairwise
from typing import Any

from leasecheck.kit.scenario_clients import claim_until_granted, closing, fresh_node, next_report, spawn_context, takeover_timeout
from leasecheck.kit.scenario_outcomes import Result, lease_name, said, supersedes
from leasecheck.targets.base import Lease, Refused
from leasecheck.targets.registry import TargetSpec

# ----------------------------------------------------------------------- races


#: a racer's report: (owner, what its claim got, when it sent the claim, when the answer came), monotonic seconds
RaceReport = tuple[str, Lease | Refused, float, float]


def _race_worker(spec: TargetSpec, owner: str, nodes: list[str], barrier: Any, out: Any) -> None:
    t = spec.make()
    with closing(t):
        for node in nodes:
            barrier.wait(timeout=60)
            invoked = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the host
            got = t.try_claim(node, owner)
            out.put((node, owner, got, invoked, time.monotonic()))
        # neither closes its client before both have claimed the last node: a lock client's close releases what it
        # holds, and the rival's late claim would win a lock given back (seen beside load: the last round won twice)
        barrier.wait(timeout=60)


def race(spec: TargetSpec, rounds: int = 50, prefix: str = "race") -> Result:
    """Two worker processes claim the same READY node at the same instant, ``rounds`` times: one wins each time.

    Two winners prove a double grant only when each claim was answered before the other was sent plus the ttl:
    then whichever was granted first was surely live when the other was granted. A racer the machine held back
    longer than that may win after the first lease expired, as it should (seen beside two CPU-bound processes:
    a 1 s lease); such a round proves nothing either way and does not count, and fewer than half the rounds
    counting is a failure (the scenario tested too little), never a pass.
    """
    t = spec.make()
    nodes = [f"{fresh_node(prefix)}/{i}" for i in range(rounds)]
    for n in nodes:
        t.add_node(n)
    ctx = spawn_context()
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(spec, owner, nodes, barrier, out)) for owner in ("a", "b")]
    for p in procs:
        p.start()
    outcomes: dict[str, list[RaceReport]] = {n: [] for n in nodes}
    try:
        for _ in range(2 * rounds):
            node, owner, what, invoked, done = next_report(out, procs)
            outcomes[node].append((owner, what, invoked, done))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        t.close()
    return judge_race(outcomes, spec.config.ttl_ms / 1000)


def judge_race(outcomes: dict[str, list[RaceReport]], ttl_s: float) -> Result:
    """The race scenario's verdict from each round's two reports (see :func:`race`)."""
    rounds = len(outcomes)
    bad: dict[str, str] = {}
    late = 0  # rounds whose second grant came after the first lease may have expired
    for n, got in outcomes.items():
        seen = "; ".join(f"{o}: {said(w)}" for o, w, _, _ in got)
        wins = sorted((invoked, done) for _, w, invoked, done in got if isinstance(w, Lease))
        if not wins:
            bad[n] = f"no claim won: {seen}"
        elif len(wins) > 1 and wins[1][1] < wins[0][0] + ttl_s and wins[0][1] < wins[1][0] + ttl_s:
            # each was granted within its claim's interval, and each lease lives at least ttl from its claim's send:
            # whichever came first, the other was granted before it could have expired
            bad[n] = f"both won while the first lease was surely live: {seen}"
        elif len(wins) > 1:
            late += 1
    counted = rounds - late
    if bad:
        example = next(iter(bad))
        detail = f"{len(bad)} of {rounds} races did not have exactly one winner, e.g. {example}: {bad[example]}"
    elif counted < rounds / 2:
        detail = (f"only {counted} of {rounds} races were decided while the first lease was surely live (the "
                  f"machine held a racer back past the ttl in the others): too few to tell")
    else:
        detail = f"exactly one claim won each of {counted} races" + (
            f" ({late} more were won twice, the second after the first lease may have expired)" if late else "")
    return Result("race", not bad and counted >= rounds / 2, detail, {"rounds": rounds, "bad": len(bad), "late": late})


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
