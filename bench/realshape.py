"""Histories shaped like real ``leasecheck run`` output, from the same correct store.

``bench.gen``'s default shape keeps 100 nodes per run busy for hundreds of ops
each. A real run is different: leasecheck's workload (``leasecheck/run/workload.py``)
takes a node from an at-least-once queue (``leasecheck/run/deliveries.py``), claims it,
executes for a fraction of a ttl (a quarter of the executions for 1.2-2.5 ttl,
heartbeating every ttl/3), writes 1-3 effects, and commits, or releases, or its
process crashes; the queue duplicates deliveries and hands out nodes again
after a visibility timeout, so some claims are refused ``held`` or
``terminal``; some executions stall and wake as zombies whose ops the store
refuses ``stale``; a run ends with one read of every node. That is 7-9 ops per
node, nodes retired as their run finishes, and only the nodes of the last few
runs live at any time.

This module simulates that workload, with the knobs of
``leasecheck.run.workload_options.Workload``'s defaults and the hub's queue (copied here, so
that a change there does not silently change the bytes of a cached history),
against ``leasecheck.kit.simstore.SimStore``, in the discrete-event frame of
``bench.gen``: every op is linearized strictly inside its interval and answered
as the correct store answers there, so the history is valid by construction
(no anomaly kind of docs/contracts/anomaly-kinds.md, the time-based ones included: see ``bench.gen``).
A worker's script is a generator that yields the op it invokes next (and gets
its completion back) or how long it sleeps, so it reads like the real worker.

With ``Config.resource_read_rate`` (the workload's ``resource_read_rate``, 0.15, for a
target that can read its resource; 0 here unless asked) a worker also reads a
node's protected resource as the real one does: right after a granted claim, and
before its next node, one of the nodes it held lately; the final phase reads every
node's resource before its record. Those choices come from a stream of their own
(``SEED/resource``), as the workload's, so at rate 0 nothing else changes.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from leasecheck.kit.simstore import MS, SimStore

if TYPE_CHECKING:
    from bench.gen import Config, EventSink, GenStats

# leasecheck.run.workload_options.Workload's defaults
_LONG_RATE = 0.25  # an execution runs 1.2-2.5 ttl (else 0.05-0.8 ttl)
_RELEASE_RATE = 0.08  # the lease is given back instead of committed
_WORKER_CRASH_RATE = 0.02  # the worker process dies at the end of an execution
_ZOMBIE_RATE = 0.5  # after a lost lease the worker goes on anyway, as a zombie
_STALL_RATE = 0.15  # an execution stalls (no heartbeat) at a random moment
_SHORT_STALL_RATE = 0.25  # ... briefly (0.5-0.9 ttl); the others last until a takeover
_PHASE_RATE = 0.85  # a zombie acts in each of the three phases of the takeover
_ACT_RATE = 0.85  # ... trying each of renew, effect, read, commit, release
_READ_RATE = 0.15  # a loop iteration also reads a node the worker held lately
_MAX_EFFECTS = 3
_ZOMBIE_ACTS = ("renew", "effect", "read", "commit", "release")
_ZOMBIE_WAIT_TTLS = 4.0  # the longest a zombie waits for its node to be taken over
# the queue (leasecheck.run.deliveries.Deliveries, leasecheck.run.options: dup_rate 0.1, visibility 1.5 ttl)
_DUP_RATE = 0.1  # a delivery is duplicated: the copy goes to the very next consumer
_EXTENDED_SHARE = 0.5  # deliveries whose heartbeats extend the visibility
_VISIBILITY_TTLS = 1.5
# the recorder and the store, in nanoseconds
_LATENCY_NS = 1_500_000  # invoke -> store and store -> completion: each 1 ns .. 1.5 ms
_THINK_NS = 200_000  # the worker's own work between two ops: 0 .. 0.2 ms
_APPLY_CRASHED_RATE = 0.5  # a crashed op took effect at the store

# event kinds in the queue
_RESUME, _LINEARIZE, _COMPLETE = 0, 1, 2

#: what a worker's script yields: an op to invoke (f, node, value), or nanoseconds to sleep
Request = tuple[str, str, dict[str, Any]] | int
#: what it gets back after an op: (completion type, completion value)
Reply = tuple[str, dict[str, Any]]
#: (a sleep's resumption sends nothing: ``next``, so the send type stays a Reply)
Script = Generator[Request, Reply, None]


class Deliveries:
    """The hub's at-least-once queue of nodes, produced in runs (``run-R/node-I``).

    A new run of K nodes (shuffled) is produced when fewer than max(2, K) are
    ready. A delivered node not acknowledged within the visibility timeout comes
    back (sooner if its holder stops heartbeating and the delivery is one of the
    extended half); a duplicate goes to the very next consumer.
    """

    def __init__(self, rng: random.Random, nodes_per_run: int, visibility_ns: int, store: SimStore) -> None:
        self.rng = rng
        self.k = nodes_per_run
        self.visibility = visibility_ns
        self.store = store
        self.runs = 0
        self.ready: deque[str] = deque()
        self.inflight: dict[str, int] = {}  # node -> when it is delivered again
        self.expiry: list[tuple[int, str]] = []  # (deadline, node); stale entries skipped
        self.extended: set[str] = set()
        self.done: set[str] = set()

    def _produce(self) -> None:
        self.runs += 1
        nodes = [f"run-{self.runs}/node-{i}" for i in range(self.k)]
        for n in nodes:
            self.store.add(n)
        self.rng.shuffle(nodes)
        self.ready.extend(nodes)

    def _deliver_by(self, node: str, deadline: int) -> None:
        self.inflight[node] = deadline
        heapq.heappush(self.expiry, (deadline, node))

    def next(self, now: int) -> str:
        expiry = self.expiry
        while expiry and expiry[0][0] < now:
            deadline, node = heapq.heappop(expiry)
            if self.inflight.get(node) == deadline:  # not acked, not extended since: deliver it again
                self._deliver_by(node, now + self.visibility)
                self.ready.appendleft(node)
        if len(self.ready) < max(2, self.k):
            self._produce()
        node = self.ready.popleft()
        if node not in self.done:
            if node not in self.inflight:
                self._deliver_by(node, now + self.visibility)
            if self.rng.random() < _EXTENDED_SHARE:
                self.extended.add(node)
            else:
                self.extended.discard(node)
        if self.rng.random() < _DUP_RATE:
            self.ready.appendleft(node)
        return node

    def touch(self, node: str, now: int) -> None:
        """The holder heartbeated: an extended delivery stays invisible a visibility longer."""
        if node in self.inflight and node in self.extended:
            self._deliver_by(node, now + self.visibility)

    def requeue(self, node: str) -> None:
        """Given back (released): handed out again first."""
        if node not in self.done:
            self.inflight.pop(node, None)
            self.ready.appendleft(node)

    def ack(self, node: str) -> None:
        self.done.add(node)
        self.inflight.pop(node, None)
        self.extended.discard(node)


class RealWorker:
    """One worker slot: its process number (renumbered after info or a crash) and script."""

    __slots__ = ("op", "process", "reply", "script", "seen", "wid")

    def __init__(self, wid: int) -> None:
        self.wid = wid
        self.process = wid
        self.seen: list[str] = []  # the nodes it held lately (it reads one now and then)
        self.op: InFlight | None = None
        self.reply: Reply | None = None
        self.script: Script | None = None

    @property
    def owner(self) -> str:
        return f"w{self.wid}"  # the slot's name: a replacement process keeps it, as in leasecheck run


class InFlight:
    """One op between its invoke and its completion."""

    __slots__ = ("applies", "crashed", "f", "node", "ok", "result", "value")

    def __init__(self, f: str, node: str, value: dict[str, Any], crashed: bool, applies: bool) -> None:
        self.f, self.node, self.value = f, node, value
        self.crashed, self.applies = crashed, applies
        self.ok = False
        self.result: dict[str, Any] = {}


class RealShapeSimulation:
    """W workers running leasecheck's workload against the correct store, then the final reads."""

    def __init__(self, cfg: Config, sink: EventSink, stats: GenStats) -> None:
        self.cfg = cfg
        self.sink = sink
        self.stats = stats
        self.rng = random.Random(cfg.seed)
        self.ttl = cfg.ttl_ms * MS
        self.store = SimStore(self.ttl, effect_fence="lease")
        self.queue = Deliveries(self.rng, cfg.nodes, int(_VISIBILITY_TTLS * self.ttl), self.store)
        self.workers = [RealWorker(w) for w in range(cfg.workers)]
        self.next_process = cfg.workers
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0
        self.now = 0
        rate = cfg.resource_read_rate
        self.resource_rng = random.Random(f"{cfg.seed}/resource") if rate else None

    def _reads_resource(self) -> bool:
        return self.resource_rng is not None and self.resource_rng.random() < self.cfg.resource_read_rate

    def _push(self, t: int, kind: int, wid: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, wid))

    def _rand(self, n: int) -> int:
        return int(self.rng.random() * n)

    def _renumber(self, w: RealWorker) -> None:
        w.process = self.next_process
        self.next_process += 1
        self.stats.processes += 1

    # -- the event loop ---------------------------------------------------------

    def run(self) -> None:
        for w in self.workers:
            w.script = self._work(w)
            self._push(self._rand(_THINK_NS), _RESUME, w.wid)
        pop, heap = heapq.heappop, self.heap
        while heap:
            t, _, kind, wid = pop(heap)
            self.now = t
            w = self.workers[wid]
            if kind == _RESUME:
                self._resume(w, t)
            elif kind == _LINEARIZE:
                self._linearize(w, t)
            else:
                self._complete(w, t)
        self._final_reads()
        self.stats.runs = self.queue.runs
        self.stats.nodes = len(self.store.nodes)

    def _resume(self, w: RealWorker, t: int) -> None:
        """Run the worker's script to its next request: a sleep, or an op to invoke now."""
        assert w.script is not None
        reply, w.reply = w.reply, None
        try:
            req = next(w.script) if reply is None else w.script.send(reply)
        except StopIteration:
            return
        if isinstance(req, int):
            self._push(t + max(req, 1), _RESUME, w.wid)
            return
        if self.stats.ops >= self.cfg.ops:
            w.script.close()  # the history is long enough: this worker stops
            return
        f, node, value = req
        self.stats.ops += 1
        crashed = self.rng.random() < self.cfg.crash_rate
        w.op = InFlight(f, node, value, crashed, crashed and self.rng.random() < _APPLY_CRASHED_RATE)
        self.sink.emit(t, w.process, "invoke", f, node, value)
        self._push(t + 1 + self._rand(_LATENCY_NS), _LINEARIZE, w.wid)

    def _linearize(self, w: RealWorker, t: int) -> None:
        op = w.op
        assert op is not None
        if not op.crashed or op.applies:
            type_, op.result = self.store.apply(t, op.f, op.node, op.value)
            op.ok = type_ == "ok"
        self._push(t + 1 + self._rand(_LATENCY_NS), _COMPLETE, w.wid)

    def _complete(self, w: RealWorker, t: int) -> None:
        op = w.op
        assert op is not None
        w.op = None
        if op.crashed:
            self.stats.crashed += 1
            self.sink.emit(t, w.process, "info", op.f, op.node, {})  # a real recorder records every op's end
            self._renumber(w)  # format v1: an info op retires its process number
            w.reply = ("info", {})
        else:
            type_ = "ok" if op.ok else "fail"
            self.sink.emit(t, w.process, type_, op.f, op.node, op.result)
            if op.ok:
                self.stats.ok += 1
                self.stats.commits += op.f == "commit"
            else:
                self.stats.fail += 1
            w.reply = (type_, op.result)
        self._push(t + self._rand(_THINK_NS), _RESUME, w.wid)

    def _final_reads(self) -> None:
        """The run's final phase: once every lease can have expired, one client reads every node
        (its protected resource first, when the workload reads resources)."""
        t = self.now + self.ttl + self.cfg.clock_uncertainty_ms * MS + MS
        process = self.next_process
        self.next_process += 1
        self.stats.processes += 1
        reads = ("read-resource", "read") if self.resource_rng is not None else ("read",)
        for r in range(1, self.queue.runs + 1):
            for i in range(self.cfg.nodes):
                node = f"run-{r}/node-{i}"
                for f in reads:
                    self.sink.emit(t, process, "invoke", f, node, {})
                    t += 1 + self._rand(_LATENCY_NS)
                    _, value = self.store.apply(t, f, node, {})
                    t += 1 + self._rand(_LATENCY_NS)
                    self.sink.emit(t, process, "ok", f, node, value)
                    self.stats.ops += 1
                    self.stats.ok += 1
                    self.stats.final_reads += 1
                    t += self._rand(_THINK_NS)
        self.now = t

    # -- the worker's script (leasecheck.run.workload.Worker, in simulated time) -------

    def _work(self, w: RealWorker) -> Script:
        rng = self.rng
        while True:
            node = self.queue.next(self.now)
            if w.seen and rng.random() < _READ_RATE:
                yield ("read", rng.choice(w.seen), {})
            if w.seen and self._reads_resource():
                assert self.resource_rng is not None
                yield ("read-resource", self.resource_rng.choice(w.seen), {})
            yield from self._execute(w, node)

    def _execute(self, w: RealWorker, node: str) -> Script:
        """Claim ``node``, execute with effects and heartbeats, then commit, release or crash."""
        rng, ttl, queue = self.rng, self.ttl, self.queue
        typ, res = yield ("claim", node, {"owner": w.owner})
        if typ != "ok":
            if typ == "fail" and res.get("reason") == "terminal":
                queue.ack(node)
            return
        granted = self.now
        queue.touch(node, self.now)
        w.seen = [*w.seen[-49:], node]
        # the fence this claim lifted, seen before any write of it (as the workload reads it)
        if self._reads_resource() and (yield ("read-resource", node, {}))[0] == "info":
            return
        carried = {"epoch": res["epoch"]}
        long = rng.random() < _LONG_RATE
        duration = (rng.uniform(1.2, 2.5) if long else rng.uniform(0.05, 0.8)) * ttl
        effects = sorted(rng.uniform(0, duration) for _ in range(rng.randint(1, _MAX_EFFECTS)))
        stall_at = rng.uniform(0, duration) if rng.random() < _STALL_RATE else None
        start = self.now
        next_beat = start + ttl / 3
        while True:
            now = self.now
            if now - granted > ttl:  # woken past the lease: the lease is surely gone by its clock
                if rng.random() < _ZOMBIE_RATE:
                    yield from self._zombie(w, node, carried)
                return
            if stall_at is not None and now - start >= stall_at:
                stall_at = None
                if rng.random() >= _SHORT_STALL_RATE:
                    yield from self._zombie(w, node, carried)
                    return
                yield int(rng.uniform(0.5, 0.9) * ttl)
                continue
            if effects and now - start >= effects[0]:
                effects.pop(0)
                if (yield from self._act(w, "effect", node, carried))[0] == "info":
                    return
                continue
            if now - start >= duration:
                break
            if now >= next_beat:
                typ, _ = yield ("renew", node, dict(carried))
                if typ == "info":
                    return
                next_beat = self.now + ttl / 3
                if typ == "ok":
                    granted = now
                    queue.touch(node, self.now)
                    continue
                if rng.random() < _ZOMBIE_RATE:  # refused: the lease is lost
                    yield from self._zombie(w, node, carried)
                return
            wake = min(next_beat, start + duration, start + effects[0] if effects else float("inf"))
            if stall_at is not None:
                wake = min(wake, start + stall_at)
            yield int(min(wake - now, ttl / 3)) + 1
        roll = rng.random()
        if roll < _WORKER_CRASH_RATE:
            self._renumber(w)  # the process dies; the harness starts a replacement
            return
        if roll < _WORKER_CRASH_RATE + _RELEASE_RATE:
            typ, _ = yield ("release", node, dict(carried))
            if typ == "ok":
                queue.requeue(node)
            return
        typ, res = yield from self._act(w, "commit", node, carried)
        if typ == "ok" or res.get("reason") == "terminal":  # done, by this worker or another
            queue.ack(node)

    def _act(self, w: RealWorker, f: str, node: str, carried: dict[str, Any]) -> Generator[Request, Reply, Reply]:
        """One op of the lease ``carried`` (or a read of its node); returns its completion."""
        if f == "effect":
            value = {**carried, "payload": f"{w.owner}:{node}:{self.rng.getrandbits(32):08x}"}
        elif f == "commit":
            value = {**carried, "result": f"result-of-{node}-by-{w.owner}"}
        elif f == "read":
            value = {}
        else:
            value = dict(carried)
        return (yield (f, node, value))

    def _zombie(self, w: RealWorker, node: str, carried: dict[str, Any]) -> Script:
        """Go on with a lost lease: in each phase of the takeover, try some of its ops.

        As the hub wakes a real zombie when its node is taken over, this one waits
        (looking at the store, as the hub looks at the recorded events) until a
        newer lease was granted, at most ``_ZOMBIE_WAIT_TTLS``; then acts at once
        (before the new holder's first effect), a little later (while it runs) and
        later still (after it ended).
        """
        rng, ttl = self.rng, self.ttl
        waited = 0
        while self.store.nodes[node].epoch <= carried["epoch"]:
            if waited >= _ZOMBIE_WAIT_TTLS * ttl:
                return  # never taken over: a real zombie's phases never come either
            step = ttl // 10
            yield step
            waited += step
        for delay in (0.0, rng.uniform(0.05, 0.5), rng.uniform(0.5, 1.5)):
            if rng.random() >= _PHASE_RATE:
                continue
            if delay:
                yield int(delay * ttl)
            acts = [f for f in _ZOMBIE_ACTS if rng.random() < _ACT_RATE]
            rng.shuffle(acts)
            for f in acts:
                if (yield from self._act(w, f, node, carried))[0] == "info":
                    return
