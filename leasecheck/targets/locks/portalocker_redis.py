"""portalocker's ``RedisLock``: a lock held by a pub/sub subscription, not by an expiring key.

As its module docstring describes: the holder subscribes to the lock's
channel and a daemon thread answers pings on it; an acquirer counts the
subscribers, pings them, and a subscriber that stays silent for
``unavailable_timeout`` seconds is taken for crashed and its connection is
killed, which releases its lock. There is no ttl and nothing to renew; the
holder learns of a loss only when its subscription thread sees the
connection die (``lock.lost``, ``ensure_held()``).

So the GC pause is the case that matters: a SIGSTOPped holder cannot answer,
the next acquirer reaps it after ``unavailable_timeout`` and takes the lock,
and the woken holder's code goes on writing until it next looks at
``lock.lost``. ``unavailable_timeout`` plays the ttl's part: the adapter sets
it to the run's ttl (1 s, the library's default, with the plan's 1000 ms), so a
holder that answered at its last heartbeat is never reaped sooner than a ttl
later, which is what the checker's ``overlapping-lease`` rule assumes. The
run's ttl is otherwise only the workload's pace. No clock is involved at all
(no clock fault is audited).

Acquiring is ``fail_when_locked=True`` with a ``timeout`` of two
``unavailable_timeout``: a live holder's answer refuses at once
(``AlreadyLocked``: ``held``), while a silent one's reaping makes the probe
inconclusive and the retry within the timeout takes the freed lock. With
``timeout=0`` the claim that reaps a dead holder would report ``held`` for a
lock nobody holds any more. ``interrupt_on_lost=False``: the worker must
never get a KeyboardInterrupt from the subscription thread (the 4.x default).

The flip side of "no ttl": a holder whose code stalls (the workload's own
stalls: slow work, no heartbeat) while its process runs keeps answering pings
and keeps the lock for as long as it likes. Against the protocol's "a lease
that is not renewed expires" that is ``stuck-lease``, and every plan here
publishes it: it is the library's design, not a fault's doing.

The fenced variant passes ``fencing=True`` and fences every write with
``lock.fence_token`` (an ``INCR`` drawn at each exclusive grant), conditional
in the store: the library's own advice for stale holders.
"""

from __future__ import annotations

from typing import ClassVar

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.base import Unavailable
from leasecheck.targets.locks.lockbase import Held
from leasecheck.targets.locks.redis_records import RedisLockLease, mapped_errors


class PortalockerRedisLock(RedisLockLease):
    """portalocker.RedisLock (a pub/sub subscription holds the lock, silent holders are reaped), unfenced, as documented."""

    renews_itself = True  # its own thread keeps the lock: the workload neither stalls nor writes late for it

    name = "portalocker-redis"
    store = "redis"
    fenced = False
    requires = ("redis", "portalocker")
    extra = "audit"
    #: "locking through Redis pubsub instead of expiring keys": held while the holder's subscription lives
    lease_expiry = "holder"

    audit: ClassVar[AuditPlan | None] = AuditPlan(
        library="portalocker",
        mode="documented",
        faults=(
            # stale-renew: lock.lost is the holder's own belief, and it may not have heard yet
            FaultAudit("pause", "invalid", ("stale-effect", "stale-commit", "duplicate-commit", "lost-commit", "stale-renew")),
        ),
        seeds=(3, 4, 5, 1),  # seed 2: invalid in 1 of 2 runs
        fix="A paused holder is reaped after unavailable_timeout (here the 1 s ttl) and learns it only later "
            "(lock.lost), and writes meanwhile: use fencing=True "
            "and have the resource refuse writes below lock.fence_token, and bound the work yourself.",
        # 20 s: the first proof came 3.5-11.6 s into the runs of these seeds; 12 s missed it once on a loaded CI machine
        time_limit=20.0,
        options={"ttl_ms": 1000, "nemesis_interval": 1.5, "dup_rate": 0.5,
                 "workload": {"stall_rate": 0.0, "late_rate": 0.0, "zombie_rate": 1.0}},
    )

    #: the records' key prefix and the channels' prefix: no other adapter reads these nodes
    PREFIX: ClassVar[str] = "lc-portalocker"

    def acquire(self, node: str, owner: str) -> Held | None:
        import portalocker
        from portalocker.exceptions import AlreadyLocked

        unavailable_s = self.ttl_ms / 1000
        lock = portalocker.RedisLock(
            f"{self.PREFIX}:{node}", connection=self.client, fail_when_locked=True, timeout=2 * unavailable_s,
            unavailable_timeout=unavailable_s, interrupt_on_lost=False, fencing=self.fenced,
        )
        with mapped_errors(self.client, "lock.acquire"):
            try:
                lock.acquire()
            except AlreadyLocked:
                self._check_reachable()
                return None
        return Held(lock, lock.holder_id, lock.fence_token if self.fenced else None)

    def _check_reachable(self) -> None:
        """Tell ``held`` from an unreachable store after ``AlreadyLocked``.

        portalocker counts a connection error as one failed attempt and gives up
        with ``AlreadyLocked`` too, having released what it set up. That is no
        ``held`` (nobody may hold the lock, and the checker would call a refusal
        long after the last heartbeat a ``stuck-lease``): it is a claim that never
        reached a holder, ``Unavailable``.
        """
        import redis

        try:
            self.client.ping()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise Unavailable(f"portalocker gave up (AlreadyLocked) while redis was unreachable: {e}") from None

    def extend(self, held: Held) -> bool:
        return not held.lock.lost

    def unlock(self, held: Held) -> None:
        with mapped_errors(self.client, "lock.release"):
            held.lock.release()


class FencedPortalockerRedisLock(PortalockerRedisLock):
    """portalocker.RedisLock with fencing=True: every write is conditional on lock.fence_token in the store."""

    name = "portalocker-redis-fenced"
    fenced = True

    audit: ClassVar[AuditPlan | None] = AuditPlan(
        library="portalocker",
        mode="fencing",
        faults=(
            FaultAudit("pause", "valid"),
        ),
        seeds=(1, 2, 3),
        fix="fence_token makes the resource refuse a reaped holder's writes: no stale write is left, under pause or "
            "a Redis restart. By design a live but stalled holder keeps the lock: bound the work yourself.",
        time_limit=12.0,
        options={"ttl_ms": 1000, "nemesis_interval": 1.5, "workload": {"stall_rate": 0.0, "late_rate": 0.0, "zombie_rate": 1.0}},
    )
