"""The reference fenced lease on Redis: every operation is one Lua script.

Redis runs a script atomically, so a script is this backend's transaction: the
claim reads the node and writes owner, attempt, expiry and the new epoch with
nothing in between, which is what makes two racing claims impossible to both
win. The semantics are exactly :mod:`leasecheck.targets.sqlite_lease`'s, rule for rule
and refusal for refusal.

Per node four keys (``lc:{node}:...``; the ``prefix`` option replaces ``lc``)
share one hash tag, ``{node}``, so a script touches only keys of one cluster
slot: ``state`` (a hash: status, epoch, owner, attempt, expires_ms, result),
``epoch`` (the counter INCR draws new epochs from, so they strictly increase
whoever claims), ``fence`` (the protected resource's largest granted or
accepted epoch) and ``effects`` (the log of accepted effects, a list in the
order they were accepted; both are read back by one script). A node name
containing ``}`` still keeps its keys together: the tag ends at the first
``}``, the same one in all four.

Lease expiry is judged by the server's clock (``TIME`` inside the script),
never a worker's: a worker whose clock a nemesis skews cannot stretch or cut
its own lease.

The scripts are assembled from a few Lua conditions held in class attributes
(``CLAIM_GUARD``, ``NEXT_EPOCH``, ``COMMIT_GUARD``, ``EFFECT_GUARD``), so a
deliberately broken variant (:mod:`leasecheck.targets.broken_redis`) differs from this
one by the one rule it gets wrong and nothing else.

The client, the script runner and the error mapping below live in
:class:`RedisScripts`, which every Redis backend of leasecheck subclasses (the
unfenced :mod:`leasecheck.targets.redis_token_lease` too), together with the
server clock ``NOW_MS`` its scripts judge expiry by.

Errors: a store that cannot be reached before the script is sent is
:class:`Unavailable`; a timeout or lost connection after it was sent is
:class:`Indeterminate` (the server may run it later: a paused server does, on
resume). Client-side retries are off, because retrying an operation whose
outcome is unknown could turn a granted claim into a reported ``held``.

A replicated store is reached as redis-py's docs say (:class:`RedisAddress`):
``redis+sentinel://H1:26379,H2:26379,H3:26379/SERVICE`` makes the client
``Sentinel(...).master_for(SERVICE)``, which asks the Sentinels for the primary
whenever it connects. A refusal before anything was written (no primary found,
READONLY from a demoted one, NOREPLICAS under ``min-replicas-to-write``) is
Unavailable; ``?wait=N`` follows every write with ``WAIT N``, and a write fewer
replicas acknowledged is Indeterminate (a failover may lose it).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from string import Template
from typing import TYPE_CHECKING, Any, ClassVar

from leasecheck.histories.vocabulary import READY
from leasecheck.targets.base import (
    Accepted,
    Indeterminate,
    Lease,
    NodeState,
    Outcome,
    Refused,
    ResourceState,
    Target,
    TargetConfig,
    Unavailable,
)
from leasecheck.targets.redis_address import RedisAddress, close_client

if TYPE_CHECKING:  # redis is imported where it is used: listing the backends must not load it
    from redis.commands.core import Script

#: Lua: the server's clock in milliseconds. Every Redis backend here judges expiry by
#: it (``TIME`` inside the script), never by a worker's clock, which a nemesis may skew.
NOW_MS = r"""
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""

