"""What faults a queue run takes, and what each must bring about there (where that differs from a lease run's).

A queue run's workers are the library's own, and its timers are the library's: a fault
acts on the workers (with their children) or on the broker, and what it must bring about
is read on a history whose claims are the library's deliveries (``lease_expiry:
"queue"``). Apart from the runner, so that ``leasecheck audit`` and the verdict of a
queue run's history ask the same rows without starting anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from leasecheck.nemesis.catalogue import FaultKind, lookup

#: the fault that cuts the broker's power (its server on the power-loss layer)
POWER_LOSS_FAULT = "power-loss"
#: the faults on a worker that are aimed, in a library whose task heartbeats, between a heartbeat and the next write
#: (:mod:`.aim_notes`)
AIMED_FAULTS = ("pause", "kill")
#: the faults a queue run can inflict: on the library's worker processes (with their children) and on its broker
QUEUE_FAULTS = ("pause", "kill", "pause-store", "kill-store", "partition", POWER_LOSS_FAULT)

#: what a fault must bring about in a queue run, where it differs from a lease run's: nothing timed against a ttl (a
#: claim after a lease's expiry, a deadline in a store fault: a queue's timers are the library's own, ``lease_expiry:
#: "queue"``); a power cut must have found an execution under way (granted before it), or it tested nothing. A claim
#: after it is counted, not required: a broker that lost the job never hands it out again
QUEUE_SITUATIONS: dict[str, tuple[str, ...]] = {POWER_LOSS_FAULT: ("granted-before-power-loss",)}


def queue_kinds(nemesis: Sequence[str]) -> list[FaultKind]:
    """The catalogue's rows of a queue run's faults, each with what it must bring about in a queue run
    (:data:`QUEUE_SITUATIONS`)."""
    return [replace(k, situations=QUEUE_SITUATIONS.get(k.name, ())) for k in lookup(list(nemesis))] if nemesis else []
