"""The seed's verification table as deterministic scenarios, runnable against any backend.

Each scenario drives real clients of one backend (in separate OS processes
where the scenario is about concurrency or crashes) through one promise of the
protocol and returns whether it held, with the evidence. The reference
backends must pass every scenario; each broken variant fails the one that
matches its bug. Synchronisation is by events (barriers, queues, polling a
condition with a deadline), never by sleeping a fixed time and hoping.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, cast

from leasecheck.histories.vocabulary import RUNNING, SUCCEEDED
from leasecheck.targets.base import Lease, OffsetClock, Refused, Target
from leasecheck.targets.registry import TargetSpec
from leasecheck.waiting import poll


@dataclass
class Result:
    """A scenario's outcome: did the promise hold, and what was seen."""

    scenario: str
    held: bool
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)


def _claim_until_granted(t: Target, node: str, owner: str, timeout: float) -> Lease | None:
    def attempt() -> Lease | None:
        r = t.try_claim(node, owner)
        return r if isinstance(r, Lease) else None

    return poll(attempt, timeout)


def _fresh_node(scenario: str) -> str:
    """A node name no other run of any scenario used: scenarios share one store."""
    return f"{scenario}-{os.getpid()}-{time.monotonic_ns()}"


def _takeover_timeout(spec: TargetSpec) -> float:
    """How long a successor keeps trying to claim: ten ttls, plus slack for a slow store."""
    return 10 * spec.config.ttl_ms / 1000 + 5


@contextmanager
def _closing(*clients: Target) -> Iterator[None]:
    """Close every client however the scenario ends (a refused step returns early)."""
    try:
        yield
    finally:
        for c in clients:
            c.close()


def _ctx() -> mp.context.SpawnContext:
    return mp.get_context("spawn")


class WorkerDied(Exception):
    """A scenario's worker process exited before it reported."""


