"""Dramatiq with its Redis broker and the Results middleware (Redis backend), its two recoveries scaled to the ttl.

Dramatiq has two ways to run a job again, and neither is a lease on the execution:

* the Redis broker's **heartbeat**: every broker command a worker process
  sends (its consumers poll even while its threads work) refreshes that
  process's score in ``__heartbeats__``; a dispatch that draws maintenance
  (``maintenance_chance`` per million commands) pushes the unacked messages of
  every process silent for ``heartbeat_timeout`` ms back on their queue
  (dramatiq 2.2.1 ``brokers/redis/dispatch.lua:106-132``: "Maintenance moves
  any unacked messages belonging to dead workers back to their queues"). It
  judges the *process*, not the execution: a stalled task thread in a live
  process is never requeued; a frozen or dead process is.
* the **time limit** (``TimeLimit`` middleware, on by default at 10 minutes):
  "cancels actors that run for too long" by setting an async exception in the
  worker thread, which "will only get called the next time that thread
  acquires the GIL … this middleware can't cancel system calls"
  (``middleware/time_limit.py:50-54``); the ``Retries`` middleware then
  re-enqueues the message with a backoff (a new ``redis_message_id``,
  ``options['retries']`` + 1).

Settings (the same in the adapter and the workers, :func:`make_broker`):
``heartbeat_timeout`` = ttl, maintenance on every command, the consumers'
idle poll (``dramatiq_worker_timeout``) a quarter ttl so a live process beats
well within it; actor ``time_limit`` = ttl, the time-limit thread checking
every ttl/20; ``min_backoff`` ttl/4; prefetch 1 (``dramatiq_queue_prefetch``:
one job at a time, not the default two per thread).

Identity: the message id is the job's (set to the job's name); the only
per-execution number is ``options['retries']``, which grows on a retry but not
on a heartbeat requeue (the same message is pushed back unchanged), so the
token is ``<message_id>/<retries>`` and the identity is ``id``.

Result: the Redis results backend overwrites (``DEL`` + ``LPUSH``,
``results/backends/redis.py:105``): the last execution to return wins.

Observed (smoke runs, ttl 2 s): a stalled thread is cut when its sleep returns,
before its next effect, and retried after it (no overlap); a frozen process's
message is run again by another worker ~2.2 s after the freeze, and the
zombie, once resumed, may land a write before its time limit fires; its
failure then makes ``Retries`` enqueue a further copy of a job that already
succeeded, whose result replaces the stored one.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, ClassVar

from leasecheck.targets.audits import REDELIVERED_JOB, AuditPlan, FaultAudit
from leasecheck.targets.queues.base import JobState, QueueConfig, QueueLibrary

if TYPE_CHECKING:
    from dramatiq import Message
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.results.backends import RedisBackend

ENV_URL, ENV_TTL, ENV_RUN = "LEASECHECK_DRAMATIQ_URL", "LEASECHECK_DRAMATIQ_TTL_MS", "LEASECHECK_DRAMATIQ_RUN_ID"
ENV_TIME_LIMIT = "LEASECHECK_DRAMATIQ_TIME_LIMIT_MS"
TASKS_MODULE = "leasecheck.targets.queues.dramatiq_queue_tasks"
#: the actor's queue and name (the broker's namespace carries the run id)
QUEUE, ACTOR = "leasecheck", "leasecheck_task"
#: results outlive any run (the default is 10 minutes)
RESULT_TTL_MS = 86_400_000


def namespaces(run_id: str) -> tuple[str, str]:
    """The broker's and the results backend's key prefixes of a run."""
    return f"lc-{run_id}-dramatiq", f"lc-{run_id}-results"


def actor_options(ttl_ms: int, time_limit_ms: int | None = None) -> dict[str, Any]:
    """The actor's options: results stored, the time limit one ttl (unless given), retries soon after."""
    return {"store_results": True, "time_limit": time_limit_ms or ttl_ms, "min_backoff": max(ttl_ms // 4, 1)}


def make_broker(url: str, ttl_ms: int, run_id: str) -> tuple[RedisBroker, RedisBackend]:
    """The run's broker with the default middleware (TimeLimit checking every ttl/20), Results and CurrentMessage."""
    from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker
    from dramatiq.middleware import CurrentMessage, TimeLimit, default_middleware
    from dramatiq.results import Results
    from dramatiq.results.backends import RedisBackend

    broker_ns, results_ns = namespaces(run_id)
    middleware = [TimeLimit(interval=max(ttl_ms // 20, 10)) if m is TimeLimit else m() for m in default_middleware]
    broker = RedisBroker(url=url, namespace=broker_ns, middleware=middleware,
                         heartbeat_timeout=ttl_ms, maintenance_chance=MAINTENANCE_SCALE)
    backend = RedisBackend(url=url, namespace=results_ns)
    broker.add_middleware(Results(backend=backend, result_ttl=RESULT_TTL_MS))
    broker.add_middleware(CurrentMessage())
    return broker, backend


#: the advice the audit's finding ends with (AUDITS.md)
FIX = (
    "Dramatiq's time limit ends a stalled actor, but a frozen worker's message is requeued by the "
    "heartbeat and the woken original then writes, and its result overwrites the new one's (last writer "
    "wins). Fence every write with a number of your own per execution."
)


class DramatiqQueue(QueueLibrary):
    """Dramatiq (Redis broker, Results): a silent process's messages requeued by heartbeat, a stalled actor cut by its time limit."""

    name = "dramatiq"
    library = "dramatiq"
    broker = "redis"
    #: the published audit, one plan per mode (AUDITS.md); ``none``: the task's own stalls, no fault
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="dramatiq", mode="documented",
            faults=(
                FaultAudit("none", "valid"),
                FaultAudit("pause", "invalid", REDELIVERED_JOB),
                FaultAudit("pause-store", "invalid", REDELIVERED_JOB), FaultAudit("partition", "valid"),
            ),
            seeds=(1, 2, 3), time_limit=15.0,
            fix=FIX,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )
    identity = "id"
    heartbeat = False
    requires = ("dramatiq", "redis")

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)
        self._made: tuple[RedisBroker, RedisBackend] | None = None

    def _broker(self) -> tuple[RedisBroker, RedisBackend]:
        if self._made is None:
            self._made = make_broker(self.config.url, self.config.ttl_ms, self.config.run_id)
        return self._made

    def setup(self) -> None:
        """Nothing to install: the keys appear with the first message."""

    def worker_env(self) -> dict[str, str]:
        """The run's broker; ``options['time_limit_ms']`` replaces the ttl as the actor's time limit (600000: Dramatiq's default)."""
        env = {ENV_URL: self.config.url, ENV_TTL: str(self.config.ttl_ms), ENV_RUN: self.config.run_id,
               "dramatiq_queue_prefetch": "1", "dramatiq_worker_timeout": str(max(self.config.ttl_ms // 4, 10))}
        if self.config.options.get("time_limit_ms"):
            env[ENV_TIME_LIMIT] = str(int(self.config.options["time_limit_ms"]))
        return env

    def worker_command(self, slot: int) -> list[str]:
        return [sys.executable, "-m", "dramatiq", TASKS_MODULE, "--processes", "1", "--threads", "1"]

    def _message(self, job: str) -> Message[Any]:
        from dramatiq import Message

        return Message(queue_name=QUEUE, actor_name=ACTOR, args=(job,), kwargs={}, options={}, message_id=job)

    def enqueue(self, jobs: list[str]) -> None:
        broker, _ = self._broker()
        for job in jobs:
            broker.enqueue(self._message(job))

    def state(self, job: str) -> JobState | None:
        """The stored result; else where the broker holds the message (fetched by a worker: RUNNING)."""
        from dramatiq.results import ResultFailure, ResultMissing

        _, backend = self._broker()
        try:
            result = backend.get_result(self._message(job))
        except ResultMissing:
            found = self._broker_state(job)
            if found is not None:
                return found
            try:  # acked (gone from the broker) after the result was missed: read it again
                result = backend.get_result(self._message(job))
            except ResultMissing:
                return None
        except ResultFailure:
            return JobState("FAILED")
        return JobState("SUCCEEDED", str(result))

    def _broker_state(self, job: str) -> JobState | None:
        broker, _ = self._broker()
        ns, r = broker.namespace, broker.client
        for key, delayed in ((f"{ns}:{QUEUE}.msgs", False), (f"{ns}:{QUEUE}.DQ.msgs", True)):
            for redis_id, data in r.hscan_iter(key):
                if json.loads(data).get("message_id") != job:
                    continue
                if not delayed and any(r.sismember(acks, redis_id) for acks in r.scan_iter(f"{ns}:__acks__.*.{QUEUE}")):
                    return JobState("RUNNING")
                return JobState("READY")
        return None

    def close(self) -> None:
        if self._made is not None:
            self._made[0].close()
            self._made[1].client.close()


def broker_from_env() -> tuple[RedisBroker, dict[str, Any]]:
    """The worker's broker and actor options, from what :meth:`DramatiqQueue.worker_env` set."""
    ttl_ms = int(os.environ[ENV_TTL])
    broker, _ = make_broker(os.environ[ENV_URL], ttl_ms, os.environ[ENV_RUN])
    return broker, actor_options(ttl_ms, int(os.environ.get(ENV_TIME_LIMIT, "0")) or None)
