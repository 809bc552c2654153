"""The proxies in front of the store, one per worker, so a network fault can hit one worker, a minority or all.

Every worker reaches the store through its own Toxiproxy proxy
(:meth:`Network.proxy_for`): the seed's partitioned worker whose lease runs out
while it still believes it holds it is one proxy with a toxic on it. This
module deals in ``host:port`` endpoints only; rewriting a store's URL to a
proxy is the runner's business (:mod:`leasecheck.targets.urls`).
:meth:`Network.heal_everything` clears the whole server (the runner's last
step of heal-all, after every fault's own heal).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import re
import socket
import threading
from dataclasses import dataclass
from typing import Any

from leasecheck.nemesis.toxiproxy import ToxiproxyClient, ToxiproxyError

#: who a proxy belongs to: the runner's worker key (its slot), or a name in tests
WorkerKey = int | str


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
