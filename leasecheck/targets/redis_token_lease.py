"""The reference *unfenced* lease on Redis: a random token per claim instead of an epoch.

Many real lock libraries (Redis ``SET NX PX`` locks and their relatives) hand
out no fencing token: a lease is named by an opaque random value, and the
store checks that value on every later operation. This backend is the correct
version of that design, so that leasecheck's unfenced checks (grant order,
tokens naming the lease) and its conformance scenarios have a reference that
must pass them, exactly as the fenced references do for epochs.

Every operation is one Lua script (Redis runs a script atomically: it is this
backend's transaction), built on :class:`leasecheck.targets.redis_lease.RedisScripts`,
which it shares with the fenced reference (client, script loading, error
mapping, the server clock). Per node two keys share the hash tag ``{node}``:
``state`` (a hash: status, token, owner, attempt, expires_ms, result) and
``effects`` (the protected resource: the log of accepted effects, in the
order they were accepted, read back as ``read-resource`` with no fence). The claim
stores a fresh random token; renew, effect, commit and release each run only
when their token is the node's current holder *and* the lease is unexpired by
the server's clock (``TIME`` inside the script). The resource is coupled to the
lease: an effect is written only while its token holds the lease, so a claim
fences off every older holder at once, with no epoch to compare.

A token that is not the holder's is refused ``stale`` (a later claim replaced
it: tokens are never reused, so a token that once held the node and no longer
does was superseded); the holder's own token is refused ``terminal`` after its
commit, ``not-owner`` after its release and ``expired`` once its lease ran out.
Unlike the fenced reference, an expired lease cannot be released either: every
operation on a lease needs it unexpired.

Reads return the status, the owner (unless READY), the result and the token of
the latest lease, never an epoch (``"epoch": null``, as docs/contracts/history-format.md says an
unfenced backend reports).

The rules are class attributes (``CLAIM_GUARD``, ``HELD``, ``RELEASE_GUARD``,
``RENEWED_EXPIRY``), as in the fenced reference, so a deliberately broken
variant differs by the one rule it gets wrong.
"""

from __future__ import annotations

import json
import secrets
from string import Template
from typing import ClassVar

from leasecheck.histories.vocabulary import READY
from leasecheck.targets.base import Accepted, Lease, NodeState, Outcome, Refused, ResourceState
from leasecheck.targets.redis_lease import CLAIMABLE, NOW_MS, RedisScripts

#: helpers every script starts with; KEYS are always state, effects
TOKEN_PRELUDE = NOW_MS + r"""
-- why an operation was refused; token is nil for a claim
local function refusal(status, holder, token)
  if not status then return {'error', 'no such node (no key ' .. KEYS[1] .. ')'} end
  if token == nil then
    if status == 'SUCCEEDED' then return {'terminal'} end
    return {'held'}
  end
  if not holder then return {'not-owner', 'no lease was ever granted on this node'} end
  if holder ~= token then return {'stale', 'token ' .. token .. ' is not the current holder'} end
  if status == 'SUCCEEDED' then return {'terminal'} end
  if status ~= 'RUNNING' then return {'not-owner', 'the lease was released'} end
  return {'expired'}
end

-- the node's record as the guards see it; token is ARGV[1] for every op on a lease
local row = redis.call('HMGET', KEYS[1], 'status', 'token', 'expires_ms')
local status, holder, expires = row[1], row[2], tonumber(row[3])
local now = now_ms()
"""

ADD_NODE = r"""
if not status then redis.call('HSET', KEYS[1], 'status', 'READY', 'attempt', 0) end
return {'ok'}
"""

# ARGV: owner, ttl_ms, token
CLAIM = Template(r"""
if not status or not ($claim_guard) then return refusal(status, holder, nil) end
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'token', ARGV[3], 'owner', ARGV[1], 'expires_ms', now + tonumber(ARGV[2]))
redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HDEL', KEYS[1], 'result')
return {'ok'}
""")

# ARGV: token, ttl_ms
RENEW = Template(r"""
local token = ARGV[1]
if not status or not ($held) then return refusal(status, holder, token) end
redis.call('HSET', KEYS[1], 'expires_ms', $renewed_expiry)
return {'ok'}
""")

# ARGV: token, result
COMMIT = Template(r"""
local token = ARGV[1]
if not status or not ($held) then return refusal(status, holder, token) end
redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'result', ARGV[2])
redis.call('HDEL', KEYS[1], 'expires_ms')
return {'ok'}
""")

