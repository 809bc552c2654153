"""The words every part of leasecheck shares, declared once.

A history names operations (``claim``, ``renew``, …), outcomes (``ok``, ``fail``,
``info``), the reasons a store refuses (``held``, ``stale``, …) and the statuses a
read shows; a verdict names anomaly kinds. The backends write these words, the
reader validates them, the checker and the reports read them. Each is declared
here, once, as a ``Literal`` type (so mypy catches a misspelt reason in a backend
or a misspelt kind in a broken variant's ``expected``) with the runtime set
derived from it. It lives in ``histories`` because everyone may import
``histories`` (docs/layout.md) and nobody else is imported by all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

# ------------------------------------------------------------------ operations

#: client operations (docs/contracts/history-format.md, the table of ``f``)
OpName = Literal["claim", "renew", "effect", "commit", "release", "read", "read-resource"]
CLIENT_FUNCTIONS: frozenset[str] = frozenset(get_args(OpName))
#: client operations whose invoke value carries the lease's epoch (or an unfenced token)
EPOCH_CARRIERS: frozenset[str] = frozenset({"renew", "effect", "commit", "release"})
#: a read of a node's protected resource (its fence and the effects it accepted, in order): it names no epoch of its
#: own and changes nothing, so the lease model and its search leave it out; the resource kinds judge it
READ_RESOURCE: Final = "read-resource"

#: an event's ``type``: an invoke, then exactly one completion
EventType = Literal["invoke", "ok", "fail", "info"]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))
#: an operation's outcome: the type of the completion that ended it (an op never completed is ``info``)
Outcome = Literal["ok", "fail", "info"]

# ---------------------------------------------------------------- fail reasons

#: a definite "no" a store may answer with (a backend's ``Refused``)
Refusal = Literal["held", "terminal", "stale", "expired", "not-owner", "error"]
#: every ``fail`` reason of a history: a refusal, or the harness's own
#: ``unavailable`` (the store was not reached, so the op was definitely not applied)
FailReason = Literal[Refusal, "unavailable"]
FAIL_REASONS: frozenset[str] = frozenset(get_args(FailReason))

# ---------------------------------------------------------------- node status

#: a node's status in the store's durable record (what an ok read shows)
Status = Literal["READY", "RUNNING", "SUCCEEDED"]
READY: Final = "READY"
RUNNING: Final = "RUNNING"
SUCCEEDED: Final = "SUCCEEDED"
READ_STATUSES: frozenset[str] = frozenset(get_args(Status))

# --------------------------------------------------------------- anomaly kinds
#
# The class of a kind is the Literal it is declared in (docs/contracts/anomaly-kinds.md, "non-linearizable"):
# a proof kind is by itself proof that the node has no linearization, so a node
# with one is not also reported non-linearizable; a timing kind breaks a time
# bound the lease model does not see, so it never explains non-linearizable.
# The order of declaration is the order reports list the kinds in.

ProofKind = Literal[
    "duplicate-epoch",
    "epoch-regression",
    "stale-renew",
    "stale-commit",
    "stale-effect",
    "duplicate-commit",
    "lost-commit",
    # what a read of the protected resource shows (``read-resource``): a fence below what it already had or accepted,
    # an accepted effect that no op can have written, an accepted effect gone missing
    "fence-regression",
    "phantom-effect",
    "lost-effect",
]
TimingKind = Literal["overlapping-lease", "stuck-lease", "premature-expiry"]
NON_LINEARIZABLE: Final = "non-linearizable"
AnomalyKind = Literal[ProofKind, TimingKind, "non-linearizable"]

#: every anomaly kind, in the order reports list them
KINDS: tuple[AnomalyKind, ...] = get_args(AnomalyKind)
#: kinds that are themselves proof that a node has no linearization
LINEARIZABILITY_KINDS: frozenset[str] = frozenset(get_args(ProofKind))
#: kinds about time bounds only: they never explain ``non-linearizable``
TIMING_KINDS: frozenset[str] = frozenset(get_args(TimingKind))

#: the kind of an accepted op of an older lease, by its ``f``
STALE_KINDS: Mapping[str, AnomalyKind] = {
    "renew": "stale-renew",
    "commit": "stale-commit",
    "effect": "stale-effect",
}

# ------------------------------------------------------------------ situations
#
# The dangerous interleavings of the protocol a run should have reached, each
# defined on the history alone (:mod:`leasecheck.checker.coverage` counts them;
# docs/coverage.md tells them apart). A *zombie* op belongs to a lease that a
# newer lease of its node has replaced; its phase is where the new holder was.
# The workload reaches the first ones by itself; the others need a fault (some a fault only makes likely).
# The order of declaration is the order reports list them in.

WorkloadSituation = Literal[
    # a renew of a replaced lease, before the new holder's first effect
    "zombie-renew-before-new-effect",
    # a renew of a replaced lease, while the new holder has written and not ended
    "zombie-renew-while-new-runs",
    # a renew of a replaced lease, after the new holder committed or released
    "zombie-renew-after-new-ends",
    # an effect of a replaced lease, before the new holder's first effect
    "zombie-effect-before-new-effect",
    # an effect of a replaced lease, while the new holder has written and not ended
    "zombie-effect-while-new-runs",
    # an effect of a replaced lease, after the new holder committed or released
    "zombie-effect-after-new-ends",
    # a commit of a replaced lease, before the new holder's first effect
    "zombie-commit-before-new-effect",
    # a commit of a replaced lease, while the new holder has written and not ended
    "zombie-commit-while-new-runs",
    # a commit of a replaced lease, after the new holder committed or released
    "zombie-commit-after-new-ends",
    # a release of a replaced lease, before the new holder's first effect
    "zombie-release-before-new-effect",
    # a release of a replaced lease, while the new holder has written and not ended
    "zombie-release-while-new-runs",
    # a release of a replaced lease, after the new holder committed or released
    "zombie-release-after-new-ends",
    # a read by a replaced lease's claimer, before the new holder's first effect
    "zombie-read-before-new-effect",
    # a read by a replaced lease's claimer, while the new holder has written and not ended
    "zombie-read-while-new-runs",
    # a read by a replaced lease's claimer, after the new holder committed or released
    "zombie-read-after-new-ends",
    # two concurrent claims of a READY node (never granted, or its last lease released)
    "claim-race-ready",
    # a claim (a duplicate delivery) while a lease of the node is surely unexpired and not ended
    "claim-while-held",
    # a claim once the node's latest lease surely expired, never ended and with no renew pending
    "claim-after-expiry",
]
FaultSituation = Literal[
    # an op of a replaced lease (renew, effect, commit, release) while the newer lease has lapsed (its holder silent
    # past ttl + uncertainty, no renew pending, not ended) and no later claim of the node was granted
    "zombie-op-while-new-lapsed",
    # an effect or commit (ok or fail) invoked while its lease was surely live, still in flight when another worker's
    # claim of its node was granted (the window of a check-then-write boundary)
    "op-in-flight-across-claim",
    # the same, invoked in the last 10 % of its lease (a holder that writes late, as its lease is about to lapse)
    "late-write-across-claim",
    # a claim granted while a clock fault surely held its worker's clock behind by more than the time since the node's
    # latest grant to another worker (its worker's clock read earlier than that grant)
    "lagging-clock-claim-on-recent-node",
    # a lease, not ended, whose deadline falls while a store-side fault is active
    "lease-expires-during-store-fault",
    # a lease held by a worker whose clock a clock-bump or clock-strobe skews
    "lease-held-by-skewed-worker",
    # a lease granted within a ttl before its cluster lost the primary (killed, paused, isolated, failed over)
    "lease-granted-before-primary-lost",
    # a lease granted before its cluster lost the primary, renewed after (whatever the answer)
    "lease-renewed-across-failover",
    # a claim made while a partition between the cluster's members is on (whatever its answer)
    "claim-during-member-partition",
    # a lease granted and acknowledged in the last unsynced interval before a power loss: its claim completed ok after
    # the previous power loss's restart (or the history's start) and before this power loss started
    "granted-before-power-loss",
    # a claim the store answered (ok, or refused for any reason but unavailable) of a node with a lease granted
    # before a power loss, invoked after that power loss's restart and before the next power loss started
    "claim-after-power-loss",
]
#: a worker pause (SIGSTOP) or kill (SIGKILL) that landed while its victim had an op of that kind in flight: invoked
#: before the fault started, completed after it (or never). An adapter's op may be several round trips, and a store that
#: took the first and never saw the rest, or saw them a pause later, is where a claim that is not atomic shows
InsideSituation = Literal[
    "paused-inside-claim",
    "paused-inside-renew",
    "paused-inside-effect",
    "paused-inside-commit",
    "paused-inside-release",
    "paused-inside-read",
    "paused-inside-read-resource",
    "killed-inside-claim",
    "killed-inside-renew",
    "killed-inside-effect",
    "killed-inside-commit",
    "killed-inside-release",
    "killed-inside-read",
    "killed-inside-read-resource",
]
Situation = Literal[WorkloadSituation, FaultSituation, InsideSituation]

#: every situation, in the order reports list them
SITUATIONS: tuple[Situation, ...] = get_args(Situation)
#: the situations only a target that reads its protected resource back can reach (``read-resource`` ops)
RESOURCE_SITUATIONS: tuple[Situation, ...] = tuple(s for s in SITUATIONS if s.endswith("-inside-read-resource"))
#: the situations every run's workload should reach by itself, whatever its faults
WORKLOAD_SITUATIONS: tuple[WorkloadSituation, ...] = get_args(WorkloadSituation)
#: the zombie ops' ``f``, and their phases relative to the newer lease, in the order of :data:`SITUATIONS`
ZOMBIE_FUNCTIONS: tuple[OpName, ...] = ("renew", "effect", "commit", "release", "read")
ZOMBIE_PHASES: tuple[str, ...] = ("before-new-effect", "while-new-runs", "after-new-ends")
#: the op kinds a worker pause or kill may land inside (every client op), in the order of :data:`SITUATIONS`
INSIDE_FUNCTIONS: tuple[OpName, ...] = get_args(OpName)
#: the faults that land inside ops, by the nemesis event that starts them, and the word their situations begin with
INSIDE_FAULTS: Mapping[str, str] = {"pause": "paused", "kill": "killed"}


def inside_situation(fault: str, f: str) -> Situation:
    """``paused-inside-claim`` for (``pause``, ``claim``): the situation of a ``fault`` landing inside an ``f``."""
    name = f"{INSIDE_FAULTS[fault]}-inside-{f}"
    assert name in SITUATIONS, name
    return name