#: helpers every script of the fenced lease starts with; KEYS are always state, epoch, fence, effects
FENCED_PRELUDE = NOW_MS + r"""
local function raise_fence(epoch)
  local fence = tonumber(redis.call('GET', KEYS[3]))
  if fence == nil or epoch > fence then redis.call('SET', KEYS[3], epoch) end
end

-- why an operation was refused (sqlite_lease._refusal); epoch is nil for a claim
local function refusal(status, current, epoch)
  if not status then return {'error', 'no such node (no key ' .. KEYS[1] .. ')'} end
  if epoch == nil then
    if status == 'SUCCEEDED' then return {'terminal'} end
    return {'held'}
  end
  if current ~= epoch then
    if current > epoch then return {'stale', 'epoch ' .. epoch .. ' < current ' .. current} end
    return {'error', 'unknown epoch ' .. epoch}
  end
  if status == 'SUCCEEDED' then return {'terminal'} end
  if status ~= 'RUNNING' then return {'not-owner', 'the lease was released'} end
  return {'expired'}
end

-- the node's record as the guards see it; epoch is ARGV[1] for every op on a lease
local row = redis.call('HMGET', KEYS[1], 'status', 'epoch', 'expires_ms')
local status, current, expires = row[1], tonumber(row[2]), tonumber(row[3])
local now = now_ms()
"""

ADD_NODE = r"""
if not status then redis.call('HSET', KEYS[1], 'status', 'READY', 'epoch', 0, 'attempt', 0) end
return {'ok'}
"""

# ARGV: owner, ttl_ms
CLAIM = Template(r"""
if not status or not ($claim_guard) then return refusal(status, current, nil) end
local epoch = $next_epoch
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'epoch', epoch, 'owner', ARGV[1], 'expires_ms', now + tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HDEL', KEYS[1], 'result')
raise_fence(epoch)
return {'ok', epoch}
""")

#: Lua: the current, unexpired holder of this epoch
HELD = "status == 'RUNNING' and current == epoch and expires > now"

# ARGV: epoch, ttl_ms
RENEW = Template(r"""
local epoch = tonumber(ARGV[1])
if not status or not ($held) then return refusal(status, current, epoch) end
redis.call('HSET', KEYS[1], 'expires_ms', now + tonumber(ARGV[2]))
return {'ok'}
""").substitute(held=HELD)

# ARGV: epoch, result
COMMIT = Template(r"""
local epoch = tonumber(ARGV[1])
if not status or not ($commit_guard) then return refusal(status, current, epoch) end
redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'result', ARGV[2])
redis.call('HDEL', KEYS[1], 'expires_ms')
return {'ok'}
""")

# ARGV: epoch; the holder may give back even an expired lease, as in sqlite_lease
RELEASE = r"""
local epoch = tonumber(ARGV[1])
if not (status == 'RUNNING' and current == epoch) then return refusal(status, current, epoch) end
redis.call('HSET', KEYS[1], 'status', 'READY')
redis.call('HDEL', KEYS[1], 'owner', 'expires_ms')
return {'ok'}
"""

# ARGV: epoch, payload; the protected resource does not need the node to exist
EFFECT = Template(r"""
local epoch = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[3])) or 0
if not ($effect_guard) then return {'stale', 'epoch ' .. epoch .. ' < fence ' .. fence} end
raise_fence(epoch)
redis.call('RPUSH', KEYS[4], cjson.encode({epoch = epoch, payload = ARGV[2]}))
return {'ok'}
""")

READ = r"""
return redis.call('HMGET', KEYS[1], 'status', 'epoch', 'owner', 'result')
"""

# the protected resource, fence and log in one script (one snapshot); no fence yet is 0: nothing refused
READ_RESOURCE = r"""
return {tonumber(redis.call('GET', KEYS[3])) or 0, redis.call('LRANGE', KEYS[4], 0, -1)}
"""