def _get(out: Any, procs: list[Any], timeout: float = 120.0) -> Any:
    """The next report from a worker process; raises WorkerDied if they all exited without one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return out.get(timeout=0.5)
        except queue.Empty:
            if all(p.exitcode is not None for p in procs):
                codes = [p.exitcode for p in procs]
                raise WorkerDied(f"worker processes exited (codes {codes}) before reporting") from None
            if time.monotonic() > deadline:
                raise WorkerDied(f"no report from the worker processes within {timeout:g} s") from None


# ----------------------------------------------------------------------- races


def _race_worker(spec: TargetSpec, owner: str, nodes: list[str], barrier: Any, out: Any) -> None:
    t = spec.make()
    with _closing(t):
        for node in nodes:
            barrier.wait(timeout=60)
            r = t.try_claim(node, owner)
            out.put((node, owner, r.epoch if isinstance(r, Lease) else r.reason))


def race(spec: TargetSpec, rounds: int = 50, prefix: str = "race") -> Result:
    """Two worker processes claim the same READY node at the same instant, ``rounds`` times: one wins each time."""
    t = spec.make()
    nodes = [f"{_fresh_node(prefix)}/{i}" for i in range(rounds)]
    for n in nodes:
        t.add_node(n)
    ctx = _ctx()
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(spec, owner, nodes, barrier, out)) for owner in ("a", "b")]
    for p in procs:
        p.start()
    outcomes: dict[str, list[tuple[str, Any]]] = {n: [] for n in nodes}
    try:
        for _ in range(2 * rounds):
            node, owner, what = _get(out, procs)
            outcomes[node].append((owner, what))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
        t.close()
    winners = {n: [o for o, w in got if isinstance(w, int)] for n, got in outcomes.items()}
    bad = {n: w for n, w in winners.items() if len(w) != 1}
    detail = (
        f"exactly one claim won each of {rounds} races"
        if not bad
        else f"{len(bad)} of {rounds} races did not have exactly one winner, e.g. {next(iter(bad))}: {outcomes[next(iter(bad))]}"
    )
    return Result("race", not bad, detail, {"rounds": rounds, "bad": len(bad)})


# ----------------------------------------------------------------- owner crash


def _owner(spec: TargetSpec, node: str, out: Any) -> None:
    t = spec.make()
    r = t.try_claim(node, "doomed")
    out.put(r.epoch if isinstance(r, Lease) else f"refused {r.reason}")
    signal.pause()  # hold the lease until SIGKILLed


def crash_takeover(spec: TargetSpec) -> Result:
    """The owner is SIGKILLed: its lease holds until it expires, then a new worker claims with a larger epoch."""
    t = spec.make()
    node = _fresh_node("crash")
    t.add_node(node)
    ctx = _ctx()
    out = ctx.Queue()
    p = ctx.Process(target=_owner, args=(spec, node, out))
    p.start()
    with _closing(t):
        old = _get(out, [p])
        assert p.pid is not None  # it has started and reported
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        if not isinstance(old, int):
            return Result("crash-takeover", False, f"the first claim did not succeed: {old}")
        early = t.try_claim(node, "successor")
        if isinstance(early, Lease):
            return Result("crash-takeover", False, f"a claim right after the crash was granted epoch {early.epoch} while the dead owner's lease (epoch {old}) was live")
        new = _claim_until_granted(t, node, "successor", timeout=_takeover_timeout(spec))
    if new is None:
        return Result("crash-takeover", False, f"no claim succeeded after the owner of epoch {old} died")
    ok = new.epoch is None or new.epoch > old
    return Result("crash-takeover", ok, f"after the crash the node was refused ({early.reason}), then granted epoch {new.epoch} > {old}" if ok else f"the new epoch {new.epoch} is not above the dead owner's {old}", {"old": old, "new": new.epoch})


# --------------------------------------------------------------------- zombies


def zombie(spec: TargetSpec) -> Result:
    """The old owner resumes after a new lease exists: its renew, commit and effect are each rejected as stale."""
    old_client, new_client = spec.make(), spec.make()
    node = _fresh_node("zombie")
    with _closing(old_client, new_client):
        old_client.add_node(node)
        old = old_client.try_claim(node, "zombie")
        if not isinstance(old, Lease):
            return Result("zombie", False, f"the first claim was refused: {old}")
        new = _claim_until_granted(new_client, node, "successor", timeout=_takeover_timeout(spec))
        if new is None:
            return Result("zombie", False, "nobody could claim after the old lease expired")
        outcomes = {
            "renew": old_client.renew(old),
            "commit": old_client.commit(old, "zombie-result"),
            "effect": old_client.effect(old, "zombie-write"),
        }
        state = new_client.read(node)
    accepted = [f for f, r in outcomes.items() if not (isinstance(r, Refused) and r.reason == "stale")]
    words = ", ".join(f"{f} -> {'ok' if r is None else r.reason}" for f, r in outcomes.items())
    if accepted:
        return Result("zombie", False, f"the old owner (epoch {old.epoch}) after takeover (epoch {new.epoch}): {words}; final state {state}")
    return Result("zombie", True, f"old owner's ops after takeover: {words}")


# ---------------------------------------------------------- duplicate delivery


def duplicate_delivery(spec: TargetSpec) -> Result:
    """The queue delivers the same node to a second worker while the first holds it: never two owners."""
    a, b = spec.make(), spec.make()
    node = _fresh_node("dup")
    with _closing(a, b):
        a.add_node(node)
        first = a.try_claim(node, "first")
        second = b.try_claim(node, "second")
        renewed = a.renew(first) if isinstance(first, Lease) else None
    if not isinstance(first, Lease):
        return Result("duplicate-delivery", False, f"the first delivery's claim was refused: {first}")
    if isinstance(second, Lease):
        return Result("duplicate-delivery", False, f"both deliveries own the node: epochs {first.epoch} and {second.epoch}")
    if renewed is not None:
        return Result("duplicate-delivery", False, f"the first owner lost its lease to a refused claim: renew -> {renewed.reason}")
    return Result("duplicate-delivery", True, f"the second delivery was refused ({second.reason}); the owner kept its lease")


# ------------------------------------------------------------------- epochs


def epochs_increase(spec: TargetSpec, claims: int = 200) -> Result:
    """Hundreds of claim/release cycles by alternating owners: epochs strictly increase."""
    clients = [spec.make(), spec.make()]
    node = _fresh_node("epochs")
    epochs: list[int | None] = []
    with _closing(*clients):
        clients[0].add_node(node)
        for i in range(claims):
            c = clients[i % 2]
            lease = c.try_claim(node, f"w{i % 2}")
            if not isinstance(lease, Lease):
                return Result("epochs-increase", False, f"claim {i} was refused ({lease.reason}) although the node was released")
            epochs.append(lease.epoch)
            r = c.release(lease)
            if r is not None:
                return Result("epochs-increase", False, f"release {i} was refused: {r.reason}")
    if epochs and epochs[0] is None:
        return Result("epochs-increase", True, f"{claims} claims granted (unfenced: no epochs to compare)")
    fenced = cast(list[int], epochs)  # a fenced backend gives every claim an epoch
    bad = [(i, a, b) for i, (a, b) in enumerate(pairwise(fenced)) if not b > a]
    if bad:
        i, a, b = bad[0]
        return Result("epochs-increase", False, f"claim {i + 1} got epoch {b} after epoch {a} ({len(bad)} such steps)")
    return Result("epochs-increase", True, f"{claims} claims got strictly increasing epochs {epochs[0]}..{epochs[-1]}")


# ----------------------------------------------------------------- heartbeats


def heartbeat_never_completes(spec: TargetSpec, renews: int = 20) -> Result:
    """A heartbeat proves liveness, never success: after many renews the node is still RUNNING."""
    t = spec.make()
    node = _fresh_node("heartbeat")
    with _closing(t):
        t.add_node(node)
        lease = t.try_claim(node, "beater")
        if not isinstance(lease, Lease):
            return Result("heartbeat", False, f"claim refused: {lease}")
        refused = [r for r in (t.renew(lease) for _ in range(renews)) if r is not None]
        state = t.read(node)
    if refused:
        return Result("heartbeat", False, f"a renew by the live owner was refused: {refused[0].reason}")
    if state.status != RUNNING:
        return Result("heartbeat", False, f"after {renews} renews the node is {state.status}")
    return Result("heartbeat", True, f"after {renews} renews the node is RUNNING with epoch {state.epoch}")


# ----------------------------------------------------------------- durability


def durable_commit(spec: TargetSpec, restart: Callable[[], None]) -> Result:
    """An acknowledged commit is still there after the store restarts."""
    t = spec.make()
    node = _fresh_node("durable")
    with _closing(t):
        t.add_node(node)
        lease = t.try_claim(node, "committer")
        if not isinstance(lease, Lease):
            return Result("durable-commit", False, f"claim refused: {lease}")
        r = t.commit(lease, "the-result")
        if r is not None:
            return Result("durable-commit", False, f"commit refused: {r.reason}")
    restart()
    t = spec.make()
    with _closing(t):
        state = poll(lambda: _read_or_none(t, node), timeout=30)
    want = (SUCCEEDED, lease.epoch, "the-result")
    got = None if state is None else (state.status, state.epoch, state.result)
    ok = got == want if lease.epoch is not None else got is not None and got[0] == SUCCEEDED and got[2] == "the-result"
    return Result("durable-commit", ok, f"after the restart the node reads {got}, committed {want}")


def _read_or_none(t: Target, node: str) -> Any:
    try:
        return t.read(node)
    except Exception:
        return None


# ----------------------------------------------------------------- clocks


def skewed_client(spec: TargetSpec, ahead_ttls: float = 10.0) -> Result:
    """A worker whose clock runs ``ahead_ttls`` ttls ahead cannot take a live lease (expiry is the store's)."""
    honest = spec.make()
    skewed = spec.make(clock=OffsetClock(ahead_ttls * spec.config.ttl_ms))
    node = _fresh_node("skew")
    with _closing(honest, skewed):
        honest.add_node(node)
        first = honest.try_claim(node, "honest")
        stolen = skewed.try_claim(node, "skewed")
    if not isinstance(first, Lease):
        return Result("skewed-client", False, f"claim refused: {first}")
    if isinstance(stolen, Lease):
        return Result("skewed-client", False, f"a worker {ahead_ttls:g} ttls ahead took the live lease (epoch {first.epoch}) with epoch {stolen.epoch}")
    return Result("skewed-client", True, f"the skewed worker was refused ({stolen.reason})")


SCENARIOS: dict[str, Callable[..., Result]] = {
    "race": race,
    "crash-takeover": crash_takeover,
    "zombie": zombie,
    "duplicate-delivery": duplicate_delivery,
    "epochs-increase": epochs_increase,
    "heartbeat": heartbeat_never_completes,
    "durable-commit": durable_commit,
    "skewed-client": skewed_client,
}
