"""The knobs of the seed's workload (:class:`Workload`): how often a worker runs long, stalls, writes late, crashes.

Data only, apart from the worker that reads it (:mod:`leasecheck.run.workload`), so the run's options, the CLI's
flags, the matrix and the benchmarks name the knobs without importing a worker process's code.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasecheck.run.slots import SEEN_NODES


@dataclass(frozen=True)
class Workload:
    """The knobs of the seed's workload; every random choice uses the worker's seeded RNG."""

    #: share of executions that run longer than the ttl (heartbeats keep them alive)
    long_rate: float = 0.25
    #: share of leases given back instead of committed
    release_rate: float = 0.08
    #: share of executions that end with the worker process crashing (os._exit)
    crash_rate: float = 0.02
    #: share of lost-lease discoveries (a refused heartbeat, a wake-up past the lease) after which
    #: the worker goes on anyway, as a zombie
    zombie_rate: float = 0.5
    #: share of executions that stall (stop heartbeating) at a seeded moment
    stall_rate: float = 0.15
    #: share of executions whose holder writes late in its lease: no heartbeat, one effect or commit sent at a seeded
    #: point of :attr:`late_at` of the ttl after its claim, held until a rival's claim is granted (see the module);
    #: 15 %: at 10 % a pause run whose pauses stop a worker inside an SQLite transaction (every other worker then waits on
    #: the database lock, a third fewer executions) met 2-3 late writes, and its windows 1-2 times
    late_rate: float = 0.15
    late_at: tuple[float, float] = (0.91, 0.95)
    #: share of late writes that are commits (the others effects), and of late effects held after the store's answer
    #: (accepted before the rival's grant) rather than before the request (refused after it, by a fenced store)
    late_commit_rate: float = 0.4
    late_hold_after_rate: float = 0.5
    #: share of stalls that are short (0.5-0.9 ttl: the lease survives, its next heartbeat is late);
    #: the others last until the node is taken over, and the worker wakes a zombie
    short_stall_rate: float = 0.25
    #: chance that a zombie acts in each phase of the takeover (see :mod:`leasecheck.run.takeovers`)
    phase_rate: float = 0.85
    #: chance that a zombie tries each of renew, effect, read, commit and release in a phase it acts in
    act_rate: float = 0.85
    #: the longest a zombie waits for a phase of its node, in ttls
    zombie_wait_ttls: float = 4.0
    #: share of loop iterations that also read a node
    read_rate: float = 0.15
    #: share of loop iterations that also read the protected resource of a node (when the target can: its fence and
    #: the effects it accepted, in order; drawn from a random stream of its own, so the rest of the workload's is as before)
    resource_read_rate: float = 0.15
    #: share of granted claims followed at once by a read of the node's protected resource: the fence the claim lifted,
    #: before the new holder wrote, against which a late write of the older lease shows (a takeover, epoch above 1,
    #: is always read)
    claim_read_rate: float = 0.5
    #: how many of the nodes it last claimed a worker keeps to read one now and then (the recorder keeps the same
    #: list: a node is closed mid-run only once no worker keeps it, :mod:`leasecheck.run.closing`)
    seen_nodes: int = SEEN_NODES
    #: most effects per execution
    max_effects: int = 3
    #: ops per second per worker at most (0: as fast as the store answers)
    rate: float = 0.0
    #: scales every execution's duration; 0 runs claim, effects and commit back to back
    #: (throughput benchmarks: the store's speed, not the simulated work)
    exec_scale: float = 1.0