#: error replies that refuse a script before it writes anything (Redis checks both before a script's first write)
REFUSALS = ("NOREPLICAS", "READONLY")
#: the claim guard of both reference Redis backends (fenced and token): a node never granted, or whose lease expired
CLAIMABLE = "status == 'READY' or (status == 'RUNNING' and expires <= now)"
class RedisScripts(Target):
    """What every Redis backend here shares: a client, one Lua script per operation, and the error mapping.

    A subclass names its scripts (:meth:`lua_bodies`, each prefixed with
    ``PRELUDE``) and its per-node keys (``KEY_PARTS``); this class connects,
    loads the scripts and runs them, turning transport failures into
    :class:`Unavailable` / :class:`Indeterminate` the same way for every
    backend, so a fix to that mapping reaches all of them.
    """

    store = "redis"
    requires = ("redis",)
    extra = "redis"

    #: Lua every script of the backend starts with
    PRELUDE: ClassVar[str] = NOW_MS
    #: the node's keys, in the order the scripts expect them as KEYS[1], KEYS[2], ...
    KEY_PARTS: ClassVar[tuple[str, ...]] = ("state",)
    #: what the node's keys start with, unless the ``prefix`` option says otherwise
    DEFAULT_PREFIX: ClassVar[str] = "lc"
    #: the operations that write nothing (no WAIT after them)
    READ_OPS: ClassVar[frozenset[str]] = frozenset({"read", "read_resource"})

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        self.prefix: str = config.options.get("prefix", self.DEFAULT_PREFIX)
        self.address = RedisAddress.parse(config.url)
        self.client = self.address.connect(config.timeout_s)
        #: WAIT's timeout (ms): within the socket's, so a slow WAIT answers before the client gives up
        self.wait_ms = max(1, int(min(self.ttl_ms, config.timeout_s * 500)))
        self.scripts: dict[str, Script] = {name: self.client.register_script(self.PRELUDE + body) for name, body in self.lua_bodies().items()}

    @classmethod
    @abstractmethod
    def lua_bodies(cls) -> dict[str, str]:
        """Each operation's script body (without the prelude), by operation name."""

    def keys(self, node: str) -> list[str]:
        """The node's keys, in the order the scripts expect, all in the node's hash slot."""
        return [f"{self.prefix}:{{{node}}}:{part}" for part in self.KEY_PARTS]

    def _connected(self) -> None:
        """Make sure the pool holds a live connection before anything is sent.

        Taking one from the pool connects it (or replaces one the server
        closed, e.g. after a restart); a failure here means nothing of ours
        reached the server.
        """
        import redis

        pool = self.client.connection_pool
        try:
            pool.release(pool.get_connection())
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise Unavailable(f"redis unreachable: {e}") from None

    def _run(self, op: str, node: str, *args: Any) -> Any:
        """Run one operation's script; map transport failures to Unavailable / Indeterminate.

        Refused before running anything, hence :class:`Unavailable`: LOADING,
        READONLY (a demoted primary: redis-py's Sentinel client turns it into a
        ConnectionError and reconnects), NOREPLICAS (``min-replicas-to-write``:
        Redis checks it before a script's first write). Any other server error
        propagates: it is a bug in this adapter or the server's configuration,
        and the runner records it as ``info``. With ``?wait=N`` a write that
        fewer than N replicas acknowledged is :class:`Indeterminate`: it is on
        the primary, and a failover may lose it.
        """
        import redis

        self._connected()
        try:
            if self.address.wait and op not in self.READ_OPS:
                return self._run_and_wait(op, node, args)
            return self.scripts[op](keys=self.keys(node), args=args, client=self.client)
        except redis.BusyLoadingError as e:
            raise Unavailable(f"redis is loading its data: {e}") from None
        except redis.ResponseError as e:
            if str(e).startswith(REFUSALS):
                raise Unavailable(f"redis {op} refused: {e}") from None
            raise
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if isinstance(e.__context__, redis.ReadOnlyError):
                raise Unavailable(f"redis {op} refused: {e.__context__} ({e})") from None
            raise Indeterminate(f"redis {op}: {e}") from None

    def _run_and_wait(self, op: str, node: str, args: tuple[Any, ...]) -> Any:
        """The script, then ``WAIT N`` on the same connection (one pipeline); fewer acknowledgements: Indeterminate."""
        pipe = self.client.pipeline(transaction=False)
        self.scripts[op](keys=self.keys(node), args=args, client=pipe)
        pipe.wait(self.address.wait, self.wait_ms)
        reply, acked = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception) or acked < self.address.wait:
            raise Indeterminate(f"redis {op}: {reply!r} on the primary, but acknowledged by {acked!r} of the "
                                f"{self.address.wait} replicas WAIT asked for within {self.wait_ms} ms (a failover may lose it)")
        return reply

    @staticmethod
    def _refused(reply: list[Any]) -> Refused:
        """A script's refusal ``{reason[, message]}`` as the protocol's Refused."""
        return Refused(reply[0], reply[1] if len(reply) > 1 else "")

    def _outcome(self, reply: list[Any]) -> Outcome:
        return None if reply[0] == "ok" else self._refused(reply)

    def setup(self) -> None:
        """Load the scripts now, so the first operations need no extra round trip."""
        import redis

        self._connected()
        try:
            for script in self.scripts.values():
                self.client.script_load(script.script)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise Unavailable(f"redis setup: {e}") from None

    def close(self) -> None:
        close_client(self.client)


