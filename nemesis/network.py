"""Network faults through a real Toxiproxy: partitions (hang or cut), latency, bandwidth.

Every worker reaches the store through its own Toxiproxy proxy
(:meth:`Network.proxy_for`, :meth:`Network.route`), so a fault can hit one
worker, a minority, or everyone — the seed's partitioned worker whose lease
runs out while it still believes it holds it.

Faults and what a client sees:

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
``leasecheck heal`` do the same after the harness died (:func:`undo_toxics`);
:meth:`Network.heal_everything` clears the whole server (the runner's last
step of heal-all, after every fault's own heal).

Why not ``toxiproxy-python`` (DESIGN.md suggests it; 0.1.1 was evaluated):
it keeps the API address in a class attribute (``APIConsumer.host/port``), so
one process can drive only one Toxiproxy server; it calls ``requests`` with no
timeout, so a hung API would hang the nemesis, and heal-all with it; it
silently accepts 5xx answers, so a proxy that failed to re-enable would look
healed; ``add_toxic`` discards the server's answer; and it pulls in ``future``
(a Python 2 shim) and ``requests`` for what is five JSON endpoints. Wrapping
it would replace every call it makes, so :class:`ToxiproxyClient` speaks the
HTTP API (``POST /proxies``, ``PATCH /proxies/{name}``, ``POST|DELETE
/proxies/{name}/toxics[/{toxic}]``, ``POST /reset``, ``GET /version``) with
the standard library: per-instance address, a timeout on every call, every
error status raised.

Besides the standard library this module imports only :mod:`leasecheck.nemesis.faults`'
types and :mod:`leasecheck.nemesis.heal`'s registry.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from leasecheck.nemesis.heal import Record, undoes

if TYPE_CHECKING:  # only a type here, so leasecheck.nemesis.faults can import this module for its EVENTS
    from leasecheck.nemesis.faults import Fault

#: who a proxy belongs to: the runner's worker key (its process number or slot), or a name in tests
WorkerKey = int | str
PartitionMode = Literal["hang", "cut"]
BOTH = ("upstream", "downstream")

#: the nemesis event ``f`` recorded when a network fault starts, and when it is healed
NETWORK_EVENTS = {
    "partition": ("partition", "heal"),
    "latency": ("latency", "heal"),
    "bandwidth": ("bandwidth", "heal"),
}


# --------------------------------------------------------------------------------------- client

#: what a request with ``missing_ok`` returns when the proxy or toxic does not exist
MISSING = object()


class ToxiproxyError(Exception):
    """The Toxiproxy API refused a request or could not be reached."""

    def __init__(self, method: str, path: str, status: int | None, message: str) -> None:
        self.status = status
        where = f"HTTP {status}" if status is not None else "unreachable"
        super().__init__(f"toxiproxy {method} {path}: {where}: {message}")


class ToxiproxyClient:
    """A minimal Toxiproxy HTTP API client: one per server, any number per process."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        # the API is on loopback: never route it through an http_proxy from the environment
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, missing_ok: bool = False) -> Any:
        """One API request; its decoded JSON (None for an empty reply; MISSING for a 404 when ``missing_ok``)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as e:
            if e.code == 404 and missing_ok:
                return MISSING
            raise ToxiproxyError(method, path, e.code, _error_text(e.read())) from None
        except OSError as e:  # URLError, refused, timed out
            raise ToxiproxyError(method, path, None, str(getattr(e, "reason", e))) from None
        return json.loads(raw) if raw.strip() else None

    def version(self) -> str:
        reply = self._call("GET", "/version")
        return str(reply["version"]) if isinstance(reply, dict) else str(reply)

    def proxies(self) -> dict[str, dict[str, Any]]:
        """Every proxy by name, each with ``listen``, ``upstream``, ``enabled`` and ``toxics``."""
        return self._call("GET", "/proxies") or {}

    def create_proxy(self, name: str, listen: str, upstream: str) -> dict[str, Any]:
        """A new, enabled proxy; the reply's ``listen`` is the address it actually bound."""
        return self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})

    def set_enabled(self, name: str, enabled: bool) -> dict[str, Any]:
        """Disable (close listener and connections) or re-enable (listen again on the same address)."""
        return self._call("PATCH", f"/proxies/{_quote(name)}", {"enabled": enabled})

    def delete_proxy(self, name: str) -> bool:
        """Delete a proxy (closing its listener and connections); False if it was already gone."""
        return self._call("DELETE", f"/proxies/{_quote(name)}", missing_ok=True) is not MISSING

    def add_toxic(self, proxy: str, name: str, kind: str, stream: str, attributes: dict[str, Any]) -> dict[str, Any]:
        body = {"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}
        return self._call("POST", f"/proxies/{_quote(proxy)}/toxics", body)

    def remove_toxic(self, proxy: str, name: str) -> bool:
        """Remove one toxic; False if it (or its proxy) was already gone (e.g. after a reset)."""
        return self._call("DELETE", f"/proxies/{_quote(proxy)}/toxics/{_quote(name)}", missing_ok=True) is not MISSING

    def reset(self) -> None:
        """Enable every proxy and remove every toxic (stops at the first proxy that cannot listen)."""
        self._call("POST", "/reset")


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _error_text(raw: bytes) -> str:
    """The ``error`` of a Toxiproxy error reply, or the reply itself."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        return str(json.loads(text)["error"])
    except (ValueError, KeyError, TypeError):
        return text or "(empty reply)"


# ------------------------------------------------------------------------------ store addresses

#: default ports of the stores the runner starts, for URLs that leave the port out
DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379}


def store_endpoint(url: str) -> tuple[str, int]:
    """The TCP (host, port) a ``postgresql://``, ``redis://`` URL or a libpq ``key=value`` DSN connects to.

    Raises ValueError for what a TCP proxy cannot stand in front of: a unix
    socket, several hosts, a file path.
    """
    if "://" not in url:
        return _dsn_endpoint(url)
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"cannot proxy {scheme}:// addresses (only {', '.join(sorted(DEFAULT_PORTS))})")
    query_host = urllib.parse.parse_qs(parts.query).get("host")
    if query_host or not parts.hostname or "," in parts.netloc:
        raise ValueError(f"cannot proxy {url!r}: it needs exactly one TCP host in the address")
    return parts.hostname, parts.port or DEFAULT_PORTS[scheme]


def with_endpoint(url: str, host: str, port: int) -> str:
    """``url`` (or ``key=value`` DSN) pointed at ``host:port`` instead; user, database and options kept."""
    store_endpoint(url)  # the same refusals
    if "://" not in url:
        fields = {**_dsn_fields(url), "host": host, "port": str(port)}
        fields.pop("hostaddr", None)  # libpq would prefer it over host
        return " ".join(f"{key}={_dsn_quote(value)}" for key, value in fields.items())
    parts = urllib.parse.urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}@{hostport}" if userinfo else hostport))


_DSN_FIELD = re.compile(r"\s*(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")


def _dsn_fields(dsn: str) -> dict[str, str]:
    """A libpq ``key=value`` connection string as a dict (quotes and backslash escapes undone)."""
    fields: dict[str, str] = {}
    position = 0
    while position < len(dsn.rstrip()):
        match = _DSN_FIELD.match(dsn, position)
        if match is None:
            raise ValueError(f"cannot parse the connection string {dsn!r} at {dsn[position:]!r}")
        value = match.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        fields[match.group(1)] = value
        position = match.end()
    return fields


def _dsn_quote(value: str) -> str:
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _dsn_endpoint(dsn: str) -> tuple[str, int]:
    fields = _dsn_fields(dsn)
    host = fields.get("hostaddr") or fields.get("host") or ""
    if not host or host.startswith("/") or "," in host:
        raise ValueError(f"cannot proxy {dsn!r}: it needs exactly one TCP host (host=...)")
    return host, int(fields.get("port") or DEFAULT_PORTS["postgresql"])


# --------------------------------------------------------------------------------------- proxies


def quiet_port(rng: random.Random | None = None, attempts: int = 200) -> int:
    """A free loopback port *below* the kernel's ephemeral range.

    A "cut" closes a proxy's listener until the heal listens on the same port
    again. Were that port in the ephemeral range, a client's outgoing
    connection could take it as its source port meanwhile — on loopback a
    client retrying a closed port can even connect to itself — and the heal
    would fail with "address already in use". Ports below the range are never
    handed out that way (Toxiproxy's FAQ gives the same advice).
    """
    rng = rng or random.Random()
    low = _ephemeral_low()
    for _ in range(attempts):
        port = rng.randrange(10000, low) if low > 10001 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError(f"no free loopback port between 10000 and {low}")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


@dataclass(frozen=True)
class Proxy:
    """One worker's proxy: where the worker connects (``host:port``) and where it forwards to."""

    key: WorkerKey
    name: str
    host: str
    port: int
    upstream: str


class Network:
    """The proxies in front of the store, one per worker, and the toxics on them.

    Safe to use from the runner's thread (creating proxies as workers start)
    and the nemesis thread (faults) at once.
    """

    def __init__(self, api: ToxiproxyClient | str, prefix: str = "leasecheck", host: str = "127.0.0.1") -> None:
        self.api = api if isinstance(api, ToxiproxyClient) else ToxiproxyClient(api)
        self.prefix = prefix
        self.host = host
        self._proxies: dict[WorkerKey, Proxy] = {}
        self._cuts: dict[WorkerKey, int] = {}
        self._serial = itertools.count(1)
        self._lock = threading.RLock()

    # -- proxies ---------------------------------------------------------------------------------

    def proxy_for(self, worker_key: WorkerKey, upstream_host: str, upstream_port: int) -> tuple[str, int]:
        """The (host, port) ``worker_key`` connects to so that its traffic to the store passes its own proxy."""
        upstream = f"{upstream_host}:{upstream_port}"
        with self._lock:
            known = self._proxies.get(worker_key)
            if known is not None and known.upstream == upstream:
                return known.host, known.port
            if known is not None:
                self.remove(worker_key)
            proxy = self._create(worker_key, upstream)
            self._proxies[worker_key] = proxy
            return proxy.host, proxy.port

    def route(self, worker_key: WorkerKey, url: str) -> str:
        """``url`` (a store's DSN / URL) rewritten to reach the store through ``worker_key``'s proxy."""
        host, port = self.proxy_for(worker_key, *store_endpoint(url))
        return with_endpoint(url, host, port)

    def _create(self, worker_key: WorkerKey, upstream: str, attempts: int = 20) -> Proxy:
        """Create the proxy on a quiet port (another port if that one was taken meanwhile)."""
        name = self.proxy_name(worker_key)
        self.api.delete_proxy(name)  # a leftover of an earlier Network on this server
        error: ToxiproxyError | None = None
        for _ in range(attempts):
            try:
                reply = self.api.create_proxy(name, f"{self.host}:{quiet_port()}", upstream)
            except ToxiproxyError as e:  # the port was taken between our probe and its bind
                error = e
                continue
            host, _, port = str(reply["listen"]).rpartition(":")
            return Proxy(worker_key, name, host.strip("[]"), int(port), upstream)
        raise error or ToxiproxyError("POST", "/proxies", None, "could not create a proxy")

    def proxy_name(self, worker_key: WorkerKey) -> str:
        return f"{self.prefix}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", str(worker_key))

    def proxy(self, worker_key: WorkerKey) -> Proxy:
        with self._lock:
            return self._proxies[worker_key]

    def keys(self) -> list[WorkerKey]:
        """Every worker with a proxy, in creation order."""
        with self._lock:
            return list(self._proxies)

    def remove(self, worker_key: WorkerKey) -> None:
        """Delete a worker's proxy (a worker gone for good); its connections close."""
        with self._lock:
            proxy = self._proxies.pop(worker_key, None)
            self._cuts.pop(worker_key, None)
        if proxy is not None:
            self.api.delete_proxy(proxy.name)

    def close(self) -> None:
        """Delete every proxy this Network made (the server itself is its owner's to stop)."""
        for key in self.keys():
            self.remove(key)

    # -- what faults do ----------------------------------------------------------------------------

    def add_toxic(self, worker_key: WorkerKey, fault: str, kind: str, stream: str, attributes: dict[str, Any]) -> str:
        """Add one toxic to ``worker_key``'s proxy; its name, unique on this Network, for the heal."""
        name = f"lc-{fault}-{next(self._serial)}-{stream}"
        self.api.add_toxic(self.proxy(worker_key).name, name, kind, stream, attributes)
        return name

    def remove_toxic(self, worker_key: WorkerKey, name: str) -> bool:
        """Remove a toxic this Network added; False if it was gone already."""
        return self.api.remove_toxic(self.proxy_name(worker_key), name)

    def cut(self, worker_key: WorkerKey) -> None:
        """Disable the worker's proxy; cuts nest, the last :meth:`uncut` re-enables it."""
        with self._lock:
            self._cuts[worker_key] = self._cuts.get(worker_key, 0) + 1
            if self._cuts[worker_key] == 1:
                self.api.set_enabled(self.proxy(worker_key).name, False)

    def uncut(self, worker_key: WorkerKey) -> None:
        with self._lock:
            left = max(0, self._cuts.get(worker_key, 0) - 1)
            self._cuts[worker_key] = left
            if left == 0 and worker_key in self._proxies:
                self.api.set_enabled(self._proxies[worker_key].name, True)

    def heal_everything(self) -> dict[str, int]:
        """Remove every toxic and enable every proxy on the server, then check that it is so.

        The runner's last word after ``Nemesis.heal_all()``: it needs nothing
        but the API (a Network made afresh from the URL does it too), and it
        clears what any other client of the server left. Returns what it
        undid; raises ToxiproxyError if anything is still faulty afterwards.
        """
        with self._lock:
            before = self.api.proxies()
            with contextlib.suppress(ToxiproxyError):  # a proxy that cannot listen stops the reset...
                self.api.reset()
            for name, proxy in self.api.proxies().items():  # ...so finish proxy by proxy
                for toxic in proxy.get("toxics") or []:
                    self.api.remove_toxic(name, toxic["name"])
                if not proxy.get("enabled"):
                    self.api.set_enabled(name, True)
            self._cuts.clear()
            left = _faulty(self.api.proxies())
            if left:
                raise ToxiproxyError("POST", "/reset", None, f"still faulty after healing: {', '.join(left)}")
        return {
            "toxics_removed": sum(len(p.get("toxics") or []) for p in before.values()),
            "proxies_enabled": sum(1 for p in before.values() if not p.get("enabled")),
        }


def _faulty(proxies: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(name for name, p in proxies.items() if p.get("toxics") or not p.get("enabled"))


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


# ---------------------------------------------------------------------------------------- faults


@dataclass
class _NetworkFault:
    """A fault made of toxics on some workers' proxies; ``victims=None`` means every proxy there is.

    ``start`` undoes its own partial work if the API fails midway (the
    Nemesis only heals faults whose start succeeded), and ``heal`` removes
    exactly the toxics ``start`` added, by name.
    """

    network: Network
    victims: Sequence[WorkerKey] | None
    name: str = field(default="", init=False)
    _hit: list[WorkerKey] = field(default_factory=list, init=False, repr=False)
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


# ------------------------------------------------------------------------------------ scheduling


def choose_victims(keys: Sequence[WorkerKey], rng: random.Random) -> list[WorkerKey] | None:
    """One worker, a minority, or (None) everyone: each a third of the time, from the seed."""
    scope = rng.choice(("one", "minority", "all"))
    if scope == "all" or len(keys) <= 1:
        return None if scope == "all" else list(keys)
    if scope == "one":
        return [rng.choice(list(keys))]
    return rng.sample(list(keys), max(1, (len(keys) - 1) // 2))


def make_network_fault(kind: str, network: Network, rng: random.Random, ttl_ms: int) -> Fault | None:
    """A seeded network fault of ``kind`` (a NETWORK_EVENTS key); None while no worker has a proxy.

    Sizes follow the lease: latency up to one ttl (a renew that arrives after
    its lease ran out), bandwidth low enough that a statement takes a good
    fraction of a second.
    """
    keys = network.keys()
    if not keys:
        return None
    victims = choose_victims(keys, rng)
    if kind == "partition":
        return Partition(network, victims, mode=rng.choice(("hang", "cut")))
    if kind == "latency":
        latency = max(1, round(rng.uniform(0.2, 1.0) * ttl_ms))
        return Latency(network, victims, latency_ms=latency, jitter_ms=latency // 4)
    if kind == "bandwidth":
        return Bandwidth(network, victims, rate_kb=rng.choice((1, 4, 16)))
    raise ValueError(f"unknown network fault {kind!r} (known: {', '.join(NETWORK_EVENTS)})")
