"""The seed's verification table as deterministic scenarios, runnable against any backend.

Each scenario drives real clients of one backend (in separate OS processes
where the scenario is about concurrency or crashes) through one promise of the
protocol and returns whether it held, with the evidence. The reference
backends must pass every scenario; each broken variant fails the one that
matches its bug. Synchronisation is by events (barriers, queues, polling a
condition with a deadline), never by sleeping a fixed time and hoping.

A lease is judged by what it is, a :class:`Lease` the store granted, never by
the shape of its name: a fenced backend names it by an integer epoch, an
unfenced one by an opaque token (``epoch`` None). Where a scenario compares two
leases it asks :func:`supersedes`, which compares epochs when there are epochs
and otherwise only asks for a different token: an unfenced backend orders its
leases by grant time alone, as the checker does.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from leasecheck.histories.vocabulary import RUNNING, SUCCEEDED, Refusal
from leasecheck.targets.base import Lease, NodeState, OffsetClock, Outcome, Refused, Target
from leasecheck.targets.registry import TargetSpec
from leasecheck.waiting import poll


@dataclass
class Result:
    """A scenario's outcome: did the promise hold, and what was seen."""

    scenario: str
    held: bool
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)


#: what a store may answer a lease that lost its node to a newer claim: each means "not applied,
#: and not yours any more", and which one a backend gives is its own business (a fenced store
#: knows the lease is stale; a token store may only see that this token's lease ran out)
SUPERSEDED_REFUSALS: frozenset[Refusal] = frozenset({"stale", "expired", "not-owner"})


def lease_name(lease: Lease) -> str:
    """A lease in words: its epoch, or its token when the backend has no fencing token."""
    return f"epoch {lease.epoch}" if lease.epoch is not None else f"token {lease.token!r}"


def said(outcome: Lease | Outcome) -> str:
    """What the store answered, in words: ``granted epoch 3``, ``refused held``, ``ok``."""
    if isinstance(outcome, Lease):
        return f"granted {lease_name(outcome)}"
    if isinstance(outcome, Refused):
        return f"refused {outcome.reason}" + (f" ({outcome.message})" if outcome.message else "")
    return "ok"


def supersedes(new: Lease, old: Lease) -> bool:
    """Is ``new`` a later lease than ``old``, as the backend can show it?

    Fenced: a strictly larger epoch. Unfenced (no epochs on either): another
    token, since grant order is all a token store has. One of each is a
    backend that fences only sometimes, which nothing can order.
    """
    if new.epoch is not None and old.epoch is not None:
        return new.epoch > old.epoch
    if new.epoch is None and old.epoch is None:
        return new.token is not None and new.token != old.token
    return False


def _holds(state: NodeState, lease: Lease) -> bool:
    """Does a read show ``lease`` as the node's running lease (by every field the read gives)?"""
    if state.status != RUNNING or state.owner != lease.owner:
        return False
    if lease.epoch is not None:
        return state.epoch == lease.epoch
    return state.token is None or state.token == lease.token


def _claim_until_granted(t: Target, node: str, owner: str, timeout: float) -> Lease | None:
    def attempt() -> Lease | None:
        r = t.try_claim(node, owner)
        return r if isinstance(r, Lease) else None

    return poll(attempt, timeout)


def _fresh_node(scenario: str) -> str:
    """A node name no other run of any scenario used: scenarios share one store (a team's LEASECHECK_URL, run
    after run and from several CI machines at once: the random part keeps two machines' names apart)."""
    return f"{scenario}-{os.getpid()}-{time.monotonic_ns()}-{secrets.token_hex(4)}"


def _takeover_timeout(spec: TargetSpec) -> float:
    """How long a successor keeps trying to claim: ten ttls, plus slack for a slow store."""
    return 10 * spec.config.ttl_ms / 1000 + 5