# ARGV: token; the token stays, so the released lease's later ops are told not-owner
RELEASE = Template(r"""
local token = ARGV[1]
if not status or not ($release_guard) then return refusal(status, holder, token) end
redis.call('HSET', KEYS[1], 'status', 'READY')
redis.call('HDEL', KEYS[1], 'owner', 'expires_ms')
return {'ok'}
""")

# ARGV: token, payload; the resource is coupled to the lease: only the live holder writes
EFFECT = Template(r"""
local token = ARGV[1]
if not status or not ($held) then return refusal(status, holder, token) end
redis.call('RPUSH', KEYS[2], cjson.encode({token = token, payload = ARGV[2]}))
return {'ok'}
""")

READ = r"""
return redis.call('HMGET', KEYS[1], 'status', 'owner', 'result', 'token')
"""

# the protected resource: no fence of its own (the lease guards it), the log in the order it was accepted
READ_RESOURCE = r"""
return redis.call('LRANGE', KEYS[2], 0, -1)
"""


class RedisTokenLease(RedisScripts):
    """Reference unfenced lease on Redis (a random token per claim, one Lua script per operation, server-clock expiry)."""

    name = "redis-token"
    fenced = False

    PRELUDE = TOKEN_PRELUDE
    KEY_PARTS = ("state", "effects")
    #: its own key space: a fenced and an unfenced backend on one server never read each other's nodes
    DEFAULT_PREFIX = "lct"

    #: Lua: may this claim take the node? Only a free node or an expired lease.
    CLAIM_GUARD: ClassVar[str] = CLAIMABLE
    #: Lua: is ``token`` the node's current, unexpired holder? Guards renew, effect and commit.
    HELD: ClassVar[str] = "status == 'RUNNING' and holder == token and expires > now"
    #: Lua: may this release give the node back? Only the current, unexpired holder.
    RELEASE_GUARD: ClassVar[str] = HELD
    #: Lua: the lease's new expiry after a heartbeat: one ttl from the server's now.
    RENEWED_EXPIRY: ClassVar[str] = "now + tonumber(ARGV[2])"

    @classmethod
    def lua_bodies(cls) -> dict[str, str]:
        """Each operation's script body, with this class's rules filled in."""
        return {
            "add_node": ADD_NODE,
            "claim": CLAIM.substitute(claim_guard=cls.CLAIM_GUARD),
            "renew": RENEW.substitute(held=cls.HELD, renewed_expiry=cls.RENEWED_EXPIRY),
            "commit": COMMIT.substitute(held=cls.HELD),
            "release": RELEASE.substitute(release_guard=cls.RELEASE_GUARD),
            "effect": EFFECT.substitute(held=cls.HELD),
            "read": READ,
            "read_resource": READ_RESOURCE,
        }

    @staticmethod
    def new_token() -> str:
        """A fresh token: 128 random bits, so no two claims anywhere ever share one."""
        return secrets.token_hex(16)

    @staticmethod
    def _token(lease: Lease) -> str:
        if lease.token is None:
            raise ValueError(f"a lease of the unfenced redis-token backend must carry its token: {lease}")
        return lease.token

    def add_node(self, node: str) -> None:
        self._run("add_node", node)

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        token = self.new_token()
        reply = self._run("claim", node, owner, self.ttl_ms, token)
        return Lease(node, owner, None, token) if reply[0] == "ok" else self._refused(reply)

    def renew(self, lease: Lease) -> Outcome:
        return self._outcome(self._run("renew", lease.node, self._token(lease), self.ttl_ms))

    def commit(self, lease: Lease, result: str) -> Outcome:
        return self._outcome(self._run("commit", lease.node, self._token(lease), result))

    def release(self, lease: Lease) -> Outcome:
        return self._outcome(self._run("release", lease.node, self._token(lease)))

    def effect(self, lease: Lease, payload: str) -> Outcome:
        return self._outcome(self._run("effect", lease.node, self._token(lease), payload))

    def read(self, node: str) -> NodeState:
        status, owner, result, token = self._run("read", node)
        if status is None:
            return NodeState(READY, None)
        return NodeState(status, None, owner if status != READY else None, result, token)

    def read_resource(self, node: str) -> ResourceState:
        """The effects list, by one script: each entry names its lease by token; no fence (``null``), the lease is it."""
        entries = [json.loads(entry) for entry in self._run("read_resource", node)]
        return ResourceState(tuple(Accepted(None, e["payload"], e["token"]) for e in entries), None)
