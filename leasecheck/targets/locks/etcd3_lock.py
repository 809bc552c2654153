"""python-etcd3's ``Lock``, audited as its README shows it, and fenced by the lock key's revision.

``client.lock(name, ttl=...)`` puts ``/locks/NAME`` with a random uuid, attached
to a fresh etcd lease of ``ttl`` whole seconds, in a transaction that succeeds
only if the key does not exist; ``lock.refresh()`` keeps the lease alive;
``lock.release()`` deletes the key if it still holds our uuid. The lease is
kept by the etcd server (no client clock), so clock skew is not a fault here.

* :class:`Etcd3Lock` (``documented``): the lease is named by the lock's uuid,
  and the job's record and resource are plain etcd writes that trust the lock.
* :class:`RevisionEtcd3Lock` (``fenced-revision``): the fence is the lock key's
  ``create_revision``, read right after acquiring (and only if the key still
  holds our uuid). Every grant creates the key anew, so it grows with every
  grant, and every record and resource write is an etcd transaction that
  refuses a fence below the one stored.

The records live in the same etcd (:class:`EtcdRecords`): a JSON record per
node at ``leasecheck/record/NODE`` and one key per effect under
``leasecheck/effect/NODE/``. A fenced write is a compare-and-swap on the
record's ``mod_revision``, retried until it applies or a larger fence is seen.

On a cluster (``etcd://H1:2379,H2:2379,H3:2379``, the ``etcd-cluster`` kind)
the one client is given every member (:func:`cluster_target`) and spreads its
requests over those that are up; every member serves linearizable reads and
forwards writes to the leader, so which one a request reaches changes nothing
but whether it can be answered (a member cut off from the majority cannot).

What the audits found there (AUDITS.md, "On a cluster"): the revision fence holds
under every member fault; a lock outlives its TTL after a leader change, because
etcd's new leader refreshes every lease to its full TTL (lessor ``Promote``) and
no lease is revoked while no majority has a leader: ``stuck-lease``, liveness
only, published as such for ``failover`` (documented); the fenced lock's rates on the
cluster are ``bench_detection --clusters``'s (valid in 9 of 10 runs, stuck-lease in one).
"""

from __future__ import annotations

import uuid
from typing import Any

from leasecheck.histories.vocabulary import AnomalyKind
from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.base import TargetConfig
from leasecheck.targets.locks.etcd_records import PREFIX, Connection, EtcdRecords, etcd_errors
from leasecheck.targets.locks.lockbase import Held, LockLease

#: what a zombie holder's plain writes show as (each invalid run shows some of these)
ZOMBIE_WRITES: tuple[AnomalyKind, ...] = ("duplicate-commit", "lost-commit", "stale-commit", "stale-effect")

#: the audits' run settings. A 1 s lease: etcd's shortest with the election timeout of
#: :class:`leasecheck.servers.etcd.EtcdServer`. A clock uncertainty of 600 ms: etcd revokes
#: expired leases from a loop that runs every 500 ms (lessor.go's runLoop), so a lock outlives
#: its TTL by up to half a second plus the revoke's raft commit; at the default 10 ms a correct
#: lock shows ``stuck-lease`` in about half the runs. Faults every 1.5 s (± half), so a 6 s run
#: sees several.
AUDIT_OPTIONS: dict[str, Any] = {"ttl_ms": 1000, "clock_uncertainty_ms": 600.0, "nemesis_interval": 1.5}


