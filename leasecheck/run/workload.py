"""The worker: one OS process, one backend client, the seed's workload.

Each worker asks the hub (in the harness) for a node from the at-least-once
queue, claims it, "executes" for a while — heartbeating every ttl/3, writing
effects to the protected resource — and then commits, or sometimes releases
(abandons) or crashes. Some executions run longer than the ttl; a worker that
was paused past its lease (a GC pause) wakes up and may go on as a zombie:
that is exactly what fencing must stop.

Zombies are steered, not left to luck. Some executions *stall* on purpose (the
workload's own GC pause: no heartbeat); a long stall lasts until the node is
taken over, and the zombie then acts — renew, effect, read, commit, release, in
a seeded order — in seeded phases relative to the takeover: as the new holder's
claim goes out (an effect, in flight while the claim is granted), before the new
holder's first effect, while it runs, while its lease has lapsed (the hub hands the
node to its next holder with a stall now and then, :mod:`leasecheck.run.steering`),
after it ended. The hub wakes it at each
phase from the events it records (:mod:`leasecheck.run.takeovers`), so the moment is
an event, not a sleep. A worker woken from a real pause (SIGSTOP) past its
lease, or refused a heartbeat, becomes such a zombie too (or, as a careful worker
would, stops). Every choice comes from the worker's seeded RNG.

Two more windows are steered (issue 34): some holders write *late* in their
lease (no heartbeat; the effect or commit sent in the lease's last tenth) and
hold that write, before or after the store's answer, until another worker's claim
of the node is granted: the hub hands the node to a contender that waits for the
lease to lapse and claims the moment it does. And a worker whose clock a fault
set behind is made free to claim while its skew shows: an execution it is in
when the skew starts sends one heartbeat (under the skew) and gives its lease
back, every execution it starts while behind is brief (a heartbeat at once, no
stall, no late write), and a claim of a node the steering handed it because its
clock is behind goes inside a strobe's behind half-period.

Now and then a worker reads one of the nodes it claimed lately: its record, and
(when the target can: :func:`~leasecheck.targets.base.reads_resource`) its
protected resource, whose fence and log of accepted effects the checker holds
against the ops (a read mid-run proves when an entry was not there yet).

Every operation is recorded without a round trip, by the worker's end of its pipe
to the harness (:mod:`leasecheck.run.worker_pipe`).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

from leasecheck.frame.interrupts import ignore_in_child
from leasecheck.histories.format import lease_key
from leasecheck.histories.vocabulary import READ_RESOURCE
from leasecheck.nemesis.worker_clocks import WorkerClock
from leasecheck.run.client import Client
from leasecheck.run.pipe_words import Word
from leasecheck.run.takeovers import PHASES
from leasecheck.run.worker_pipe import Hub, Recording
from leasecheck.run.workload_options import Workload
from leasecheck.servers.base import die_with_parent
from leasecheck.targets.base import Lease, Refused, reads_resource
from leasecheck.targets.registry import TargetSpec

#: what a zombie may try in a phase, in the order a seeded shuffle starts from
ZOMBIE_ACTS = ("renew", "effect", "read", "commit", "release")
#: a late write is sent no later than this far into its lease (in ttls since its grant's invoke), or not at all: the
#: window of ``late-write-across-claim`` is the lease's last tenth while it is surely live (ttl - uncertainty)
LATE_LAST = 0.975
#: the longest a late write is held for a rival's grant, in ttls (the contender claims about a tenth past the lapse)
LATE_HOLD_TTLS = 1.5
#: the longest a contender waits for the lease it contends to lapse, in ttls; a worker whose clock is behind contends
#: only a lease due to lapse within a quarter ttl (:mod:`leasecheck.run.steering`), and waits less (its holder may
#: have stalled only briefly and heartbeat again)
CONTEND_WAIT_TTLS, LAGGING_CONTEND_TTLS = 2.0, 0.4
#: a claim timed to a strobe's behind half-period starts this long into it and needs this long left of it (s): the
#: checker trusts a strobe's phases from its event's stamp, a little after it began, and up to 5 ms before they end
STROBE_INTO_S, STROBE_LEFT_S = 0.001, 0.012
#: the longest execution after a steered claim (a contender's), and after a claim made while the worker's clock is
#: behind, in ttls: short, so that the worker is free to claim again soon
BRIEF_TTLS, LAGGING_BRIEF_TTLS = 0.2, 0.1
#: the longest an execution sleeps between two looks at its clock, in ttls: a worker whose clock a fault sets behind
#: gives its lease back within this long of the fault's start (its skew lasts 1-3 ttl)
SKEW_LOOK_TTLS = 0.1


class Worker:
    """The seed's workload, run by one process against one backend client."""

    def __init__(self, hub: Hub, spec: TargetSpec, workload: Workload, seed: int, slot: int) -> None:
        self.hub = hub
        self.w = workload
        self.rng = random.Random(f"{seed}/worker/{slot}")
        self.owner = f"w{slot}"
        self.client = Client(hub, spec, self.owner)
        self.ttl = spec.config.ttl_ms / 1000.0  # the lease the store grants: one source of truth
        self.seen: list[str] = []
        self.resource_rng = random.Random(f"{seed}/worker/{slot}/resource") if reads_resource(self.client.target) else None

    def op(self, f: str, node: str, value: dict[str, Any], call: Callable[[], Any], wait: bool = False) -> tuple[str, Any]:
        typ, out = self.client.op(f, node, value, call, wait)
        if typ == "fail" and out is None:  # unavailable: back off a little, as a real client would
            self.hub.sleep(self.ttl / 10)
        if typ == "info":
            # this process number is retired: take a new one, with a fresh connection
            self.hub.renumber()
            self.client.reconnect()
        if self.w.rate > 0:
            self.hub.sleep(1.0 / self.w.rate)
        return typ, out

    def run(self) -> None:
        while True:
            delivery = self.hub.ask(Word.NEXT)
            if delivery is None:
                return
            if delivery == "":
                self.hub.sleep(0.01)
                continue
            # ("race", node): a duplicate delivered to us and a rival at once; the claim waits for the rival's.
            # ("stall", node): a zombie waits on the node; this execution stalls, so its lease lapses while it is there.
            # ("contend", node): a late writer holds it; claim the moment its lease lapses. ("lagging", node): our clock
            # is behind, the node was granted to another lately and is claimable; claim while the skew shows
            how, node = delivery if isinstance(delivery, tuple) else ("", delivery)
            if how == "contend" and self.hub.record:  # a lagging clock's skew is short: it waits less
                self.hub.ask(Word.AWAIT, node, None, "at-lapse", (LAGGING_CONTEND_TTLS if self.lags() else CONTEND_WAIT_TTLS) * self.ttl)
            if how in ("contend", "lagging"):
                self.behind_phase()
            # a read is drawn as always, and done too while a fault seeks one (:meth:`Hub.sought`)
            sought = self.hub.sought()
            if self.seen and (self.rng.random() < self.w.read_rate or sought == "read"):
                other = self.rng.choice(self.seen)
                self.op("read", other, {}, partial(self.client.target.read, other))
            if self.resource_rng is not None and self.seen and (self.resource_rng.random() < self.w.resource_read_rate
                                                                or sought == READ_RESOURCE):
                other = self.resource_rng.choice(self.seen)
                self.op("read-resource", other, {}, partial(self.client.target.read_resource, other))
            self.execute(node, how == "race", how == "stall", how == "late", how in ("contend", "lagging"), how == "release")

    def lags(self) -> bool:
        """Has a fault set this worker's clock behind the host's now (a step back, or a strobe by a negative delta)?"""
        clock = self.client.spec.config.clock
        return isinstance(clock, WorkerClock) and clock.state().behind_at(time.monotonic())

    def behind_phase(self) -> None:
        """Under a strobe that sets this worker's clock behind, wait (by its schedule) for a behind half-period with
        time left for a claim; under a step, or no skew, go at once."""
        clock = self.client.spec.config.clock
        if not isinstance(clock, WorkerClock):
            return
        state = clock.state()
        now = time.monotonic()
        period = state.strobe_period_ms / 1000.0
        if state.strobe_delta_ms >= 0 or period <= 0 or not state.strobe_start <= now < state.strobe_until:
            return
        k = int((now - state.strobe_start) // period)
        into = now - state.strobe_start - k * period
        if k % 2 == 0 and STROBE_INTO_S <= into <= period - STROBE_LEFT_S:
            return
        nxt = state.strobe_start + (k + (1 if k % 2 else 2)) * period + STROBE_INTO_S  # the next behind half-period
        if into < STROBE_INTO_S and k % 2 == 0:
            nxt = state.strobe_start + k * period + STROBE_INTO_S
        if nxt + STROBE_LEFT_S < state.strobe_until:
            self.hub.sleep(nxt - now)

    def execute(self, node: str, racing: bool = False, stall: bool = False, late: bool = False, brief: bool = False,
                give_back: bool = False) -> None:
        """Claim ``node`` and work on it; ``late``: write late in the lease (steered, :meth:`late_write`); ``brief``: a
        steered claim (a contender's, a lagging clock's), then a short execution, so that it is free to claim again;
        ``give_back``: release it at once (steered: a lagging clock claims it next). A worker whose clock is behind
        keeps every execution brief, heartbeats at once (its renew carries the skew), and gives back the lease of an
        execution its skew began in (:meth:`give_back`): it is then free to claim while its skew shows."""
        t = self.client.target
        lags = self.lags()
        brief = brief or lags
        since = time.monotonic()  # no later than the claim's invoke: its lease runs from no earlier
        typ, lease = self.op("claim", node, {"owner": self.owner}, lambda: t.try_claim(node, self.owner), wait=racing)
        if typ != "ok":
            if isinstance(lease, Refused) and lease.reason == "terminal":
                self.hub.tell(Word.DONE, node)
            return
        granted = time.monotonic()
        self.seen = (self.seen + [node])[-self.w.seen_nodes:]  # the recorder keeps the same list (Slot.seen)
        # the fence this claim lifted, seen before any write of it: an older lease's entry that shows up later
        # landed after the takeover, even when its effect op was in flight across the claim
        # (always after a takeover, an epoch above 1: that is where a late write of the older lease lands)
        reads = self.resource_rng is not None and (self.resource_rng.random() < self.w.claim_read_rate
                                                   or (lease.epoch is not None and lease.epoch > 1))
        if reads and self.op("read-resource", node, {}, partial(t.read_resource, node))[0] == "info":
            return
        carried = lease.to_json()
        rng, ttl, w = self.rng, self.ttl, self.w
        if give_back:  # steered for a lagging clock: given back at once, claimable by it (the steering hands it over; not
            self.op("release", node, dict(carried), lambda: t.release(lease))  # requeued: the next asker would take it)
            return
        own = not type(t).renews_itself  # only the worker's own heartbeat keeps the lease: a stall or late write lapses it
        if own and self.hub.record and w.exec_scale > 0 and not stall and not brief and (rng.random() < w.late_rate or late):
            self.late_write(node, lease, carried, since)
            return
        duration = rng.uniform(1.2, 2.5) * ttl if rng.random() < w.long_rate else rng.uniform(0.05, 0.8) * ttl
        duration *= w.exec_scale
        effects = sorted(rng.uniform(0, duration) for _ in range(rng.randint(1, w.max_effects)))
        # a stall needs an execution to stall in (exec_scale 0 is the throughput benchmark: none) and a hub that sees takeovers
        stalls = own and self.hub.record and w.exec_scale > 0 and (rng.random() < w.stall_rate or stall)
        stall_at = rng.uniform(0, duration) if stalls and not brief else None
        if brief:  # a lagging clock's the briefest: its skew lasts 1-3 ttl, and it claims again the moment it is done
            duration = min(duration, (LAGGING_BRIEF_TTLS if lags else BRIEF_TTLS) * ttl)
            effects = [e for e in effects if e < duration] or [0.0]
        start = time.monotonic()
        next_beat = start if lags else start + ttl / 3
        while True:
            now = time.monotonic()
            if not brief and self.lags():  # our clock went behind: free to claim while it shows (see steering)
                self.give_back(node, lease, carried)
                return
            if now - granted > ttl:  # woken past the lease (a pause): the lease is surely gone by our clock
                if rng.random() < w.zombie_rate:
                    self.zombie(node, lease, carried)
                return  # a careful worker stops here
            if not brief and not stall and self.ends_for_claim():  # never a steered stall: its zombie is sought
                break
            if stall_at is None and not stall:  # a fault seeks an effect or a renew: one now (legal: one more, or early)
                sought = self.hub.sought()
                if sought == "effect" and not effects:
                    effects.append(now - start)
                elif sought == "effect":
                    effects[0] = min(effects[0], now - start)
                elif sought == "renew":
                    next_beat = min(next_beat, now)
            if stall_at is not None and now - start >= stall_at:
                stall_at = None
                if rng.random() >= w.short_stall_rate or stall:  # a steered stall lasts: its lease must lapse
                    self.zombie(node, lease, carried)
                    return
                self.hub.sleep(rng.uniform(0.5, 0.9) * ttl)  # the simulated pause itself
                continue
            if effects and now - start >= effects[0]:
                effects.pop(0)
                if self.act("effect", node, lease, carried) == "info":
                    return
                continue
            if now - start >= duration:
                break
            if now >= next_beat:
                invoked = time.monotonic()
                typ, out = self.op("renew", node, dict(carried), lambda: self.client.target.renew(lease))
                if typ == "info":
                    return
                next_beat = time.monotonic() + ttl / 3
                if typ == "ok":
                    granted = invoked
                elif out is not None:  # refused: the lease is lost
                    if rng.random() < w.zombie_rate:
                        self.zombie(node, lease, carried)
                    return
                continue
            wake = min(next_beat, start + duration, start + effects[0] if effects else float("inf"))
            if stall_at is not None:
                wake = min(wake, start + stall_at)
            self.hub.sleep(max(0.0, min(wake - now, SKEW_LOOK_TTLS * ttl)))
        roll = rng.random()
        if roll < w.crash_rate:
            self.hub.flush()  # what it did is on record; then it crashes, and the harness starts a replacement
            os._exit(17)
        if roll < w.crash_rate + w.release_rate or self.hub.sought() == "release":
            typ, _ = self.op("release", node, dict(carried), lambda: self.client.target.release(lease))
            if typ == "ok":
                self.hub.tell(Word.REQUEUE, node)  # given back: the queue hands it out again at once
            return
        typ, out = self.commit(node, lease, carried)
        if typ == "ok" or (isinstance(out, Refused) and out.reason == "terminal"):
            self.hub.tell(Word.DONE, node)

    def ends_for_claim(self) -> bool:
        """Is a claim the kind a fault seeks now (:meth:`Hub.sought`)? Then the worker is done with its node now, so
        that its next claim comes at once: a worker claims once a node, about 3 a second in all, and aims armed for a
        claim went by without one (a claim was paused inside once in a 75 s run). Ending early only while the renews
        and effects armed with it had landed did worse: those took an aim's victims first, and the claim none (gate
        of postgres, seeds 1-3: every situation once in 1 of 3 runs, against 2 of 3)."""
        return self.hub.sought() == "claim"

    def give_back(self, node: str, lease: Lease, carried: dict[str, Any]) -> None:
        """This worker's clock went behind while it worked on ``lease``: one heartbeat (a renew that carries the skew, as
        the execution's next would have), then the lease given back (released, handed out again at once), so that the
        worker is free to claim the nodes the steering hands a lagging clock. Both are a worker's legal moves."""
        target = self.client.target
        if self.op("renew", node, dict(carried), lambda: target.renew(lease))[0] != "ok":
            return
        if self.op("release", node, dict(carried), lambda: target.release(lease))[0] == "ok":
            self.hub.tell(Word.REQUEUE, node)

    def late_write(self, node: str, lease: Lease, carried: dict[str, Any], since: float) -> None:
        """Write late in ``lease`` (claimed at ``since``): no heartbeat, one effect or commit sent at a seeded point of
        its last tenth, held until another worker's claim of ``node`` is granted (or :data:`LATE_HOLD_TTLS` ttl), before
        the request or after the answer. Legal: a fenced store accepts the write before the grant or refuses it after."""
        rng, w, ttl, target = self.rng, self.w, self.ttl, self.client.target
        commit = rng.random() < w.late_commit_rate
        after = not commit and rng.random() < w.late_hold_after_rate
        at = since + rng.uniform(*w.late_at) * ttl
        self.hub.tell(Word.LATE, node)  # the hub hands the node to a contender, who claims the moment the lease lapses
        self.hub.sleep(max(0.0, at - time.monotonic()))
        if time.monotonic() > since + LATE_LAST * ttl:  # overslept (a loaded machine, a pause): not a late write now
            return
        hold = partial(self.hub.ask, Word.AWAIT, node, lease_key(carried), "rival-granted", LATE_HOLD_TTLS * ttl)
        if commit:
            result = f"result-of-{node}-by-{self.owner}"
            f, value, store = "commit", {**carried, "result": result}, partial(target.commit, lease, result)
        else:
            payload = f"{self.owner}:{node}:{rng.getrandbits(32):08x}"
            f, value, store = "effect", {**carried, "payload": payload}, partial(target.effect, lease, payload)

        def held() -> Any:
            if not after:
                hold()
            out = store()
            if after:
                hold()
            return out

        typ, out = self.op(f, node, value, held)
        if commit and (typ == "ok" or (isinstance(out, Refused) and out.reason == "terminal")):
            self.hub.tell(Word.DONE, node)

    def commit(self, node: str, lease: Lease, carried: dict[str, Any]) -> tuple[str, Any]:
        """Commit ``lease`` with this worker's result for ``node`` (a zombie's commit names the same result)."""
        result = f"result-of-{node}-by-{self.owner}"
        return self.op("commit", node, {**carried, "result": result}, lambda: self.client.target.commit(lease, result))

    def act(self, f: str, node: str, lease: Lease, carried: dict[str, Any]) -> str:
        """One op of ``lease`` (or a read of its node); returns the completion type."""
        target = self.client.target
        if f == "effect":
            payload = f"{self.owner}:{node}:{self.rng.getrandbits(32):08x}"
            typ, _ = self.op("effect", node, {**carried, "payload": payload}, partial(target.effect, lease, payload))
        elif f == "read":
            typ, _ = self.op("read", node, {}, partial(target.read, node))
        elif f == "commit":
            typ, _ = self.commit(node, lease, carried)
        else:  # renew, release
            typ, _ = self.op(f, node, dict(carried), partial(getattr(target, f), lease))
        return typ

    def zombie(self, node: str, lease: Lease, carried: dict[str, Any]) -> None:
        """Go on with a lost lease: act in seeded phases of the takeover, each when the hub says it came."""
        rng, w = self.rng, self.w
        if not self.hub.record:  # unrecorded (the overhead benchmark): the hub sees no takeover to wake us at
            return
        key = lease_key(carried)
        for phase in PHASES:
            if rng.random() >= w.phase_rate:
                continue
            if self.lags():  # our clock went behind: free to claim while it shows, not a zombie any more
                return
            if self.hub.ask(Word.AWAIT, node, key, phase, w.zombie_wait_ttls * self.ttl) != "reached":
                continue
            acts = [f for f in ZOMBIE_ACTS if rng.random() < w.act_rate]
            rng.shuffle(acts)
            if phase == "at-new-claim":  # woken at another's claim: a write in flight while it is granted
                acts = ["effect"]
            for f in acts:
                if self.act(f, node, lease, carried) == "info":
                    return


def worker_main(conn: Connection, spec: TargetSpec, workload: Workload, seed: int, slot: int, recording: Recording | None) -> None:
    """Entry point of a worker process (spawned by the runner); ``recording`` None: the overhead benchmark's baseline."""
    ignore_in_child()  # Ctrl-C and SIGTERM are the harness's to handle: it tells us when to stop
    die_with_parent()
    hub = Hub(conn, recording, slot)
    record = recording is not None
    try:
        try:
            worker = Worker(hub, spec, workload, seed, slot)
        except Exception as e:  # the backend's client cannot be made: the harness reports it, once
            hub.tell(Word.BROKEN, f"{type(e).__name__}: {e}")
            return
        hub.tell(Word.HELLO)  # up, and from now on a pause is safe: this process dies with the harness
        worker.run()
        if not record:
            hub.tell(Word.TALLY, dict(worker.client.unrecorded))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the harness went away
    finally:
        with contextlib.suppress(EOFError, BrokenPipeError, ConnectionResetError, OSError):
            hub.flush()
        if hub.log is not None:
            hub.log.close()
        conn.close()
