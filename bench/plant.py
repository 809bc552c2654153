"""One planted anomaly of a named kind in a valid generated history: the invalid rows.

``bench_porcupine`` compares the tools on invalid histories too. Each is a
``bench.gen`` history (valid by construction) with a few ops appended after its
end, as ``tests/support/sim.py``'s planters do for the property tests, whose scripts
these follow one for one (the tests hold the checker to them: the planted kind
is reported on the planted node, citing the planted op). The appended ops start
more than 2 ttl + clock uncertainty after the last event, so every lease of the
original history has provably run out, and use fresh process numbers.

Unlike the test planters, which re-read the history in memory for every
question, this reads the file once, keeps a few facts per node, and writes the
original bytes followed by the planted events: linear in the file, so a
1,000,000-op history is planted in seconds.

The node comes from the history where the kind allows (the hot node of a
one-node history, a node of a real-shaped one; never a SUCCEEDED node where the
planted ops claim it, so that nothing but the planted kind is wrong with it),
else a fresh node: a
``stuck-lease`` cannot be proved on a node with an ``info`` claim or renew
(docs/contracts/anomaly-kinds.md: it may take effect at any later time), so on a hot node with
crashed ops it goes to a node of its own. The resource kinds (``fence-regression``,
``phantom-effect``, ``lost-effect``) always get a node of their own: a read of a
history node's resource would have to list every effect that node's resource took,
which the facts kept here do not know (nor, with ``info`` effects, the history).

Usage: python -m bench.plant --kind stale-commit HISTORY -o OUT [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from leasecheck.histories import vocabulary
from leasecheck.histories.format import Event
from leasecheck.kit.simstore import MS

#: every anomaly kind of docs/contracts/anomaly-kinds.md (a planter makes each on a fenced node)
KINDS: tuple[str, ...] = vocabulary.KINDS

#: the kinds that are time bounds, not linearizability violations: the lease
#: model has no clock, so a linearizability checker (Porcupine) rightly says "ok"
TIMING_KINDS: frozenset[str] = vocabulary.TIMING_KINDS

#: the kinds only a read of the protected resource (``read-resource``) shows; their
#: planters append the read themselves, so they need no resource reads in the history
RESOURCE_KINDS: frozenset[str] = frozenset({"fence-regression", "phantom-effect", "lost-effect"})

#: the node a planter uses when no node of the history fits
FRESH_NODE = "planted/node-0"

#: bump when the planted bytes change for the same history and kind (cache keys use it)
PLANT_VERSION = 1


class _Event(Event, gc=False):
    """The history's one event record (:class:`~leasecheck.histories.format.Event`), a missing node or value read as empty."""

    node: str = ""
    value: dict[str, Any] = msgspec.field(default_factory=dict)


@dataclass(slots=True)
class NodeFacts:
    """What a planter needs to know about one node, from its completed (and open) ops."""

    max_epoch: int = 0  # the largest epoch written anywhere about the node
    ok_claims: list[tuple[int, int, str | None]] = field(default_factory=list)  # (index, epoch, owner)
    ok_commits: list[tuple[int, int, str | None]] = field(default_factory=list)  # (index, epoch, result)
    succeeded: bool = False  # an ok commit, or an ok read showing SUCCEEDED
    info_claim_or_renew: bool = False  # one that may take effect at any later time


def _epoch(v: dict[str, Any]) -> int | None:
    e = v.get("epoch")
    return e if type(e) is int else None


def observe(facts: NodeFacts, index: int, f: str, value: dict[str, Any], type_: str, result: dict[str, Any]) -> None:
    """Update ``facts`` with one op: invoke ``value``, completion ``type_`` and ``result``."""
    for v in (value, result):
        e = _epoch(v)
        if e is not None and e > facts.max_epoch:
            facts.max_epoch = e
    if type_ == "info":
        facts.info_claim_or_renew |= f in ("claim", "renew")
    elif type_ == "ok":
        if f == "claim" and _epoch(result) is not None:
            facts.ok_claims.append((index, result["epoch"], value.get("owner")))
        elif f == "commit":
            facts.ok_commits.append((index, value.get("epoch", 0), value.get("result")))
            facts.succeeded = True
        elif f == "read" and result.get("status") == "SUCCEEDED":
            facts.succeeded = True


@dataclass(slots=True)
class HistoryFacts:
    """The header, where the history ends, and the facts of every node."""

    header: dict[str, Any]
    next_index: int
    last_time: int
    max_process: int
    nodes: dict[str, NodeFacts]


