"""redis-py's own lock (``redis.lock.Lock``, ``client.lock(name, timeout=...)``), used as its docstrings show.

The lock is ``SET name token NX PX timeout``: Redis expires it by its own
clock, so a worker's skewed clock changes nothing (no clock fault is audited).
The heartbeat is ``extend(ttl, replace_ttl=True)``, a Lua script that extends
only while the key still holds our token; ``release()`` deletes it only then.
Nothing fences the work done under the lock: a holder paused past its
timeout wakes up believing it holds the lock and writes. That is the finding
the ``pause`` audit publishes; redis-py gives no fencing token to fix it with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.locks.lockbase import Held
from leasecheck.targets.locks.redis_records import RedisLockLease, mapped_errors

if TYPE_CHECKING:  # redis is imported where it is used: listing the backends must not load it
    from redis.lock import Lock


class RedisPyLock(RedisLockLease):
    """redis-py's Lock (SET NX PX, extend as the heartbeat), unfenced, as documented."""

    name = "redis-py-lock"
    store = "redis"
    fenced = False
    requires = ("redis",)
    extra = "audit"

    audit: ClassVar[AuditPlan | None] = AuditPlan(
        library="redis",
        mode="documented",
        faults=(
            FaultAudit("pause", "invalid", ("stale-effect", "stale-commit", "duplicate-commit", "lost-commit")),
        ),
        seeds=(1, 2, 3, 4, 5),
        fix="A lock that expires by Redis' clock cannot stop a paused holder: carry a fencing token "
            "(e.g. an INCR drawn at acquire) into every write and have the store refuse older ones.",
        time_limit=8.0,
        # every holder a pause outlives goes on as a zombie: the pause's own finding, whatever the workload's stalls do
        options={"ttl_ms": 1000, "nemesis_interval": 2.5, "workload": {"zombie_rate": 1.0}},
    )

    #: the records' key prefix: no other adapter reads these nodes
    PREFIX: ClassVar[str] = "lc-redispy"

    def acquire(self, node: str, owner: str) -> Held | None:
        lock = self.client.lock(f"{self.PREFIX}:lock:{node}", timeout=self.ttl_ms / 1000, blocking=False)
        with mapped_errors(self.client, "lock.acquire"):
            if not lock.acquire(blocking=False):
                return None
        token = lock.local.token
        return Held(lock, token.decode() if isinstance(token, bytes) else str(token))

    def extend(self, held: Held) -> bool:
        from redis.exceptions import LockError

        lock: Lock = held.lock
        with mapped_errors(self.client, "lock.extend"):
            try:
                return bool(lock.extend(self.ttl_ms / 1000, replace_ttl=True))
            except LockError:  # LockNotOwnedError too: the key expired or is another's
                return False

    def holds(self, held: Held) -> bool:
        lock: Lock = held.lock
        with mapped_errors(self.client, "lock.owned"):
            return bool(lock.owned())

    def unlock(self, held: Held) -> None:
        from redis.exceptions import LockError

        lock: Lock = held.lock
        with mapped_errors(self.client, "lock.release"):
            try:
                lock.release()
            except LockError:  # already expired, or taken by another
                pass
