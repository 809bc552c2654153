"""Network faults through a real Toxiproxy: partitions (hang or cut), latency, bandwidth.

Each fault puts toxics on some workers' proxies (:mod:`leasecheck.nemesis.proxies`):
one worker, a minority, or everyone. Faults and what a client sees:

* :class:`Partition` ``mode="hang"``: a ``timeout`` toxic with timeout 0 on
  both directions. Connections stay open and every byte is dropped: an op sent
  on a live connection never gets its reply (the client's timeout turns it
  into ``Indeterminate``), a new connection is accepted but its handshake never
  completes (``Unavailable`` for backends that connect before sending).
  Removing the toxic closes the connections it held (Toxiproxy's ``timeout``
  toxic closes its stub on cleanup), so after a heal clients reconnect.
* :class:`Partition` ``mode="cut"``: the proxy is disabled: its listener
  closes (new connections are refused: definitely not applied) and its open
  connections are closed.
* :class:`Latency`: a ``latency`` toxic on both directions: every request
  and every reply waits ``latency_ms`` (± ``jitter_ms``).
* :class:`Bandwidth`: a ``bandwidth`` toxic on both directions, ``rate_kb`` KB/s.

Each heal removes exactly the toxics its fault added (by name) and re-enables
exactly the proxies it disabled; each active fault's ``undo_record()`` lets
``leasecheck heal`` do the same after the harness died (:func:`undo_toxics`).
The ``make_*`` functions are the catalogue's factories
(:mod:`leasecheck.nemesis.catalogue`): sizes follow the lease, latency up to one
ttl (a renew that arrives after its lease ran out), bandwidth low enough that
a statement takes a good fraction of a second.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.heal import Record, undoes
from leasecheck.nemesis.proxies import Network, WorkerKey
from leasecheck.nemesis.toxiproxy import ToxiproxyClient, ToxiproxyError

PartitionMode = Literal["hang", "cut"]
BOTH = ("upstream", "downstream")


@undoes("toxiproxy")
def undo_toxics(rec: Record) -> str:
    """``leasecheck heal``: remove a fault's toxics and re-enable its proxies, from its record alone.

    The record is :meth:`_NetworkFault.undo_record`'s: ``api`` (the server's
    URL), ``toxics`` ([proxy, toxic] pairs) and ``enable`` (proxy names).
    Our own Toxiproxy server dies with the harness, taking its proxies along,
    so an unreachable API means there is nothing left to undo.
    """
    api = ToxiproxyClient(rec["api"], timeout_s=10.0)
    try:
        removed = sum(api.remove_toxic(proxy, toxic) for proxy, toxic in rec.get("toxics", []))
        for proxy in rec.get("enable", []):
            api.set_enabled(proxy, True)
    except ToxiproxyError as e:
        if e.status is None:
            return f"toxiproxy at {rec['api']} is gone (it dies with the harness): nothing left to undo"
        raise
    return f"removed {removed} toxic(s), re-enabled {len(rec.get('enable', []))} proxy(ies) at {rec['api']}"


@dataclass
class _NetworkFault:
    """A fault made of toxics on some workers' proxies; ``victims=None`` means every proxy there is.

    ``start`` undoes its own partial work if the API fails midway (the
    Nemesis only heals faults whose start succeeded), and ``heal`` removes
    exactly the toxics ``start`` added, by name.
    """

    network: Network
    victims: Sequence[WorkerKey] | None
    #: the history's process number of each live worker's key, now; with it the events name the victims by
    #: process number (as every other fault does) and their proxies' keys as ``proxies``
    processes: Callable[[], Mapping[WorkerKey, int]] | None = field(default=None, kw_only=True, repr=False)
    name: str = field(default="", init=False)
    _hit: list[WorkerKey] = field(default_factory=list, init=False, repr=False)
    _named: list[int] | None = field(default=None, init=False, repr=False)
    _toxics: list[tuple[WorkerKey, str]] = field(default_factory=list, init=False, repr=False)
    _cut: list[WorkerKey] = field(default_factory=list, init=False, repr=False)

    def toxics(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(toxic type, stream, attributes) to add to each victim's proxy."""
        return []

    def details(self) -> dict[str, Any]:
        """What the event value says besides the victims."""
        return {}

    def _inflict(self, key: WorkerKey) -> None:
        for kind, stream, attributes in self.toxics():
            self._toxics.append((key, self.network.add_toxic(key, self.name, kind, stream, attributes)))

    def start(self) -> dict[str, Any]:
        everyone = self.network.keys()
        self._hit = list(everyone if self.victims is None else self.victims)
        if self.processes is not None:  # named at the start, and the heal names the same ones
            now = self.processes()
            self._named = [now[key] for key in self._hit if key in now]
        try:
            for key in self._hit:
                self._inflict(key)
        except BaseException:
            self._undo()
            raise
        return self._value(len(everyone))

    def heal(self) -> dict[str, Any] | None:
        if not (self._toxics or self._cut):
            return None
        self._undo()
        return self._value(None)

    def undo_record(self) -> dict[str, Any] | None:
        """How ``leasecheck heal`` undoes this fault if the harness dies before it does (see :func:`undo_toxics`)."""
        if not (self._toxics or self._cut):
            return None
        return {
            "kind": "toxiproxy",
            "api": self.network.api.url,
            "toxics": [[self.network.proxy_name(key), toxic] for key, toxic in self._toxics],
            "enable": [self.network.proxy_name(key) for key in self._cut],
        }

    def _undo(self) -> None:
        """Take back every toxic and cut of this fault, even if some of the API calls fail."""
        errors: list[ToxiproxyError] = []
        toxics, self._toxics = self._toxics, []
        cut, self._cut = self._cut, []
        for key, toxic in toxics:
            try:
                self.network.remove_toxic(key, toxic)
            except ToxiproxyError as e:
                errors.append(e)
        for key in cut:
            try:
                self.network.uncut(key)
            except ToxiproxyError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def _value(self, total: int | None) -> dict[str, Any]:
        """The event value: victims and sizes; at start the scope, at heal which fault (all heal as ``heal``)."""
        value: dict[str, Any] = {"victims": list(self._hit), **self.details()}
        if self._named is not None:
            value = {"victims": list(self._named), "proxies": list(self._hit), **self.details()}
        if total is None:
            value["fault"] = self.name
        else:
            value["scope"] = "all" if self._hit and len(self._hit) >= total else "some"
        return value