def read_facts(path: Path) -> HistoryFacts:
    """One pass over ``path``: pair invokes with completions and keep each node's facts."""
    decode = msgspec.json.Decoder(_Event).decode
    nodes: dict[str, NodeFacts] = {}
    open_: dict[int, _Event] = {}
    last_time = max_process = 0
    next_index = 0
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        for line in f:
            if not line.strip():
                continue
            ev = decode(line)
            next_index = ev.index + 1
            last_time = ev.time
            p = ev.process
            if not isinstance(p, int):
                continue  # nemesis
            max_process = max(max_process, p)
            if ev.type == "invoke":
                open_[p] = ev
                continue
            inv = open_.pop(p, None)
            if inv is not None:
                facts = nodes.setdefault(inv.node, NodeFacts())
                observe(facts, inv.index, inv.f, inv.value, ev.type, ev.value)
    for inv in open_.values():  # never completed: info
        observe(nodes.setdefault(inv.node, NodeFacts()), inv.index, inv.f, inv.value, "info", {})
    return HistoryFacts(header, next_index, last_time, max_process, nodes)


class Planter:
    """Appends ops after the end of a history, by fresh processes, keeping the facts current."""

    def __init__(self, facts: HistoryFacts, rng: random.Random) -> None:
        self.facts = facts
        self.rng = rng
        self.ttl = int(facts.header["ttl_ms"] * MS)
        self.cu = int(facts.header["clock_uncertainty_ms"] * MS)
        self.t = facts.last_time + 2 * self.ttl + self.cu + MS
        self.next_process = facts.max_process + 100
        self.events: list[dict[str, Any]] = []

    def node(self, name: str) -> NodeFacts:
        return self.facts.nodes.setdefault(name, NodeFacts())

    def pick_node(self, *avoid: Callable[[NodeFacts], bool]) -> str:
        """A node of the history none of ``avoid`` rejects (seeded choice), else a fresh node."""
        fit = sorted(n for n, nf in self.facts.nodes.items() if not any(a(nf) for a in avoid))
        return self.rng.choice(fit) if fit else FRESH_NODE

    def process(self) -> int:
        self.next_process += 1
        return self.next_process

    def wait(self, ns: int) -> None:
        self.t += ns

    def op(self, f: str, node: str, value: dict[str, Any], type_: str, result: dict[str, Any] | None = None,
           *, process: int | None = None) -> int:
        """Append invoke and completion (1 ms apart) now; returns the invoke's index."""
        p = self.process() if process is None else process
        index = self.facts.next_index + len(self.events)
        base = {"process": p, "f": f, "node": node}
        self.events.append({"index": index, "time": self.t, **base, "type": "invoke", "value": value})
        self.events.append({"index": index + 1, "time": self.t + MS, **base, "type": type_, "value": result or {}})
        self.t += 2 * MS
        observe(self.node(node), index, f, value, type_, result or {})
        return index

    def claim(self, node: str, epoch: int, *, process: int | None = None) -> int:
        p = self.process() if process is None else process
        return self.op("claim", node, {"owner": f"w{p}"}, "ok", {"epoch": epoch}, process=p)

    def older_epoch(self, node: str) -> int:
        """An epoch a (zombie) holder of ``node`` got from an ok claim: the latest one, or a new one."""
        claims = self.node(node).ok_claims
        if claims:
            return max(claims)[1]
        e = self.node(node).max_epoch + 1
        self.claim(node, e)
        self.wait(self.ttl + self.cu + MS)  # ... whose lease then runs out
        return e


def _no_claims(nf: NodeFacts) -> bool:
    return not nf.ok_claims


def _has_commits(nf: NodeFacts) -> bool:
    return bool(nf.ok_commits)


def _succeeded(nf: NodeFacts) -> bool:
    return nf.succeeded


def plant_duplicate_epoch(pl: Planter) -> tuple[str, int]:
    """A fresh claim returns the epoch an earlier ok claim returned."""
    node = pl.pick_node(_no_claims, _succeeded)
    claims = pl.node(node).ok_claims
    if claims:
        e = pl.rng.choice(claims)[1]
    else:
        e = pl.node(node).max_epoch + 1
        pl.claim(node, e)
        pl.wait(pl.ttl + pl.cu + MS)
    return node, pl.claim(node, e)


def plant_epoch_regression(pl: Planter) -> tuple[str, int]:
    """A claim returns E+1 (never returned before) after a claim returned E+2."""
    node = pl.pick_node(_succeeded)
    e = pl.node(node).max_epoch
    pl.claim(node, e + 2)
    pl.wait(pl.ttl + pl.cu + MS)
    return node, pl.claim(node, e + 1)


def _plant_stale(f: str, pl: Planter) -> tuple[str, int]:
    node = pl.pick_node(_has_commits, _succeeded)
    old = pl.older_epoch(node)
    pl.claim(node, pl.node(node).max_epoch + 1)
    value: dict[str, Any] = {"epoch": old}
    if f == "commit":
        value["result"] = "zombie-result"
    return node, pl.op(f, node, value, "ok")


