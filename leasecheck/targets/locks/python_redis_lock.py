"""python-redis-lock (``redis_lock.Lock``) with ``auto_renewal=True``, as its README's Troubleshooting section shows.

The lock is ``SET lock:<name> <id> NX EX expire``: Redis expires it by its own
clock (so no clock fault is audited), and with ``auto_renewal`` a daemon
thread of the holder's process re-extends it every ``expire * 2/3`` seconds
"to ensure the lock is held for as long as the Python process is running".
A stall of the worker's own code therefore never loses the lock (other
claims are refused ``held`` for as long as it lasts, heartbeat or not): the
lock is held while its holder's process runs, ``lease_expiry = "holder"``, so
the ttl-defined kinds do not judge it. A SIGSTOP
(the GC pause, or a VM / container freeze) stops that thread too, the lock
expires, another worker takes it, and the woken holder, whose code never
learns, writes as a zombie. That is the ``pause`` finding.

``expire`` is whole seconds, so the run's ``ttl_ms`` must be a multiple of
1000 (the plan uses 1000: a 1 s lock, renewed by the thread every 0.67 s; the
pause fault then stops a holder for 1.5-3 s, past its lock's expiry).

The heartbeat (``renew``) calls the library's public ``extend()``, exactly
what the renewal thread calls, which fails with ``NotAcquired`` once the lock
is another's. A bare ownership check would not do here: the checker takes an
ok renew to extend the lease by a ttl from that moment, while the thread's
last extension may be up to 2/3 of the expiry older, so a claim right after
the lock expired could be reported as ``overlapping-lease`` although the
library never promised more.
"""

from __future__ import annotations

from typing import ClassVar

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.base import TargetConfig
from leasecheck.targets.locks.lockbase import Held
from leasecheck.targets.locks.redis_records import RedisLockLease, mapped_errors


class PythonRedisLock(RedisLockLease):
    """python-redis-lock with auto_renewal (a daemon thread extends the lock), unfenced, as its README shows."""

    renews_itself = True  # its own thread keeps the lock: the workload neither stalls nor writes late for it

    name = "python-redis-lock"
    store = "redis"
    fenced = False
    requires = ("redis", "redis_lock")
    extra = "audit"
    #: "held for as long as the Python process is running": no deadline while the holder runs
    lease_expiry = "holder"

    audit: ClassVar[AuditPlan | None] = AuditPlan(
        library="python-redis-lock",
        mode="auto-renewal",
        faults=(
            FaultAudit("pause", "invalid", ("stale-effect", "stale-commit", "duplicate-commit", "lost-commit")),
        ),
        seeds=(2, 3, 4, 5),  # seed 1: invalid in 1 of 2 runs
        fix="The renewal thread renews whatever the worker's code does: a stalled worker keeps the lock for ever, "
            "and a paused process loses it and wakes up writing (stale writes). Fence every write with "
            "a number drawn at acquire (e.g. INCR) that the store checks, and bound the work, not just the lock.",
        time_limit=8.0,
        options={"ttl_ms": 1000, "nemesis_interval": 2.0, "workload": {"stall_rate": 0.0, "late_rate": 0.0, "zombie_rate": 1.0}},
    )

    #: the records' and locks' key prefix: no other adapter reads these nodes
    PREFIX: ClassVar[str] = "lc-prl"

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        if ttl_ms < 1000 or ttl_ms % 1000:
            return f"python-redis-lock expires in whole seconds: --ttl must be a multiple of 1000 ms, not {ttl_ms}"
        return None

    def __init__(self, config: TargetConfig) -> None:
        if (problem := self.ttl_problem(config.ttl_ms)) is not None:
            raise ValueError(problem)
        super().__init__(config)

    def acquire(self, node: str, owner: str) -> Held | None:
        import redis_lock

        lock = redis_lock.Lock(self.client, f"{self.PREFIX}:{node}", expire=self.ttl_ms // 1000, auto_renewal=True)
        with mapped_errors(self.client, "lock.acquire"):
            if not lock.acquire(blocking=False):
                return None
        return Held(lock, lock.id)

    def extend(self, held: Held) -> bool:
        import redis_lock

        with mapped_errors(self.client, "lock.extend"):
            try:
                held.lock.extend()
            except (redis_lock.NotAcquired, redis_lock.NotExpirable):
                return False
        return True

    def holds(self, held: Held) -> bool:
        with mapped_errors(self.client, "lock.get_owner_id"):
            return bool(held.lock.get_owner_id() == held.lock.id)

    def unlock(self, held: Held) -> None:
        import redis_lock

        with mapped_errors(self.client, "lock.release"):
            try:
                held.lock.release()  # stops the renewal thread first
            except redis_lock.NotAcquired:
                pass