def _patient_ttl_ms(spec: TargetSpec) -> int:
    """A lease that outlives any probe of it: ten ttls, and at least 10 s."""
    return max(10 * spec.config.ttl_ms, 10_000)


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
            out.put((node, owner, t.try_claim(node, owner)))


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
    outcomes: dict[str, list[tuple[str, Lease | Refused]]] = {n: [] for n in nodes}
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
    node = _fresh_node("crash")
    t.add_node(node)
    ctx = _ctx()
    out = ctx.Queue()
    p = ctx.Process(target=_owner, args=(spec, node, out))
    p.start()
    with _closing(t):
        old: Lease | Refused = _get(out, [p])
        assert p.pid is not None  # it has started and reported
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        if not isinstance(old, Lease):
            return Result("crash-takeover", False, f"the first claim did not succeed: {said(old)}")
        early = t.try_claim(node, "successor")
        if isinstance(early, Lease):
            return Result("crash-takeover", False, f"a claim right after the crash was {said(early)} while the dead owner's lease ({lease_name(old)}) was live")
        new = _claim_until_granted(t, node, "successor", timeout=_takeover_timeout(spec))
    if new is None:
        return Result("crash-takeover", False, f"no claim succeeded after the owner of {lease_name(old)} died")
    facts = {"old": old.to_json(), "new": new.to_json()}
    if not supersedes(new, old):
        return Result("crash-takeover", False, f"the successor's {lease_name(new)} is not a later lease than the dead owner's {lease_name(old)}", facts)
    return Result("crash-takeover", True, f"after the crash the node was refused ({early.reason}), then {said(new)}, a later lease than the dead owner's {lease_name(old)}", facts)


# --------------------------------------------------------------------- zombies


def _took_over(old_client: Target, new_client: Target, node: str, spec: TargetSpec, scenario: str) -> tuple[Lease, Lease] | Result:
    """The old owner's lease, and the new holder's taken over after it expired; or the Result that ends the scenario."""
    old_client.add_node(node)
    old = old_client.try_claim(node, "zombie")
    if not isinstance(old, Lease):
        return Result(scenario, False, f"the first claim was {said(old)}")
    new = _claim_until_granted(new_client, node, "successor", timeout=_takeover_timeout(spec))
    if new is None:
        return Result(scenario, False, "nobody could claim after the old lease expired")
    if not supersedes(new, old):
        return Result(scenario, False, f"the takeover's {lease_name(new)} is not a later lease than the old owner's {lease_name(old)}")
    return old, new


def zombie(spec: TargetSpec) -> Result:
    """The old owner resumes after a new lease exists: its renew, commit and effect are refused, its read shows the new holder.

    Any refusal that means "not yours any more" will do (:data:`SUPERSEDED_REFUSALS`):
    a fenced store says ``stale``, a token store may say ``expired`` or
    ``not-owner``. An op that was applied is the bug, whatever the store calls it.
    The zombie's read comes after the takeover completed, so it must show the
    new lease: a client that answers from its own memory of the lease it took
    shows the zombie a node it no longer owns.
    """
    old_client, new_client = spec.make(), spec.make()
    node = _fresh_node("zombie")
    with _closing(old_client, new_client):
        leases = _took_over(old_client, new_client, node, spec, "zombie")
        if isinstance(leases, Result):
            return leases
        old, new = leases
        outcomes = {
            "renew": old_client.renew(old),
            "commit": old_client.commit(old, "zombie-result"),
            "effect": old_client.effect(old, "zombie-write"),
        }
        seen_by_zombie = old_client.read(node)
        state = new_client.read(node)
    accepted = [f for f, r in outcomes.items() if not (isinstance(r, Refused) and r.reason in SUPERSEDED_REFUSALS)]
    words = ", ".join(f"{f} -> {'ok' if r is None else r.reason}" for f, r in outcomes.items())
    facts = {f: None if r is None else r.reason for f, r in outcomes.items()}
    if accepted:
        return Result("zombie", False, f"the old owner ({lease_name(old)}) after takeover ({lease_name(new)}): {words}; final state {state}", facts)
    if not _holds(state, new):
        return Result("zombie", False, f"the old owner's ops were refused ({words}), yet the new holder lost the node: {state}", facts)
    if not _holds(seen_by_zombie, new):
        return Result("zombie", False, f"the old owner's read shows a lease the store no longer has: {seen_by_zombie}, while the new holder reads {state}", facts)
    return Result("zombie", True, f"old owner's ops after takeover: {words}; both read the new holder's lease", facts)