@dataclass
class Partition(_NetworkFault):
    """Separate the victims from the store: ``hang`` (bytes dropped, connections open) or ``cut`` (refused, closed)."""

    mode: PartitionMode = "hang"

    def __post_init__(self) -> None:
        if self.mode not in ("hang", "cut"):
            raise ValueError(f"partition mode must be 'hang' or 'cut', not {self.mode!r}")
        self.name = "partition"

    def toxics(self) -> list[tuple[str, str, dict[str, Any]]]:
        # timeout 0: never close, drop everything until the toxic is removed
        return [("timeout", stream, {"timeout": 0}) for stream in BOTH] if self.mode == "hang" else []

    def _inflict(self, key: WorkerKey) -> None:
        if self.mode == "cut":
            self.network.cut(key)
            self._cut.append(key)
        else:
            super()._inflict(key)

    def details(self) -> dict[str, Any]:
        return {"mode": self.mode}


@dataclass
class Latency(_NetworkFault):
    """Delay every request and every reply of the victims by ``latency_ms`` ± ``jitter_ms``."""

    latency_ms: int = 100
    jitter_ms: int = 0

    def __post_init__(self) -> None:
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise ValueError("latency and jitter must not be negative")
        self.name = "latency"

    def toxics(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [("latency", stream, {"latency": self.latency_ms, "jitter": self.jitter_ms}) for stream in BOTH]

    def details(self) -> dict[str, Any]:
        return {"latency_ms": self.latency_ms, "jitter_ms": self.jitter_ms}


@dataclass
class Bandwidth(_NetworkFault):
    """Limit each of the victims' connections to ``rate_kb`` KB/s in each direction."""

    rate_kb: int = 1

    def __post_init__(self) -> None:
        if self.rate_kb < 1:
            raise ValueError("bandwidth rate must be at least 1 KB/s")
        self.name = "bandwidth"

    def toxics(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [("bandwidth", stream, {"rate": self.rate_kb}) for stream in BOTH]

    def details(self) -> dict[str, Any]:
        return {"rate_kb": self.rate_kb}


def choose_victims(keys: Sequence[WorkerKey], rng: random.Random) -> list[WorkerKey] | None:
    """One worker, a minority, or (None) everyone: each a third of the time, from the seed."""
    scope = rng.choice(("one", "minority", "all"))
    if scope == "all" or len(keys) <= 1:
        return None if scope == "all" else list(keys)
    if scope == "one":
        return [rng.choice(list(keys))]
    return rng.sample(list(keys), max(1, (len(keys) - 1) // 2))


def _processes(ctx: FaultContext) -> Callable[[], Mapping[WorkerKey, int]]:
    """Each ready worker's process number by its proxy's key (its slot), when asked."""
    return lambda: {w.slot: w.process for w in ctx.workers()}


def _aim(ctx: FaultContext, rng: random.Random) -> tuple[Network, list[WorkerKey] | None] | None:
    """The network and the victims drawn from the seed (None: everyone); None while no worker has a proxy."""
    network = ctx.network
    keys = network.keys() if network is not None else []
    if network is None or not keys:
        return None
    return network, choose_victims(keys, rng)


def make_partition(ctx: FaultContext, rng: random.Random) -> Partition | None:
    """The catalogue's ``partition``: hang or cut, one of each half the time."""
    aim = _aim(ctx, rng)
    if aim is None:
        return None
    return Partition(*aim, mode=rng.choice(("hang", "cut")), processes=_processes(ctx))


def make_latency(ctx: FaultContext, rng: random.Random) -> Latency | None:
    """The catalogue's ``latency``: 0.2-1 ttl, with a quarter of it as jitter."""
    aim = _aim(ctx, rng)
    if aim is None:
        return None
    latency = max(1, round(rng.uniform(0.2, 1.0) * ctx.ttl_ms))
    return Latency(*aim, latency_ms=latency, jitter_ms=latency // 4, processes=_processes(ctx))


def make_bandwidth(ctx: FaultContext, rng: random.Random) -> Bandwidth | None:
    """The catalogue's ``bandwidth``: 1, 4 or 16 KB/s."""
    aim = _aim(ctx, rng)
    if aim is None:
        return None
    return Bandwidth(*aim, rate_kb=rng.choice((1, 4, 16)), processes=_processes(ctx))