class RedisLease(RedisScripts):
    """Reference fenced lease on Redis (one Lua script per operation, INCR epochs, server-clock expiry)."""

    name = "redis"
    fenced = True

    PRELUDE = FENCED_PRELUDE
    KEY_PARTS = ("state", "epoch", "fence", "effects")

    #: Lua: may this claim take the node? Only a free node or an expired lease.
    CLAIM_GUARD: ClassVar[str] = CLAIMABLE
    #: Lua: the new lease's epoch, strictly larger than every earlier one.
    NEXT_EPOCH: ClassVar[str] = "redis.call('INCR', KEYS[2])"
    #: Lua: may this commit complete the node? Only the current, unexpired holder.
    COMMIT_GUARD: ClassVar[str] = HELD
    #: Lua: does the protected resource accept this effect? Only at or above its fence.
    EFFECT_GUARD: ClassVar[str] = "epoch >= fence"

    @classmethod
    def lua_bodies(cls) -> dict[str, str]:
        """Each operation's script body, with this class's rules filled in."""
        return {
            "add_node": ADD_NODE,
            "claim": CLAIM.substitute(claim_guard=cls.CLAIM_GUARD, next_epoch=cls.NEXT_EPOCH),
            "renew": RENEW,
            "commit": COMMIT.substitute(commit_guard=cls.COMMIT_GUARD),
            "release": RELEASE,
            "effect": EFFECT.substitute(effect_guard=cls.EFFECT_GUARD),
            "read": READ,
            "read_resource": READ_RESOURCE,
        }

    def add_node(self, node: str) -> None:
        self._run("add_node", node)

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        reply = self._run("claim", node, owner, self.ttl_ms)
        return Lease(node, owner, int(reply[1])) if reply[0] == "ok" else self._refused(reply)

    def renew(self, lease: Lease) -> Outcome:
        return self._outcome(self._run("renew", lease.node, lease.epoch, self.ttl_ms))

    def commit(self, lease: Lease, result: str) -> Outcome:
        return self._outcome(self._run("commit", lease.node, lease.epoch, result))

    def release(self, lease: Lease) -> Outcome:
        return self._outcome(self._run("release", lease.node, lease.epoch))

    def effect(self, lease: Lease, payload: str) -> Outcome:
        return self._outcome(self._run("effect", lease.node, lease.epoch, payload))

    def read(self, node: str) -> NodeState:
        status, epoch, owner, result = self._run("read", node)
        if status is None:
            return NodeState(READY, 0)
        return NodeState(status, int(epoch), owner if status != READY else None, result)

    def read_resource(self, node: str) -> ResourceState:
        """The fence and the effects list (RPUSH: in the order the script accepted them), read by one script."""
        fence, log = self._run("read_resource", node)
        entries = [json.loads(entry) for entry in log]
        return ResourceState(tuple(Accepted(int(e["epoch"]), e["payload"]) for e in entries), int(fence))