class Etcd3Lock(LockLease):
    """python-etcd3's Lock as its README shows it (lease TTL, refresh), unfenced: a paused holder still writes."""

    name = "etcd3-lock"
    fenced = False
    store = "etcd"
    requires = ("etcd3",)
    extra = "audit"
    audit = AuditPlan(
        library="etcd3",
        mode="documented",
        faults=(
            FaultAudit("pause", "invalid", ZOMBIE_WRITES),
            # a killed holder writes nothing: its stale writes under kill were all by workers that stalled
            # on their own (reported apart, as invalid without the fault), never by a kill's victim
            FaultAudit("kill", "valid"),
            # a frozen etcd cannot revoke: a lease past its TTL keeps its key until the lessor runs again
            FaultAudit("pause-store", "invalid", (*ZOMBIE_WRITES, "stuck-lease")),
            # on the cluster: every leadership transfer makes the new leader refresh every lease to its full TTL
            # (etcd's lessor Promote), so a lock whose holder stopped refreshing just before it outlives ttl plus
            # the uncertainty: stuck-lease (liveness) in every seed. The zombie writes some runs show beside it are
            # the workload's own stalls: a member fault hits every process, so the audit cannot report them apart
            FaultAudit("failover", "invalid", (*ZOMBIE_WRITES, "stuck-lease"), cluster="etcd-cluster"),
        ),
        seeds=(1, 2, 3, 4, 5),
        fix="The lock's lease runs out while a paused holder still believes it holds the lock, and etcd takes its "
        "plain writes: read the lock key's create_revision after acquiring and make every write a transaction "
        "that refuses a smaller one (the fenced-revision mode).",
        time_limit=8.0,
        # every holder a pause outlives goes on as a zombie: the pause's own finding, whatever the workload's stalls do
        options={**AUDIT_OPTIONS, "workload": {"zombie_rate": 1.0}},
    )

    @classmethod
    def ttl_problem(cls, ttl_ms: int) -> str | None:
        if ttl_ms < 1000 or ttl_ms % 1000:
            return f"etcd leases last whole seconds: --ttl must be a multiple of 1000 ms, not {ttl_ms}"
        return None

    def __init__(self, config: TargetConfig) -> None:
        if (problem := self.ttl_problem(config.ttl_ms)) is not None:
            raise ValueError(problem)
        #: the lease's TTL in seconds, exactly ttl_ms
        self.ttl_s = config.ttl_ms // 1000
        self.conn = Connection(config.url, config.timeout_s)
        super().__init__(config)

    def make_records(self) -> EtcdRecords:
        return EtcdRecords(self.conn)

    def acquire(self, node: str, owner: str) -> Held | None:
        lock = self.conn.client.lock(f"{PREFIX}{node}", ttl=self.ttl_s)
        with etcd_errors("lock.acquire"):
            try:
                # timeout=0: the documented "don't wait" (acquire's timeout is "the number of seconds").
                acquired = lock.acquire(timeout=0)
            except TypeError:
                # etcd3 0.12 retries a taken lock through tenacity with a wait callback of
                # tenacity's old two-argument form; today's tenacity calls it with one, so a
                # contended acquire raises TypeError (after its transaction found the key taken)
                # where the docs promise False.
                acquired = False
        if not acquired:
            return None
        if lock.lease.ttl != self.ttl_s:  # etcd raises a TTL below its minimum (1.5 election timeouts) silently
            self._let_go(Held(lock, ""))
            raise ValueError(f"etcd granted a {lock.lease.ttl} s lease for a {self.ttl_s} s lock: use a larger ttl_ms")
        return Held(lock, str(uuid.UUID(bytes=lock.uuid)))

    def extend(self, held: Held) -> bool:
        with etcd_errors("lock.refresh"):
            replies = held.lock.refresh()
        return bool(replies) and replies[0].TTL > 0  # an expired (or revoked) lease refreshes to TTL 0

    def unlock(self, held: Held) -> None:
        with etcd_errors("lock.release"):
            held.lock.release()


class RevisionEtcd3Lock(Etcd3Lock):
    """python-etcd3's Lock fenced by the lock key's create_revision: every write refuses a smaller one."""

    name = "etcd3-lock-revision"
    fenced = True
    effect_fence = "lease"
    audit = AuditPlan(
        library="etcd3",
        mode="fenced-revision",
        faults=(
            FaultAudit("pause", "valid"),
            FaultAudit("kill", "valid"),
            FaultAudit("partition", "valid"),
            # the etcd-cluster: no stale write under any member fault. Not published as valid: a random minority cut
            # off was valid on seeds 1-3, twice, at these settings, but 1 of 10 30 s runs under the three partitions
            # showed stuck-lease (bench_detection --clusters) and a loaded suite run ended unknown: the cut-off member
            # campaigns in vain (etcd 3.4 has no pre-vote), may depose the leader, and every new leader refreshes
            # every lease (lessor Promote); kill-primary, failover and pause-primary: stuck-lease in some seeds
        ),
        seeds=(1, 2, 3, 4, 5),
        fix="Valid: a zombie's writes carry its lock key's create_revision, and every etcd transaction refuses it "
        "once a newer grant has written. (Store faults are not published: after a frozen or restarted etcd, a "
        "lock may outlive its TTL, a stuck-lease that harms liveness only, in some runs and not others.) On the "
        "etcd-cluster: no stale write under any member fault; after a change of leader a lock may outlive its TTL "
        "(stuck-lease only: a new leader refreshes every lease), never a stale write.",
        time_limit=6.0,
        options=AUDIT_OPTIONS,
    )

    def acquire(self, node: str, owner: str) -> Held | None:
        held = super().acquire(node, owner)
        if held is None:
            return None
        try:
            with etcd_errors("get the lock's revision"):
                value, meta = self.conn.client.get(held.lock.key)
        except BaseException:
            self._let_go(held)
            raise
        if value != held.lock.uuid:  # lost already (expired, taken again): the revision there is not ours
            return None
        held.fence = int(meta.create_revision)
        return held
