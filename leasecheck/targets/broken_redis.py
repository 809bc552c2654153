"""Deliberately broken Redis leases: real failure modes, to prove the checker catches them.

Each differs from :class:`leasecheck.targets.redis_lease.RedisLease` by the Lua rule it
gets wrong (a class attribute the scripts are assembled from), nothing else.
"""

from __future__ import annotations

from leasecheck.targets.redis_lease import RedisLease


class QueueAsAuthorityRedis(RedisLease):
    """BROKEN queue-as-authority: whoever got the message executes; the claim never checks for a live lease.

    The design that trusts the at-least-once queue to hand each unit to one
    worker: the claim only records the receiver (with a new epoch; it refuses
    nothing but a finished node), commits accept any holder's epoch, and
    effects go to the resource without a fence. A duplicate delivery gives two
    simultaneous owners: ``overlapping-lease`` and, when both finish,
    ``duplicate-commit`` (with stale commits and effects besides) under
    duplicate delivery.
    """

    name = "redis-queue-as-authority"
    bug = "the claim grants every delivery a lease, live lease or not; commits and effects are not fenced"
    expected = ("overlapping-lease", "duplicate-commit")
    exposed_by_workload = ("duplicate-delivery",)

    CLAIM_GUARD = "status ~= 'SUCCEEDED'"
    COMMIT_GUARD = "true"
    EFFECT_GUARD = "true"


class NoIncrementRedis(RedisLease):
    """BROKEN no-increment: a re-claim reuses the node's current epoch instead of drawing a new one.

    The counter is created by the first claim (INCR from nothing) and read,
    not incremented, by every later one, so the lease taken over from a paused
    or crashed owner carries the old owner's epoch, and the old owner's renews,
    commits and effects still pass every epoch check: ``duplicate-epoch``
    whenever a lease is taken over after it expired (a pause or kill of the
    owner past its ttl) or was released.
    """

    name = "redis-no-increment"
    bug = "a re-claim reuses the current epoch instead of incrementing it"
    expected = ("duplicate-epoch",)
    exposed_by = ("pause", "kill")

    NEXT_EPOCH = "tonumber(redis.call('GET', KEYS[2])) or redis.call('INCR', KEYS[2])"
