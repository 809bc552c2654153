"""Where a Redis client of leasecheck connects, and how: one server, or the primary a Sentinel deployment names.

Apart from :mod:`leasecheck.targets.redis_lease` because every Redis adapter
(the reference leases, the lock libraries' records) connects the same way,
with the same timeouts and no client-side retries.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leasecheck.targets.urls import hosts_of

if TYPE_CHECKING:  # redis is imported where it is used: listing the backends must not load it
    import redis

#: our scheme for a Sentinel deployment: ``redis+sentinel://H1:P1,H2:P2/SERVICE[?wait=N]``
SENTINEL_SCHEME = "redis+sentinel"


@dataclass(frozen=True)
class RedisAddress:
    """Where a Redis client connects: one server (a ``redis://`` URL) or a Sentinel deployment, and ``?wait=N``.

    ``wait`` is ours, in either scheme: WAIT for N replicas after every write. It is taken
    out of the URL redis-py reads: a plain ``redis://`` URL reaches redis-py as before.
    """

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    wait: int = 0

    @classmethod
    def parse(cls, url: str) -> RedisAddress:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        wait = int(next((value for key, value in query if key == "wait"), 0))
        rest = urllib.parse.urlencode([(key, value) for key, value in query if key != "wait"])
        plain = urllib.parse.urlunsplit(parts._replace(query=rest)) if "wait" in dict(query) else url
        if parts.scheme.lower() != SENTINEL_SCHEME:
            return cls(plain, wait=wait)
        service = parts.path.strip("/")
        if not service:
            raise ValueError(f"{url!r}: a Sentinel address names its service: {SENTINEL_SCHEME}://HOST:PORT,.../SERVICE")
        return cls(plain, tuple(hosts_of(url)), service, wait)

    def connect(self, timeout_s: float) -> redis.Redis:
        """redis-py's client, as its docs say (``Sentinel(...).master_for(service)`` for a Sentinel deployment).

        Decoded replies, the same timeouts everywhere, no client-side retries (see
        the module docstring); RESP2 makes the pool check a pooled connection is alive.
        """
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
        from redis.sentinel import Sentinel

        common: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s, "retry": Retry(NoBackoff(), 0), "protocol": 2}
        if not self.sentinels:
            return redis.Redis.from_url(self.url, **common, decode_responses=True)
        # a paused Sentinel costs each discovery its timeout: a short one, so the next Sentinel is asked in time
        asking = {**common, "socket_timeout": min(timeout_s, 1.0), "socket_connect_timeout": min(timeout_s, 1.0)}
        sentinel = Sentinel(list(self.sentinels), sentinel_kwargs=asking, **common)
        return sentinel.master_for(self.service, **common, decode_responses=True)


def close_client(client: redis.Redis) -> None:
    """Close a client made by :meth:`RedisAddress.connect`, and its Sentinels' connections if it has any."""
    client.close()
    sentinels = getattr(client.connection_pool, "sentinel_manager", None)
    if sentinels is not None:
        sentinels.close()
