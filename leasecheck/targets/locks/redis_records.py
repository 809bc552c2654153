"""The jobs' records and protected resource in Redis, for the Redis lock libraries' adapters.

A user of a Redis lock keeps the job's state in the same Redis: that is what
this module is (:class:`RedisRecords`, the :class:`~.lockbase.Records` of
:mod:`.lockbase`). Per node two keys share the hash tag ``{node}``: ``record``
(a hash: status, owner, token, result, fence) and ``effects`` (the protected
resource: a list of accepted effects).

Unfenced (``fence=None``) writes are plain ``HSET``/``HDEL``/``RPUSH``: they
trust the lock, as the libraries' READMEs do. A fenced write is ONE Lua script
(Redis runs a script atomically): applied only if the record's stored fence is
not above the write's, raising it; an effect is guarded by the same fence,
so a claim's write to the record fences off every older holder's effects
(docs/contracts/anomaly-kinds.md's ``effect_fence: "lease"``).

Every adapter takes its own key ``prefix``, so two adapters on one server
never read each other's nodes. :func:`redis_client` and :func:`mapped_errors`
are shared with the adapters, so the lock library's own calls fail the same
way as the records': :class:`Unavailable` when no connection could be made
before anything was sent, :class:`Indeterminate` once something may have been.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from leasecheck.histories.vocabulary import READY
from leasecheck.targets.base import Indeterminate, TargetConfig, Unavailable
from leasecheck.targets.locks.lockbase import LockLease, Record, Records
from leasecheck.targets.redis_address import RedisAddress, close_client

if TYPE_CHECKING:  # redis is imported where it is used: listing the backends must not load it
    import redis
    from redis.typing import EncodableT

#: Lua, KEYS: record; ARGV: fence, changes (JSON, null removes a field). 1 if applied, 0 if a larger fence wrote.
FENCED_PUT = r"""
local fence = tonumber(ARGV[1])
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
if stored ~= nil and stored > fence then return 0 end
redis.call('HSET', KEYS[1], 'fence', fence)
for field, value in pairs(cjson.decode(ARGV[2])) do
  if value == cjson.null then redis.call('HDEL', KEYS[1], field) else redis.call('HSET', KEYS[1], field, value) end
end
return 1
"""

#: Lua, KEYS: record, effects; ARGV: fence, entry (JSON). The resource's fence is the record's.
FENCED_APPEND = r"""
local fence = tonumber(ARGV[1])
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence'))
if stored ~= nil and stored > fence then return 0 end
redis.call('HSET', KEYS[1], 'fence', fence)
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""


def redis_client(url: str, timeout_s: float) -> redis.Redis:
    """A client as the adapters use it: decoded replies, and no client-side retries.

    A retry of a command whose outcome is unknown (a ``SET NX`` that timed
    out) could turn a granted lock into a reported ``held``, so the adapters
    retry nothing; RESP2 makes the pool check a pooled connection is alive
    before handing it out. The reference lease's client exactly
    (:class:`~leasecheck.targets.redis_address.RedisAddress`): a
    ``redis+sentinel://`` URL gives redis-py's ``Sentinel(...).master_for``, as
    its docs say. ``?wait=N`` is not applied here: a lock library sends its own
    commands and WAITs for nothing, so on ``redis-sentinel-wait`` only the
    server's ``min-replicas-to-write`` guards its writes.
    """
    return RedisAddress.parse(url).connect(timeout_s)


@contextmanager
def mapped_errors(client: redis.Redis, what: str) -> Iterator[None]:
    """Run a block of commands on ``client`` with redis-py's transport errors mapped to the protocol's.

    A connection is taken from the pool first: failing there, nothing of
    ours reached the server (:class:`Unavailable`). Inside the block a
    connection or timeout error may come after the command was sent
    (:class:`Indeterminate`); LOADING refuses before running anything.
    READONLY (a demoted primary, which redis-py's Sentinel client raises as a
    ConnectionError) stays Indeterminate and NOREPLICAS an error (the runner's
    ``info``): a library call may send several commands, an earlier one applied.
    """
    import redis

    pool = client.connection_pool
    try:
        pool.release(pool.get_connection())
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise Unavailable(f"redis unreachable ({what}): {e}") from None
    try:
        yield
    except redis.BusyLoadingError as e:
        raise Unavailable(f"redis is loading its data ({what}): {e}") from None
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise Indeterminate(f"redis {what}: {e}") from None