def plant_stale_renew(pl: Planter) -> tuple[str, int]:
    """A zombie renews its old epoch ok after a newer claim completed."""
    return _plant_stale("renew", pl)


def plant_stale_commit(pl: Planter) -> tuple[str, int]:
    """A zombie commits its old epoch ok after a newer claim completed."""
    return _plant_stale("commit", pl)


def plant_stale_effect(pl: Planter) -> tuple[str, int]:
    """An effect with an older epoch is accepted after a newer claim (and, under
    ``"token"`` or by a coin, the new holder's effect) completed."""
    node = pl.pick_node(_succeeded)
    old = pl.older_epoch(node)
    new = pl.node(node).max_epoch + 1
    p = pl.process()
    pl.claim(node, new, process=p)
    if pl.facts.header.get("effect_fence", "lease") == "token" or pl.rng.random() < 0.5:
        pl.op("effect", node, {"epoch": new, "payload": "fresh-write"}, "ok", process=p)
    return node, pl.op("effect", node, {"epoch": old, "payload": "zombie-write"}, "ok")


def plant_duplicate_commit(pl: Planter) -> tuple[str, int]:
    """Two commits with different epochs both succeed; the planted one is the later."""
    node = pl.pick_node()
    if not pl.node(node).ok_commits:
        p = pl.process()
        e = pl.node(node).max_epoch + 1
        pl.claim(node, e, process=p)
        pl.op("commit", node, {"epoch": e, "result": "first"}, "ok", process=p)
        pl.wait(pl.ttl + pl.cu + MS)
    p = pl.process()
    e = pl.node(node).max_epoch + 1
    pl.claim(node, e, process=p)
    return node, pl.op("commit", node, {"epoch": e, "result": "second"}, "ok", process=p)


def plant_lost_commit(pl: Planter) -> tuple[str, int]:
    """A read after an ok commit shows another status, epoch or result."""
    node = pl.pick_node(_has_commits, _succeeded)
    p = pl.process()
    e, owner, result = pl.node(node).max_epoch + 1, f"w{p}", "the-result"
    pl.claim(node, e, process=p)
    pl.op("commit", node, {"epoch": e, "result": result}, "ok", process=p)
    seen = pl.rng.choice(
        [
            {"status": "READY", "epoch": e},
            {"status": "RUNNING", "epoch": e, "owner": owner},
            {"status": "SUCCEEDED", "epoch": e, "owner": owner, "result": f"not-{result}"},
        ]
    )
    return node, pl.op("read", node, {}, "ok", seen)


