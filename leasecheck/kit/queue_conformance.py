"""What every job queue's adapter must do before its audit means anything: one short queue run, three promises.

``leasecheck new-target --queue LIBRARY``'s test (:mod:`leasecheck.kit.scaffold_queue`) runs it: a queue run of
the adapter on the broker leasecheck starts for it, every job's first execution stalled past the library's timeout
(the run's ``stall_rate`` 1), no fault, then three questions of its history:

* ``job-executed``: a job's execution ran and its result was read back from the library (an ``ok`` commit);
* ``stalled-redelivered``: the library ran a stalled job again (a job with two executions): its recovery is on;
* ``identity-recorded``: each execution carries what the adapter says the library hands it (``identity``:
  ``attempt``, a number as the epoch, or ``id``, a token).

Whether a redelivered job's first execution then does harm is what the audit judges, not this.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from leasecheck.histories import read_history
from leasecheck.queue_run.options import QueueOptions
from leasecheck.queue_run.runner import QueueRun
from leasecheck.rundir.runfolder import RunFolder

#: the promises, by name, and what breaking one means
PROMISES: dict[str, str] = {
    "job-executed": "no execution's result was read back from the library (check worker_command, enqueue and state)",
    "stalled-redelivered": "no stalled job ran a second time (turn the library's recovery on, scaled to ttl_ms)",
    "identity-recorded": "an execution's claim lacks the library's identity (pass the attempt number or execution id "
                         "to leasecheck.targets.queues.task.execute as Identity)",
}


def conform(library: str, store: Path, time_limit: float = 20.0, workers: int = 2) -> dict[str, str]:
    """The promises ``library`` (a queue's name or ``module:Class``) broke in one short run: name -> why (empty: none)."""
    run = QueueRun(QueueOptions(library, seed=1, time_limit=time_limit, workers=workers, stall_rate=1.0,
                                store=str(store), live_every_s=0))
    result = run.execute()
    _, ops, _ = read_history(RunFolder(result.run_dir).history)
    claims: dict[str, list[object]] = defaultdict(list)
    broken: dict[str, str] = {}
    for op in ops:
        if op.f == "claim" and op.type == "ok" and op.node is not None:
            claims[op.node].append(op)
    if not any(op.f == "commit" and op.type == "ok" for op in ops):
        broken["job-executed"] = PROMISES["job-executed"]
    if not any(len(c) > 1 for c in claims.values()):
        broken["stalled-redelivered"] = PROMISES["stalled-redelivered"]
    attempt = run.cls.identity == "attempt"
    named = [op for op in ops if op.f == "claim" and op.type == "ok"]
    if not named or not all(isinstance(op.epoch, int) if attempt else op.token is not None for op in named):
        broken["identity-recorded"] = PROMISES["identity-recorded"]
    return broken


__all__ = ["PROMISES", "conform"]