class RedisRecords:
    """:class:`~.lockbase.Records` in Redis: a hash per node and a list of effects; fenced writes are one Lua script each."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self._put = client.register_script(FENCED_PUT)
        self._append = client.register_script(FENCED_APPEND)

    def keys(self, node: str) -> tuple[str, str]:
        """The node's record and effects keys, in one hash slot."""
        return f"{self.prefix}:{{{node}}}:record", f"{self.prefix}:{{{node}}}:effects"

    def setup(self) -> None:
        with mapped_errors(self.client, "setup"):
            for script in (self._put, self._append):
                self.client.script_load(script.script)

    def add_nodes(self, nodes: list[str]) -> None:
        with mapped_errors(self.client, "add_nodes"):
            pipe = self.client.pipeline(transaction=False)
            for node in nodes:
                pipe.hsetnx(self.keys(node)[0], "status", READY)
            pipe.execute()

    def get(self, node: str) -> Record | None:
        with mapped_errors(self.client, "get"):
            row: dict[str, str] = self.client.hgetall(self.keys(node)[0])  # type: ignore[assignment]
        if not row:
            return None
        fence = row.get("fence")
        return Record(row["status"], row.get("owner"), row.get("token"), row.get("result"),  # type: ignore[arg-type]
                      int(fence) if fence is not None else None)

    def put(self, node: str, changes: dict[str, Any], fence: int | None = None) -> bool:
        record = self.keys(node)[0]
        with mapped_errors(self.client, "put"):
            if fence is not None:
                return bool(self._put(keys=[record], args=[fence, json.dumps(changes)], client=self.client))
            pipe = self.client.pipeline(transaction=True)
            removed = [field for field, value in changes.items() if value is None]
            kept: dict[EncodableT, EncodableT] = {field: value for field, value in changes.items() if value is not None}
            if kept:
                pipe.hset(record, mapping=kept)
            if removed:
                pipe.hdel(record, *removed)
            pipe.execute()
            return True

    def append_effect(self, node: str, token: str, payload: str, fence: int | None = None) -> bool:
        record, effects = self.keys(node)
        entry = json.dumps({"token": token, "payload": payload, "fence": fence})
        with mapped_errors(self.client, "append_effect"):
            if fence is not None:
                return bool(self._append(keys=[record, effects], args=[fence, entry], client=self.client))
            self.client.rpush(effects, entry)
            return True

    def effects(self, node: str) -> list[dict[str, Any]]:
        """The resource's accepted effects, oldest first (RPUSH keeps the order they were accepted in)."""
        with mapped_errors(self.client, "effects"):
            entries: list[str] = self.client.lrange(self.keys(node)[1], 0, -1)  # type: ignore[assignment]
        return [json.loads(entry) for entry in entries]

    def resource(self, node: str) -> tuple[int | None, list[dict[str, Any]]]:
        """The record's fence and the effects list in one MULTI/EXEC (Redis runs it as one step)."""
        record, effects = self.keys(node)
        with mapped_errors(self.client, "resource"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hget(record, "fence")
            pipe.lrange(effects, 0, -1)
            fence, entries = pipe.execute()
        return (int(fence) if fence is not None else None), [json.loads(entry) for entry in entries]

    def close(self) -> None:
        close_client(self.client)


class RedisLockLease(LockLease):
    """A lock library on one Redis: the adapter's client (:func:`redis_client`) and its jobs' records under
    :attr:`PREFIX` (:class:`RedisRecords`), made once here for every such adapter; it writes only what its library
    does (``acquire``, ``extend``, ``unlock``)."""

    #: the records' key prefix (the locks' keys use it too): no other adapter reads these nodes
    PREFIX: ClassVar[str]

    def __init__(self, config: TargetConfig) -> None:
        self.client = redis_client(config.url, config.timeout_s)  # decoded replies, no retries of its own
        super().__init__(config)  # self.ttl_ms: the lock's length

    def make_records(self) -> Records:
        return RedisRecords(self.client, self.PREFIX)