def _held_lease(pl: Planter) -> tuple[str, int, int]:
    """A fresh lease whose holder provably still holds it now: (node, epoch, holder's process).

    Three shapes: a claim alone; a claim and an ok renew; a claim and an ok
    renew, with now past claim + ttl - uncertainty but before renew + ttl -
    uncertainty (so only a checker that counts the renew sees the lease held).
    """
    window = pl.ttl - pl.cu
    assert window > 10 * MS, "needs ttl - clock_uncertainty > 10 ms"
    node = pl.pick_node(_succeeded)  # keep the node linearizable: only a time bound is broken
    e = pl.node(node).max_epoch + 1
    p = pl.process()
    shape = pl.rng.choice(["claim only", "renew", "only the renew proves it"])
    t0 = pl.t
    pl.claim(node, e, process=p)
    if shape != "claim only":
        pl.wait(pl.rng.randint(0, window // 2 - 4 * MS))
        pl.op("renew", node, {"epoch": e}, "ok", process=p)
    if shape == "only the renew proves it":
        pl.t = max(pl.t, t0 + window)  # the next op completes after t0 + window, before renew + window
    return node, e, p


def plant_overlapping_lease(pl: Planter) -> tuple[str, int]:
    """A claim succeeds while the previous holder's (maybe renewed) lease provably runs."""
    node, e, _ = _held_lease(pl)
    return node, pl.claim(node, e + 1)


def plant_stuck_lease(pl: Planter) -> tuple[str, int]:
    """A claim fails "held" more than ttl + uncertainty after the last lease was granted."""
    node = pl.pick_node(lambda nf: nf.info_claim_or_renew, _succeeded)
    pl.claim(node, pl.node(node).max_epoch + 1)
    pl.wait(pl.ttl + pl.cu + MS)
    p = pl.process()
    return node, pl.op("claim", node, {"owner": f"w{p}"}, "fail", {"reason": "held"}, process=p)


def plant_premature_expiry(pl: Planter) -> tuple[str, int]:
    """A renew, commit or release is refused "expired" while its (maybe renewed) lease provably runs."""
    node, e, p = _held_lease(pl)
    f = pl.rng.choice(["renew", "commit", "release"])
    value: dict[str, Any] = {"epoch": e, "result": f"r{e}"} if f == "commit" else {"epoch": e}
    return node, pl.op(f, node, value, "fail", {"reason": "expired"}, process=p)


def plant_non_linearizable(pl: Planter) -> tuple[str, int]:
    """After a fresh claim of epoch X, a read shows a state no op could produce."""
    node = pl.pick_node(_succeeded)
    e = pl.node(node).max_epoch + 1
    p = pl.process()
    pl.claim(node, e, process=p)
    seen = pl.rng.choice([{"status": "READY", "epoch": e}, {"status": "RUNNING", "epoch": e, "owner": "w-ghost"}])
    return node, pl.op("read", node, {}, "ok", seen)


def _fresh_resource_node(pl: Planter) -> tuple[str, int]:
    """A node of its own (the history's reads of a node's resource would each have to
    agree with the planted ones): a claim of epoch 1 ok, by a fresh process. (node, process)."""
    node, p = FRESH_NODE, pl.process()
    pl.claim(node, pl.node(node).max_epoch + 1, process=p)
    return node, p


def _resource(fence: int | None, entries: list[tuple[int, str]]) -> dict[str, Any]:
    return {"fence": fence, "accepted": [{"epoch": e, "payload": p} for e, p in entries]}


def plant_fence_regression(pl: Planter) -> tuple[str, int]:
    """A read of the resource shows a fence below an epoch it lists itself (and below the
    claim's, under ``"lease"``)."""
    node, p = _fresh_resource_node(pl)
    e = pl.node(node).max_epoch
    payload = f"w{p}:{node}:fence"
    pl.op("effect", node, {"epoch": e, "payload": payload}, "ok", process=p)
    return node, pl.op("read-resource", node, {}, "ok", _resource(e - 1, [(e, payload)]))


def plant_phantom_effect(pl: Planter) -> tuple[str, int]:
    """A read of the resource lists an effect (at the current epoch, not above the fence)
    that no effect op wrote."""
    node, p = _fresh_resource_node(pl)
    e = pl.node(node).max_epoch
    return node, pl.op("read-resource", node, {}, "ok", _resource(e, [(e, f"w{p}:{node}:ghost")]))


def plant_lost_effect(pl: Planter) -> tuple[str, int]:
    """An effect is acknowledged (ok), and a read of the resource invoked after it does not list it."""
    node, p = _fresh_resource_node(pl)
    e = pl.node(node).max_epoch
    pl.op("effect", node, {"epoch": e, "payload": f"w{p}:{node}:lost"}, "ok", process=p)
    return node, pl.op("read-resource", node, {}, "ok", _resource(e, []))


PLANTERS: dict[str, Callable[[Planter], tuple[str, int]]] = {
    "duplicate-epoch": plant_duplicate_epoch,
    "epoch-regression": plant_epoch_regression,
    "stale-renew": plant_stale_renew,
    "stale-commit": plant_stale_commit,
    "stale-effect": plant_stale_effect,
    "duplicate-commit": plant_duplicate_commit,
    "lost-commit": plant_lost_commit,
    "fence-regression": plant_fence_regression,
    "phantom-effect": plant_phantom_effect,
    "lost-effect": plant_lost_effect,
    "overlapping-lease": plant_overlapping_lease,
    "stuck-lease": plant_stuck_lease,
    "premature-expiry": plant_premature_expiry,
    "non-linearizable": plant_non_linearizable,
}
assert tuple(PLANTERS) == KINDS


@dataclass(frozen=True, slots=True)
class Planted:
    """Where the anomaly is: its kind, node and the invoke index of the violating op."""

    kind: str
    node: str
    op: int
    appended_ops: int


def plant(source: Path, dest: Path, kind: str, seed: int = 1) -> Planted:
    """Write ``source`` with one anomaly of ``kind`` appended to ``dest``."""
    if kind not in PLANTERS:
        raise ValueError(f"no planter for {kind!r}; one of {', '.join(KINDS)}")
    pl = Planter(read_facts(source), random.Random(f"{seed}/{kind}"))
    node, op = PLANTERS[kind](pl)
    encode = msgspec.json.Encoder().encode_lines
    newline = _ends_with_newline(source)
    with open(source, "rb") as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
        if not newline:
            out.write(b"\n")
        out.write(encode(pl.events))
    return Planted(kind, node, op, len(pl.events) // 2)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return True
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plant", description=__doc__.split("\n\n")[0])
    p.add_argument("history")
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args(argv)
    planted = plant(Path(a.history), Path(a.output), a.kind, a.seed)
    print(json.dumps({"kind": planted.kind, "node": planted.node, "op": planted.op, "appended_ops": planted.appended_ops}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
