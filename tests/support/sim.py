"""A simulated, *correct* lease store, the histories it produces, and planted bugs.

The property tests need an endless supply of histories whose verdict is known
without a checker: a correct store (``simulate``) must never be reported invalid,
and a correct history with one planted violation (``PLANTERS``) must be reported
with exactly that anomaly kind, citing the planted operation.

``simulate`` is a discrete-event simulation in harness time (integer nanoseconds).
Several workers, each an OS-process-like client with one operation outstanding at
a time, claim nodes, renew, write effects to the protected resource, commit,
release, read, and read the protected resource back (``read-resource``: its fence and
its log of accepted effects, in one step). Every operation takes effect at one linearization point strictly
inside (invoke, completion), where the store (``leasecheck.kit.simstore.SimStore``,
the one the benchmarks' generator uses too) applies it exactly like the lease
model of docs/contracts/lease-model.md, plus the time rules of a real store (a lease expires ttl after
its last claim or renew, give or take the clock uncertainty). Crashed operations
(``info`` completion, or no completion at all) were applied or not, at random,
possibly after the crash was recorded; the worker then restarts under a new
process number. Workers also pause longer than the ttl and come back as zombies
that renew / commit / write with their stale epoch, which the store rejects.

All randomness goes through one ``random.Random``; under Hypothesis it is
``st.randoms(use_true_random=False)``, so failing histories shrink.
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from hypothesis import strategies as st

from leasecheck.histories.format import EffectFence
from leasecheck.kit.simstore import MS, SimStore, StoreClock

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True)
class SimConfig:
    """Knobs of one simulated run (the run itself is decided by the rng)."""

    workers: int = 3
    nodes: int = 2
    ops: int = 30  # operations invoked by the workers (final reads not counted)
    ttl_ms: int = 100
    clock_uncertainty_ms: int = 0
    fenced: bool = True
    crash_p: float = 0.06  # an op crashes: info completion, or none at all
    unavailable_p: float = 0.03  # an op fails "unavailable" (definitely not applied)
    pause_p: float = 0.12  # a lease holder pauses longer than the ttl (zombie)
    slow_p: float = 0.15  # an op's latency is up to a whole ttl
    commit_p: float = 0.08  # how eagerly a holder commits
    final_reads: bool = True  # the runner's final phase: read every node at the end
    #: a coarse recorder clock: every recorded time is a multiple of this (0: ns), so
    #: many events share a time ("equal times count as concurrent"); linearization
    #: points then fall on odd multiples of half of it, strictly inside every op
    time_quantum_ms: float = 0
    #: how the store's clock misjudges each lease's length, within the uncertainty:
    #: "random", "fast" (leases end up to the uncertainty early) or "slow" (late)
    store_clock: StoreClock = "random"
    #: what moves the protected resource's fence: a claim too ("lease"), or only accepted effects ("token")
    effect_fence: EffectFence = "lease"
    #: write ``effect_fence`` in the header even at its default (else a lease run leaves it out)
    explicit_effect_fence: bool = True
    #: workers read the protected resource now and then, and the final phase reads it for every node
    resource_reads: bool = True


# --------------------------------------------------------------------------------------
# the workers and the event loop


@dataclass
class _Worker:
    wid: int
    process: int
    lease: tuple[str, dict[str, Any]] | None = None  # (node, {"epoch": ..} or {"epoch": None, "token": ..})
    zombie: bool = False  # woke up from a pause: next op uses the (maybe stale) lease
    n: int = 0  # ops started, for payload / result names


@dataclass
class _Pending:
    worker: _Worker
    process: int
    f: str
    node: str
    value: dict[str, Any]
    mode: str  # "normal", "unavailable", "info", "open"


def simulate(rng: random.Random, cfg: SimConfig = SimConfig()) -> list[str]:
    """Run one simulated test: the v1 history as JSON lines (each ending in "\\n")."""
    ttl = cfg.ttl_ms * MS
    nodes = [f"n{i}" for i in range(cfg.nodes)]
    store = SimStore(
        ttl,
        clock_uncertainty_ns=cfg.clock_uncertainty_ms * MS,
        fenced=cfg.fenced,
        store_clock=cfg.store_clock,
        rng=rng,
        nodes=nodes,
        effect_fence=cfg.effect_fence,
    )
    header: dict[str, Any] = {
        "format": "leasecheck-history",
        "version": 1,
        "ttl_ms": cfg.ttl_ms,
        "clock_uncertainty_ms": cfg.clock_uncertainty_ms,
        "target": "sim-fenced" if cfg.fenced else "sim-unfenced",
    }
    if cfg.explicit_effect_fence or cfg.effect_fence != "lease":
        header["effect_fence"] = cfg.effect_fence
    events: list[dict[str, Any]] = []
    queue: list[tuple[int, int, str, Any]] = []
    seq = 0
    next_process = cfg.workers
    started = 0
    done: set[str] = set()  # nodes some worker saw SUCCEEDED

    def at(t: int, kind: str, payload: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(queue, (t, seq, kind, payload))

    def emit(t: int, process: int | str, type_: str, f: str, node: str | None, value: Any) -> None:
        ev: dict[str, Any] = {"index": len(events), "time": t, "process": process, "type": type_, "f": f}
        if node is not None:
            ev["node"] = node
        ev["value"] = value
        events.append(ev)

    q = int(cfg.time_quantum_ms * MS)
    assert q % 2 == 0, "the time quantum must be an even number of ns"

    def grid(d: int) -> int:
        """A delay between two recorded times: a positive multiple of the quantum."""
        return d if not q else max(q, -(-d // q) * q)

    def half(d: int) -> int:
        """A delay from a recorded time to a linearization point (or back): off the grid."""
        return d if not q else (d // q) * q + q // 2

    def latency() -> int:
        if rng.random() < cfg.slow_p:
            return half(rng.randint(1, ttl))
        return half(rng.randint(1, ttl // 20 + 1))

    def choose(w: _Worker) -> tuple[str, str, dict[str, Any]]:
        w.n += 1
        if w.lease is None:
            # the queue mostly stops delivering nodes known to be done (at-least-once)
            todo = [n for n in nodes if n not in done]
            node = rng.choice(todo if todo and rng.random() < 0.85 else nodes)
            r = rng.random()
            if r < 0.75:
                return "claim", node, {"owner": f"w{w.process}"}
            return ("read-resource" if cfg.resource_reads and r > 0.9 else "read"), node, {}
        node, lease = w.lease
        if w.zombie:
            w.zombie = False
            f = rng.choice(["renew", "commit", "effect"])
        else:
            r = rng.random()
            c = cfg.commit_p
            if r < c:
                f = "commit"
            elif r < c + 0.08:
                f = "release"
            elif r < c + 0.38:
                f = "effect"
            elif r < c + 0.46:
                return ("read-resource" if cfg.resource_reads and r > c + 0.43 else "read"), rng.choice(nodes), {}
            else:
                f = "renew"
        value = dict(lease)
        if f == "effect":
            value["payload"] = f"p{w.process}.{w.n}"
        elif f == "commit":
            value["result"] = f"r{w.process}.{w.n}"
        return f, node, value

    def invoke(t: int, w: _Worker) -> None:
        nonlocal started
        if started >= cfg.ops:
            return
        started += 1
        f, node, value = choose(w)
        emit(t, w.process, "invoke", f, node, value)
        r = rng.random()
        if r < cfg.crash_p:
            mode = rng.choice(["info", "open"])
        elif r < cfg.crash_p + cfg.unavailable_p:
            mode = "unavailable"
        else:
            mode = "normal"
        op = _Pending(w, w.process, f, node, value, mode)
        if mode == "normal":
            at(t + latency(), "apply", op)
        elif mode == "unavailable":
            at(t + grid(rng.randint(1, ttl // 20 + 1)), "complete", (op, "fail", {"reason": "unavailable"}))
        else:
            if rng.random() < 0.5:  # applied, maybe long after the crash was recorded
                at(t + half(rng.randint(1, ttl)), "apply", op)
            at(t + grid(rng.randint(1, ttl // 2 + 1)), "crash", op)

    def after_completion(w: _Worker, op: _Pending, type_: str) -> None:
        """What a worker learns from a completion, and when it acts next."""
        res = events[-1]["value"]
        if (type_ == "ok" and op.f == "commit") or res.get("reason") == "terminal" or res.get("status") == "SUCCEEDED":
            done.add(op.node)
        if type_ == "ok":
            if op.f == "claim":
                lease = {"epoch": res["epoch"]} if cfg.fenced else {"epoch": None, "token": res["token"]}
                w.lease = (op.node, lease)
            elif op.f in ("commit", "release"):
                w.lease = None
        elif type_ == "fail" and op.f in ("renew", "commit", "release", "effect") and res["reason"] != "unavailable":
            w.lease = None

    def schedule_next(t: int, w: _Worker, eager: bool = False) -> None:
        if w.lease is not None and rng.random() < cfg.pause_p:
            pause = grid(rng.randint(ttl + 1, 3 * ttl))
            emit(t, "nemesis", "info", "pause", None, [w.process])
            w.zombie = True
            at(t + pause, "resume", w)
            return
        think = rng.randint(0, ttl // (40 if eager else 4))  # a refused claimer retries soon
        at(t + (grid(think) if q else think), "invoke", w)

    # the store answers a resource read too: its fence and log of accepted effects, in one step
    apply = store.apply
    workers = [_Worker(i, i) for i in range(cfg.workers)]
    for w in workers:
        at(grid(rng.randint(0, ttl // 10)) if q else rng.randint(0, ttl // 10), "invoke", w)

    while queue:
        t, _, kind, payload = heapq.heappop(queue)
        if kind == "invoke":
            invoke(t, payload)
        elif kind == "resume":
            emit(t, "nemesis", "info", "resume", None, [payload.process])
            invoke(t, payload)
        elif kind == "apply":
            op = payload
            type_, value = apply(t, op.f, op.node, op.value)
            if op.mode == "normal":
                at(t + latency(), "complete", (op, type_, value))
        elif kind == "complete":
            op, type_, value = payload
            emit(t, op.process, type_, op.f, op.node, value)
            after_completion(op.worker, op, type_)
            schedule_next(t, op.worker, eager=value.get("reason") == "held")
        elif kind == "crash":
            op = payload
            w = op.worker
            if op.mode == "info":
                emit(t, op.process, "info", op.f, op.node, {"error": "connection reset"})
            emit(t, "nemesis", "info", "kill", None, [op.process])
            w.process = next_process
            next_process += 1
            w.lease = None
            w.zombie = False
            at(t + grid(rng.randint(1, ttl // 2 + 1)), "invoke", w)

    if cfg.final_reads:
        # final phase: every late-applied crashed op has landed by now
        t = (events[-1]["time"] if events else 0) + 2 * ttl
        for node in nodes:
            for f in ("read", "read-resource") if cfg.resource_reads else ("read",):
                p = next_process
                next_process += 1
                emit(t, p, "invoke", f, node, {})
                step = q // 2 or 1
                type_, value = apply(t + step, f, node, {})
                emit(t + 2 * step, p, type_, f, node, value)
                t += 2 * step
    return [_dumps(header) + "\n"] + [_dumps(ev) + "\n" for ev in events]


# --------------------------------------------------------------------------------------
# hypothesis strategies


@st.composite
def sim_configs(
    draw: Callable[..., Any],
    fenced: bool | None = None,
    max_ops: int = 40,
    tight: bool | None = None,
    effect_fence: EffectFence | None = None,
) -> SimConfig:
    """Run parameters: few workers and nodes, so the runs collide often.

    ``tight`` runs aim at the time margins of overlapping-lease and stuck-lease:
    one node, a large clock uncertainty, a store clock at one end of it (leases
    end early or late), holders that pause and rivals that retry at once, and
    hardly any crashed claims (any info claim rules stuck-lease out). A checker
    that forgets the uncertainty on either side reports these correct runs.
    """
    ttl = draw(st.sampled_from([20, 50, 100, 1000]))
    fence: EffectFence = draw(st.sampled_from(["lease", "token"])) if effect_fence is None else effect_fence
    explicit = draw(st.booleans())
    if tight is None:
        tight = draw(st.sampled_from([False, False, True]))
    if tight:
        return SimConfig(
            workers=draw(st.integers(2, 4)),
            nodes=1,
            ops=draw(st.integers(1, max_ops)),
            ttl_ms=ttl,
            clock_uncertainty_ms=ttl // 4,
            fenced=draw(st.booleans()) if fenced is None else fenced,
            crash_p=draw(st.sampled_from([0.0, 0.03])),
            pause_p=draw(st.sampled_from([0.3, 0.5])),
            slow_p=draw(st.sampled_from([0.0, 0.1])),
            commit_p=0.03,
            final_reads=draw(st.booleans()),
            time_quantum_ms=draw(st.sampled_from([0, 0, 1])),
            store_clock=draw(st.sampled_from(["fast", "slow"])),
            effect_fence=fence,
            explicit_effect_fence=explicit,
        )
    return SimConfig(
        workers=draw(st.integers(1, 4)),
        nodes=draw(st.integers(1, 3)),
        ops=draw(st.integers(1, max_ops)),
        ttl_ms=ttl,
        clock_uncertainty_ms=draw(st.sampled_from([0, 0, 1, ttl // 10, ttl // 4])),
        fenced=draw(st.booleans()) if fenced is None else fenced,
        crash_p=draw(st.sampled_from([0.0, 0.06, 0.2])),
        pause_p=draw(st.sampled_from([0.0, 0.12, 0.3])),
        slow_p=draw(st.sampled_from([0.0, 0.15, 0.4])),
        commit_p=draw(st.sampled_from([0.03, 0.12, 0.3])),
        final_reads=draw(st.booleans()),
        time_quantum_ms=draw(st.sampled_from([0, 0, 0, 1, ttl / 10])),
        store_clock=draw(st.sampled_from(["random", "fast", "slow"])),
        effect_fence=fence,
        explicit_effect_fence=explicit,
    )


@st.composite
def sim_histories(
    draw: Callable[..., Any],
    fenced: bool | None = None,
    max_ops: int = 40,
    tight: bool | None = None,
    effect_fence: EffectFence | None = None,
) -> list[str]:
    """A history of a correct store (JSON lines); the rng shrinks with the example.

    ``effect_fence`` None draws the rule (the store follows it, the header says it).
    """
    cfg = draw(sim_configs(fenced=fenced, max_ops=max_ops, tight=tight, effect_fence=effect_fence))
    return simulate(draw(sim_randoms()), cfg)


class SeededRandom(random.Random):
    """A ``random.Random`` that says its seed in Hypothesis' failure report."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.seed_value = seed

    def __repr__(self) -> str:
        return f"SeededRandom({self.seed_value})"