def zombie_release(spec: TargetSpec) -> Result:
    """The old owner gives its lease back after a takeover: refused, and the new holder's lease stays its own.

    The classic unfenced-lock bug (a release that deletes the lock without
    checking whose it is) frees the *new* holder's lease: a bystander can then
    claim the node while the new holder still works. So after the zombie's
    release a bystander's claim must be refused ``held``, and the new holder
    must still renew and commit.

    The new holder asks for a lease of :func:`_patient_ttl_ms`, so that its own
    lease cannot run out while the scenario probes it on a slow machine: a
    bystander's grant or a refused renew is then the zombie's doing alone.
    """
    old_client, bystander = spec.make(), spec.make()
    new_client = spec.make(ttl_ms=_patient_ttl_ms(spec))
    node = _fresh_node("zombie-release")
    with _closing(old_client, new_client, bystander):
        leases = _took_over(old_client, new_client, node, spec, "zombie-release")
        if isinstance(leases, Result):
            return leases
        old, new = leases
        released = old_client.release(old)
        stolen = bystander.try_claim(node, "bystander")
        state = new_client.read(node)
        renewed = new_client.renew(new)
        committed = new_client.commit(new, "successor-result")
    words = (
        f"the old owner's release ({lease_name(old)}) -> {said(released)}; a bystander's claim -> {said(stolen)}; "
        f"read -> {state.status} owned by {state.owner}; the new holder's renew -> {said(renewed)}, commit -> {said(committed)}"
    )
    facts = {"release": said(released), "bystander": said(stolen), "renew": said(renewed), "commit": said(committed)}
    if isinstance(stolen, Lease) or not _holds(state, new) or renewed is not None or committed is not None:
        return Result("zombie-release", False, f"the zombie's release freed the new holder's lease ({lease_name(new)}): {words}", facts)
    if not (isinstance(released, Refused) and released.reason in SUPERSEDED_REFUSALS):
        return Result("zombie-release", False, f"the zombie's release was not refused as superseded: {words}", facts)
    return Result("zombie-release", True, words, facts)


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
    node = _fresh_node("epochs")
    leases: list[Lease] = []
    with _closing(*clients):
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


# ----------------------------------------------------------------- heartbeats


def heartbeat_never_completes(spec: TargetSpec, renews: int = 20) -> Result:
    """A heartbeat proves liveness, never success: after many renews the node is still RUNNING."""
    t = spec.make()
    node = _fresh_node("heartbeat")
    with _closing(t):
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


def _claim_after_expiry(
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
    node = _fresh_node("stuck")
    with _closing(owner, successor):
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
        waited = _claim_after_expiry(
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


# ----------------------------------------------------------------- durability


def durable_commit(spec: TargetSpec, restart: Callable[[], None]) -> Result:
    """An acknowledged commit is still there after the store restarts."""
    t = spec.make()
    node = _fresh_node("durable")
    with _closing(t):
        t.add_node(node)
        lease = t.try_claim(node, "committer")
        if not isinstance(lease, Lease):
            return Result("durable-commit", False, f"claim {said(lease)}")
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
    node = _fresh_node("restart-expiry")
    with _closing(owner, bystander):
        owner.add_node(node)
        bystander.read(node)  # connected before the outage
        lease = owner.try_claim(node, "silent")
        claimed = time.monotonic()
        if not isinstance(lease, Lease):
            return Result("expiry-across-restart", False, f"claim {said(lease)}")
        restart()
        if poll(lambda: _read_or_none(bystander, node), timeout=30) is None:
            return Result("expiry-across-restart", False, "the store did not answer within 30 s of its restart")
        successor = spec.make()
        with _closing(successor):
            waited = _claim_after_expiry(
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
    node = _fresh_node("behind")
    with _closing(skewed):
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


SCENARIOS: dict[str, Callable[..., Result]] = {
    "race": race,
    "crash-takeover": crash_takeover,
    "zombie": zombie,
    "zombie-release": zombie_release,
    "duplicate-delivery": duplicate_delivery,
    "epochs-increase": epochs_increase,
    "heartbeat": heartbeat_never_completes,
    "stuck-lease": stuck_lease,
    "durable-commit": durable_commit,
    "expiry-across-restart": expiry_across_restart,
    "skewed-client": skewed_client,
    "skewed-renew": skewed_renew,
}

#: the scenarios that restart the store: they take the restart as their second argument
RESTARTING = frozenset({"durable-commit", "expiry-across-restart"})
