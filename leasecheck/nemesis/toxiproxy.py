"""A minimal client of Toxiproxy's HTTP API: one per server, any number per process.

Why not ``toxiproxy-python`` (the design suggests it, docs/extending.md; 0.1.1 was evaluated):
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
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

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