def sim_randoms() -> st.SearchStrategy[random.Random]:
    """The simulation's randomness: mostly a seeded ``random.Random``, sometimes Hypothesis'.

    Hypothesis' own random (``use_true_random=False``) shrinks call by call, but
    its values crowd at the ends of each range (zero delays, minimal pauses), so
    its runs rarely get near the time margins. A seeded generator gives runs
    with the variety of the real thing; the seed and the run length (``ops``, a
    shorter run is a prefix of the longer one) still shrink.
    """
    return st.one_of(
        st.integers(0, 2**32 - 1).map(SeededRandom),
        st.integers(0, 2**32 - 1).map(SeededRandom),
        st.integers(0, 2**32 - 1).map(SeededRandom),
        st.randoms(use_true_random=False),
    )


# --------------------------------------------------------------------------------------
# reading back and rendering


def parse(lines: Iterable[str | bytes]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(header, events) of a well-formed history in memory."""
    it = iter(lines)
    header = json.loads(next(it))
    return header, [json.loads(ln) for ln in it if ln.strip()]


def dump(header: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """JSON lines again, re-indexed; asserts that times stay non-decreasing."""
    out = [_dumps(header) + "\n"]
    last = 0
    for i, ev in enumerate(events):
        assert ev["time"] >= last, f"time goes back at event {i}"
        last = ev["time"]
        ev = {"index": i, **{k: v for k, v in ev.items() if k != "index"}}
        out.append(_dumps(ev) + "\n")
    return out


@dataclass
class SimOp:
    """An invoke paired with its completion, as plain data (no validation)."""

    index: int
    process: Any
    f: str
    node: str
    value: dict[str, Any]
    type: str  # ok / fail / info; "info" also for no completion at all
    result: dict[str, Any]
    t0: int
    t1: int | None  # completion time; None when there is none
    completed: bool = True

    @property
    def epoch(self) -> Any:
        if self.f in ("claim", "read"):
            return self.result.get("epoch")
        return self.value.get("epoch")


def pair(events: list[dict[str, Any]]) -> list[SimOp]:
    """Client operations in invoke order (nemesis events dropped)."""
    open_: dict[Any, SimOp] = {}
    ops: list[SimOp] = []
    for ev in events:
        p = ev.get("process")
        if p == "nemesis":
            continue
        if ev.get("type") == "invoke":
            op = SimOp(ev["index"], p, ev["f"], ev.get("node"), ev.get("value") or {}, "info", {}, ev["time"], None, False)
            open_[p] = op
            ops.append(op)
        elif p in open_:
            op = open_.pop(p)
            op.type = ev["type"]
            op.result = ev.get("value") if isinstance(ev.get("value"), dict) else {}
            op.t1 = ev["time"]
            op.completed = True
    return ops


def _fmt_value(v: Any) -> str:
    if isinstance(v, dict):
        if not v:
            return "{}"
        return " ".join(f"{k}={_dumps(x) if not isinstance(x, str) else x}" for k, x in v.items())
    return _dumps(v)


def _ms(t: int | None) -> str:
    return "-" if t is None else f"{t / MS:.3f}"


def render(lines: Iterable[str | bytes]) -> str:
    """A compact human-readable history: one operation per line, in invoke order.

    ``#index pPROCESS f node invoke-value -> outcome [invoke ms, completion ms]``;
    nemesis events are shown as ``~`` lines at their place. Used with Hypothesis'
    ``note()`` so a shrunk counterexample can be read at a glance.
    """
    header, events = parse(lines)
    out = [
        f"history ttl={header.get('ttl_ms')}ms uncertainty={header.get('clock_uncertainty_ms')}ms"
        f" target={header.get('target', '?')}"
    ]
    ops = {op.index: op for op in pair(events)}
    for ev in events:
        if ev.get("process") == "nemesis":
            out.append(f"#{ev['index']:<3} ~ nemesis {ev.get('f')} {_fmt_value(ev.get('value'))} @{_ms(ev.get('time'))}")
            continue
        op = ops.get(ev.get("index"))
        if op is None:
            continue
        if not op.completed:
            outcome = "(no completion)"
        elif op.type == "ok":
            outcome = "ok" + ("" if not op.result else " " + _fmt_value(op.result))
        elif op.type == "fail":
            outcome = "fail " + str(op.result.get("reason", _fmt_value(op.result)))
        else:
            outcome = "info"
        out.append(
            f"#{op.index:<3} p{op.process:<3} {op.f:<7} {op.node} {_fmt_value(op.value)} -> {outcome}"
            f" [{_ms(op.t0)}, {_ms(op.t1)}]"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# planting anomalies


class _Planter:
    """Appends operations after the end of a history, one at a time, by fresh processes.

    The first appended op starts more than 2 ttl + uncertainty after the last event,
    so every lease of the original history has provably run out by then.
    """

    def __init__(self, lines: Iterable[str | bytes], rng: random.Random | None) -> None:
        self.header, self.events = parse(lines)
        self.rng = rng or random.Random(0)
        self.ttl = int(self.header["ttl_ms"] * MS)
        self.cu = int(self.header["clock_uncertainty_ms"] * MS)
        ints = [p for p in (ev.get("process") for ev in self.events) if isinstance(p, int)]
        self.next_process = max(ints, default=0) + 100
        last = self.events[-1]["time"] if self.events else 0
        self.t = last + 2 * self.ttl + self.cu + MS

    # -- what the history (with what was appended so far) says about a node

    @property
    def ops(self) -> list[SimOp]:
        return pair(self.events)

    def node_ops(self, node: str) -> list[SimOp]:
        return [op for op in self.ops if op.node == node]

    def max_epoch(self, node: str) -> int:
        """The largest epoch written anywhere about ``node`` (invokes and completions)."""
        es = [0]
        for op in self.node_ops(node):
            for v in (op.value, op.result):
                e = v.get("epoch") if isinstance(v, dict) else None
                if type(e) is int:
                    es.append(e)
        return max(es)

    def ok_claims(self, node: str) -> list[SimOp]:
        return [op for op in self.node_ops(node) if op.f == "claim" and op.type == "ok" and type(op.epoch) is int]

    def ok_commits(self, node: str) -> list[SimOp]:
        return [op for op in self.node_ops(node) if op.f == "commit" and op.type == "ok"]

    def succeeded(self, node: str) -> bool:
        """Known SUCCEEDED: an ok commit, or an ok read showing it (an info commit that landed)."""
        return any(
            (op.f == "commit" and op.type == "ok") or (op.f == "read" and op.type == "ok" and op.result.get("status") == "SUCCEEDED")
            for op in self.node_ops(node)
        )

    def has_info(self, node: str, fs: tuple[str, ...]) -> bool:
        return any(op.type == "info" and op.f in fs for op in self.node_ops(node))

    def pick_node(self, *avoid: Callable[[str], bool]) -> str:
        """An existing node none of ``avoid`` rejects (random), else a fresh node."""
        nodes = sorted({op.node for op in self.ops if isinstance(op.node, str)})
        fit = [n for n in nodes if not any(a(n) for a in avoid)]
        return self.rng.choice(fit) if fit else "planted"

    # -- appending

    def process(self) -> int:
        self.next_process += 1
        return self.next_process

    def wait(self, ns: int) -> None:
        self.t += ns

    def op(
        self,
        f: str,
        node: str,
        value: dict[str, Any],
        type_: str | None,
        result: dict[str, Any] | None = None,
        *,
        process: int | None = None,
        dur: int = MS,
    ) -> int:
        """Append invoke (and completion, unless ``type_`` is None) at the current time."""
        p = self.process() if process is None else process
        index = len(self.events)
        self.events.append({"index": index, "time": self.t, "process": p, "type": "invoke", "f": f, "node": node, "value": value})
        if type_ is not None:
            self.events.append(
                {"index": index + 1, "time": self.t + dur, "process": p, "type": type_, "f": f, "node": node, "value": result or {}}
            )
        self.t += dur + MS
        return index

    def claim(self, node: str, epoch: int, *, process: int | None = None) -> int:
        p = self.process() if process is None else process
        return self.op("claim", node, {"owner": f"w{p}"}, "ok", {"epoch": epoch}, process=p)

    def lines(self) -> list[str]:
        return dump(self.header, self.events)


def _older_epoch(pl: _Planter, node: str) -> int:
    """An epoch a (zombie) holder of ``node`` got from an ok claim: the latest one, or a new one."""
    claims = pl.ok_claims(node)
    if claims:
        return max(claims, key=lambda op: op.index).epoch
    e = pl.max_epoch(node) + 1
    pl.claim(node, e)
    pl.wait(pl.ttl + pl.cu + MS)  # ... whose lease then runs out
    return e


def plant_duplicate_epoch(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A fresh claim returns the epoch an earlier ok claim returned. Cites [first, later]."""
    pl = _Planter(lines, rng)
    node = pl.pick_node(lambda n: not pl.ok_claims(n))
    claims = pl.ok_claims(node)
    if claims:
        e = pl.rng.choice(claims).epoch
    else:
        e = pl.max_epoch(node) + 1
        pl.claim(node, e)
        pl.wait(pl.ttl + pl.cu + MS)
    later = pl.claim(node, e)
    return pl.lines(), later


def plant_epoch_regression(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A claim returns E+1 (never returned before) after a claim returned E+2."""
    pl = _Planter(lines, rng)
    node = pl.pick_node()
    e = pl.max_epoch(node)
    pl.claim(node, e + 2)
    pl.wait(pl.ttl + pl.cu + MS)
    v = pl.claim(node, e + 1)
    return pl.lines(), v


def _plant_stale(f: str, lines: Iterable[str], rng: random.Random | None) -> tuple[list[str], int]:
    pl = _Planter(lines, rng)
    node = pl.pick_node(lambda n: bool(pl.ok_commits(n)))
    old = _older_epoch(pl, node)
    pl.claim(node, pl.max_epoch(node) + 1)
    value: dict[str, Any] = {"epoch": old}
    if f == "commit":
        value["result"] = "zombie-result"
    elif f == "effect":
        value["payload"] = "zombie-write"
    v = pl.op(f, node, value, "ok", {})
    return pl.lines(), v


def plant_stale_renew(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A zombie renews its old epoch ok after a newer claim completed. Cites [witness, renew]."""
    return _plant_stale("renew", lines, rng)


def plant_stale_commit(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A zombie commits its old epoch ok after a newer claim completed. Cites [witness, commit]."""
    return _plant_stale("commit", lines, rng)


def effect_fence_of(header: dict[str, Any]) -> EffectFence:
    """The rule a history's header names for the protected resource (absent: "lease")."""
    fence = header.get("effect_fence", "lease")
    assert fence in ("lease", "token"), fence
    return cast(EffectFence, fence)


def plant_stale_effect(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """An effect with an older epoch is accepted although it is stale under the header's rule.

    ``"token"``: after the resource accepted a newer effect (cites [newer effect,
    effect]). ``"lease"``: after a newer claim completed, with or without the new
    holder's effect in between (cites [newer claim, effect]: the first op that
    observed the newest epoch).
    """
    pl = _Planter(lines, rng)
    node = pl.pick_node()
    old = _older_epoch(pl, node)
    new = pl.max_epoch(node) + 1
    p = pl.process()
    pl.claim(node, new, process=p)
    if effect_fence_of(pl.header) == "token" or pl.rng.random() < 0.5:
        pl.op("effect", node, {"epoch": new, "payload": "fresh-write"}, "ok", {}, process=p)
    v = pl.op("effect", node, {"epoch": old, "payload": "zombie-write"}, "ok", {})
    return pl.lines(), v


def plant_zombie_effect_before_newer_effect(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A zombie's effect accepted after a newer claim completed, before any newer effect.

    The two rules part here: stale under ``"lease"`` (the claim lifted the fence),
    a near miss under ``"token"`` (the resource never saw the newer epoch). The
    node is kept clean otherwise: not SUCCEEDED, and the zombie's epoch is the
    largest any ok op on it carried, so no earlier effect outranks it. Returns
    the effect's index.
    """
    pl = _Planter(lines, rng)
    node = pl.pick_node(pl.succeeded)
    ok_epochs = [op.epoch for op in pl.node_ops(node) if op.type == "ok" and type(op.epoch) is int]
    old = max(ok_epochs, default=0)
    if not old:
        old = pl.max_epoch(node) + 1
        pl.claim(node, old)
    pl.wait(pl.ttl + pl.cu + MS)
    pl.claim(node, pl.max_epoch(node) + 1)
    v = pl.op("effect", node, {"epoch": old, "payload": "zombie-write"}, "ok", {})
    return pl.lines(), v


def plant_duplicate_commit(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """Two commits with different epochs both succeed; the planted one is the later."""
    pl = _Planter(lines, rng)
    node = pl.pick_node()
    if not pl.ok_commits(node):
        p = pl.process()
        e = pl.max_epoch(node) + 1
        pl.claim(node, e, process=p)
        pl.op("commit", node, {"epoch": e, "result": "first"}, "ok", {}, process=p)
        pl.wait(pl.ttl + pl.cu + MS)
    p = pl.process()
    e = pl.max_epoch(node) + 1
    pl.claim(node, e, process=p)
    v = pl.op("commit", node, {"epoch": e, "result": "second"}, "ok", {}, process=p)
    return pl.lines(), v


def plant_lost_commit(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A read after an ok commit shows another status, epoch or result. Cites [commit, read]."""
    pl = _Planter(lines, rng)
    node = pl.pick_node(lambda n: bool(pl.ok_commits(n)))
    commits = pl.ok_commits(node)
    if commits:
        c = commits[0]
        e, owner, result = c.epoch, None, c.value.get("result")
        for cl in pl.ok_claims(node):
            if cl.epoch == e:
                owner = cl.value.get("owner")
    else:
        p = pl.process()
        e, owner, result = pl.max_epoch(node) + 1, f"w{p}", "the-result"
        pl.claim(node, e, process=p)
        pl.op("commit", node, {"epoch": e, "result": result}, "ok", {}, process=p)
    seen = pl.rng.choice(
        [
            {"status": "READY", "epoch": e},
            {"status": "RUNNING", "epoch": e, "owner": owner or "w?"},
            {"status": "SUCCEEDED", "epoch": e, "owner": owner or "w?", "result": f"not-{result}"},
        ]
    )
    v = pl.op("read", node, {}, "ok", seen)
    return pl.lines(), v


def _held_lease(pl: _Planter) -> tuple[str, int, int]:
    """A fresh lease whose holder provably still holds it now: (node, epoch, holder's process).

    Three shapes: a claim alone; a claim and an ok renew; a claim and an ok
    renew, with now past claim + ttl - uncertainty but before renew + ttl -
    uncertainty (so only a checker that counts the renew sees the lease held).
    """
    window = pl.ttl - pl.cu
    assert window > 10 * MS, "needs ttl - clock_uncertainty > 10 ms"
    node = pl.pick_node(pl.succeeded)  # keep the node linearizable: only a time bound is broken
    e = pl.max_epoch(node) + 1
    p = pl.process()
    shape = pl.rng.choice(["claim only", "renew", "only the renew proves it"])
    t0 = pl.t
    pl.claim(node, e, process=p)
    if shape != "claim only":
        pl.wait(pl.rng.randint(0, window // 2 - 4 * MS))
        pl.op("renew", node, {"epoch": e}, "ok", {}, process=p)
    if shape == "only the renew proves it":
        pl.t = max(pl.t, t0 + window)  # the next op completes after t0 + window, before renew + window
    return node, e, p


def plant_overlapping_lease(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A claim succeeds while the previous holder's (maybe renewed) lease provably runs (:func:`_held_lease`).

    Cites [holder's claim, (its renew that set T), claim].
    """
    pl = _Planter(lines, rng)
    node, e, _ = _held_lease(pl)
    v = pl.claim(node, e + 1)
    return pl.lines(), v


def plant_stuck_lease(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A claim fails "held" more than ttl + uncertainty after the last lease was granted.

    Needs a node with no info claim or renew (they may land any time): a fresh
    node if every node has one. Cites [latest ok claim/renew, failing claim].
    """
    pl = _Planter(lines, rng)
    node = pl.pick_node(lambda n: pl.has_info(n, ("claim", "renew")), pl.succeeded)
    pl.claim(node, pl.max_epoch(node) + 1)
    pl.wait(pl.ttl + pl.cu + MS)
    p = pl.process()
    v = pl.op("claim", node, {"owner": f"w{p}"}, "fail", {"reason": "held"}, process=p)
    return pl.lines(), v


def plant_premature_expiry(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """A renew, commit or release is refused "expired" while its lease provably runs (:func:`_held_lease`).

    Cites [the grant that set T, the refused op].
    """
    pl = _Planter(lines, rng)
    node, e, p = _held_lease(pl)
    f = pl.rng.choice(["renew", "commit", "release"])
    value: dict[str, Any] = {"epoch": e, "result": f"r{e}"} if f == "commit" else {"epoch": e}
    v = pl.op(f, node, value, "fail", {"reason": "expired"}, process=p)
    return pl.lines(), v


def plant_non_linearizable(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """After a fresh claim of epoch X, a read shows a state no op could produce.

    READY with epoch X (nobody released X), or RUNNING X with another owner. No
    other kind applies (no ok commit on the node, no later claim).
    """
    pl = _Planter(lines, rng)
    node = pl.pick_node(pl.succeeded)
    e = pl.max_epoch(node) + 1
    p = pl.process()
    pl.claim(node, e, process=p)
    seen = pl.rng.choice([{"status": "READY", "epoch": e}, {"status": "RUNNING", "epoch": e, "owner": "w-ghost"}])
    v = pl.op("read", node, {}, "ok", seen)
    return pl.lines(), v


def _plant_unfenced_stale(f: str, lines: Iterable[str], rng: random.Random | None) -> tuple[list[str], int]:
    pl = _Planter(lines, rng)
    node = pl.pick_node(lambda n: bool(pl.ok_commits(n)))
    pa, pb = pl.process(), pl.process()
    pl.op("claim", node, {"owner": f"w{pa}"}, "ok", {"epoch": None, "token": "tok-old"}, process=pa)
    pl.wait(pl.ttl + pl.cu + MS)
    pl.op("claim", node, {"owner": f"w{pb}"}, "ok", {"epoch": None, "token": "tok-new"}, process=pb)
    value: dict[str, Any] = {"epoch": None, "token": "tok-old"}
    value.update({"result": "zombie-result"} if f == "commit" else {"payload": "zombie-write"})
    v = pl.op(f, node, value, "ok", {}, process=pa)
    return pl.lines(), v


def plant_unfenced_stale_commit(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """Unfenced: the older holder commits after a newer claim completed (grant order)."""
    return _plant_unfenced_stale("commit", lines, rng)


def plant_unfenced_stale_effect(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], int]:
    """Unfenced: the older holder's effect is accepted after a newer claim completed."""
    return _plant_unfenced_stale("effect", lines, rng)


#: one planting function per anomaly kind of docs/contracts/anomaly-kinds.md (fenced histories)
PLANTERS: dict[str, Callable[..., tuple[list[str], int]]] = {
    "duplicate-epoch": plant_duplicate_epoch,
    "epoch-regression": plant_epoch_regression,
    "stale-renew": plant_stale_renew,
    "stale-commit": plant_stale_commit,
    "stale-effect": plant_stale_effect,
    "duplicate-commit": plant_duplicate_commit,
    "lost-commit": plant_lost_commit,
    "overlapping-lease": plant_overlapping_lease,
    "stuck-lease": plant_stuck_lease,
    "premature-expiry": plant_premature_expiry,
    "non-linearizable": plant_non_linearizable,
}

#: unfenced histories: kind -> planting function (grant-order staleness)
UNFENCED_PLANTERS: dict[str, Callable[..., tuple[list[str], int]]] = {
    "stale-commit": plant_unfenced_stale_commit,
    "stale-effect": plant_unfenced_stale_effect,
}


# --------------------------------------------------------------------------------------
# planting resource anomalies (what a read of the protected resource shows)


def _last_resource_read(pl: _Planter) -> SimOp | None:
    """The last ok read-resource of the history (the final phase's, when it read the resource), at random among nodes."""
    reads = [op for op in pl.ops if op.f == "read-resource" and op.type == "ok"]
    last = {op.node: op for op in reads}
    return pl.rng.choice(sorted(last.values(), key=lambda o: o.index)) if last else None


def _completion(pl: _Planter, op: SimOp) -> dict[str, Any]:
    return next(ev for ev in pl.events if ev["process"] == op.process and ev["type"] != "invoke" and ev["time"] == op.t1
                and ev["f"] == op.f)


def _begin(pl: _Planter, f: str, node: str, value: dict[str, Any], p: int) -> None:
    pl.events.append({"index": len(pl.events), "time": pl.t, "process": p, "type": "invoke", "f": f, "node": node, "value": value})
    pl.t += MS


def _end(pl: _Planter, f: str, node: str, p: int, type_: str = "ok", value: dict[str, Any] | None = None) -> None:
    pl.events.append({"index": len(pl.events), "time": pl.t, "process": p, "type": type_, "f": f, "node": node, "value": value or {}})
    pl.t += MS


def _resource(fence: int | None, entries: list[tuple[int, str]]) -> dict[str, Any]:
    return {"fence": fence, "accepted": [{"epoch": e, "payload": p} for e, p in entries]}


def _zombie_across_claim(pl: _Planter, node: str) -> tuple[int, int, int, int]:
    """On a fresh node: a lease of epoch 1 whose holder's effect is still in flight when epoch 2 is granted (after the
    first lease ran out), so no op before it observed epoch 2. (zombie's process, its effect's index, the newer claim's
    process, the newer claim's index)."""
    pa, pb = pl.process(), pl.process()
    pl.claim(node, 1, process=pa)
    pl.wait(pl.ttl + pl.cu + MS)
    zombie = len(pl.events)
    _begin(pl, "effect", node, {"epoch": 1, "payload": "zombie-write"}, pa)
    newer = pl.claim(node, 2, process=pb)
    return pa, zombie, pb, newer


def plant_resource_out_of_order(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], list[int]]:
    """1a: the zombie's epoch-1 write lands after the new holder's epoch-2 write; a read shows the log so.
    Cites [read, newer effect, zombie's effect]."""
    pl = _Planter(lines, rng)
    node = "planted-resource"
    pa, zombie, pb, _ = _zombie_across_claim(pl, node)
    fresh = pl.op("effect", node, {"epoch": 2, "payload": "fresh-write"}, "ok", {}, process=pb)
    _end(pl, "effect", node, pa)
    r = pl.op("read-resource", node, {}, "ok", _resource(2, [(2, "fresh-write"), (1, "zombie-write")]))
    return pl.lines(), [r, fresh, zombie]


def plant_resource_below_fence(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], list[int]]:
    """1b: a read shows fence 2 and not the zombie's write; a later read lists it (epoch 1). Cites [R1, R2, effect]."""
    pl = _Planter(lines, rng)
    node = "planted-resource"
    pa, zombie, _, _ = _zombie_across_claim(pl, node)
    r1 = pl.op("read-resource", node, {}, "ok", _resource(2, []))
    _end(pl, "effect", node, pa)
    r2 = pl.op("read-resource", node, {}, "ok", _resource(2, [(1, "zombie-write")]))
    return pl.lines(), [r1, r2, zombie]


def plant_fence_regression(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], list[int]]:
    """A read of the resource shows a fence below an epoch it lists itself. Cites [read]."""
    pl = _Planter(lines, rng)
    node = "planted-resource"
    p = pl.process()
    pl.claim(node, 1, process=p)
    pl.op("effect", node, {"epoch": 1, "payload": "the-write"}, "ok", {}, process=p)
    r = pl.op("read-resource", node, {}, "ok", _resource(0, [(1, "the-write")]))
    return pl.lines(), [r]


def plant_phantom_effect(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], list[int]]:
    """The last read of some node's resource lists an entry no effect op wrote (at the log's top epoch, below the
    fence), else a fresh node's read does. Cites [read]."""
    pl = _Planter(lines, rng)
    r = _last_resource_read(pl)
    if r is None:
        node = "planted-resource"
        p = pl.process()
        pl.claim(node, 1, process=p)
        index = pl.op("read-resource", node, {}, "ok", _resource(1, [(1, "ghost-write")]))
        return pl.lines(), [index]
    value = _completion(pl, r)["value"]
    epochs = [e["epoch"] for e in value["accepted"] if type(e["epoch"]) is int]
    entry: dict[str, Any] = {"epoch": max(epochs, default=value["fence"]), "payload": "ghost-write"}
    if entry["epoch"] is None:
        entry["token"] = "tok-ghost"
    value["accepted"].append(entry)
    return pl.lines(), [r.index]


def plant_lost_effect(lines: Iterable[str], rng: random.Random | None = None) -> tuple[list[str], list[int]]:
    """The last read of some node's resource leaves out an effect acknowledged (ok) before it was invoked, else a
    fresh node's read does. Cites [effect, read]."""
    pl = _Planter(lines, rng)
    r = _last_resource_read(pl)
    acked = [] if r is None else [op for op in pl.node_ops(r.node) if op.f == "effect" and op.type == "ok" and op.t1 < r.t0]
    if r is None or not acked:
        node = "planted-resource"
        p = pl.process()
        pl.claim(node, 1, process=p)
        e = pl.op("effect", node, {"epoch": 1, "payload": "lost-write"}, "ok", {}, process=p)
        index = pl.op("read-resource", node, {}, "ok", _resource(1, []))
        return pl.lines(), [e, index]
    value = _completion(pl, r)["value"]
    gone = acked[0]  # the first acknowledged: the one the finding cites (one per effect, at its first read)
    earlier = [op for op in pl.node_ops(r.node) if op.f == "read-resource" and op.type == "ok" and op.index < r.index
               and op.t0 > gone.t1 and gone.value["payload"] not in {x["payload"] for x in op.result["accepted"]}]
    value["accepted"] = [x for x in value["accepted"] if x["payload"] != gone.value["payload"]]
    return pl.lines(), [gone.index, (earlier[0] if earlier else r).index]


#: resource anomalies: name -> (kind, planter returning (lines, the ops the finding must cite))
RESOURCE_PLANTERS: dict[str, tuple[str, Callable[..., tuple[list[str], list[int]]]]] = {
    "out-of-order": ("stale-effect", plant_resource_out_of_order),
    "below-fence": ("stale-effect", plant_resource_below_fence),
    "fence-regression": ("fence-regression", plant_fence_regression),
    "phantom-effect": ("phantom-effect", plant_phantom_effect),
    "lost-effect": ("lost-effect", plant_lost_effect),
}
