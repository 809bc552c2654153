"""Every fault leasecheck knows, one row each: the only list of faults there is.

Jepsen composes its nemeses in one place (``nemesis/combined.clj``); this is
that place. The runner, the schedule, ``leasecheck nemeses``, ``--nemesis``
validation, ``leasecheck heal`` and the tests all read :data:`CATALOGUE`, so a
new fault is one module (the fault and its factory) plus one row here.

A row says what the fault is called and does, how long it lasts (in ttls), the
nemesis events it writes when it starts and when it heals, what the run must
provide for it (:class:`Need`), and its factory: a function of the run's
:class:`~leasecheck.nemesis.context.FaultContext` and the schedule's per-tick
random generator that returns a fault ready to start, or None when it has no
victim now. A fault whose module needs an optional extra (Docker) names its
factory with :class:`Lazy`, so the extra is imported only when that fault runs.
"""

from __future__ import annotations

import enum
import importlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from leasecheck.errors import BadInput
from leasecheck.histories.vocabulary import INSIDE_FUNCTIONS, inside_situation

if TYPE_CHECKING:  # the fault modules are imported when a fault is made: reading the catalogue stays cheap
    from leasecheck.nemesis.context import FaultContext
    from leasecheck.nemesis.protocol import Fault

#: make(context, rng) -> a fault ready to start, or None when it has no victim now
Factory = Callable[["FaultContext", random.Random], "Fault | None"]


class Need(enum.Enum):
    """What a fault needs the run to provide; the runner starts it, and refuses a run that cannot."""

    #: a store server we run (Postgres, Redis), not a file or the user's own
    SERVER = "a store server"
    #: every worker reaching the store through its own Toxiproxy proxy
    TOXIPROXY = "Toxiproxy in front of the store"
    #: the store in a container (``--env docker``)
    DOCKER = "the store in a container (--env docker)"
    #: the store as a local process under libfaketime (not ``--env docker``)
    FAKETIME = "the store under libfaketime (not --env docker)"
    #: a replicated store leasecheck starts (``--cluster``): members on hosts of their own
    CLUSTER = "a cluster of the store (--cluster)"
    #: the store's server on the power-loss layer (:mod:`leasecheck.servers.powerfs`), which can drop what it never fsynced
    POWERFS = "the store's server on the power-loss layer (powerfs)"


@dataclass(frozen=True)
class Lazy:
    """A factory imported when first called: ``module``'s ``function`` (for modules needing an optional extra)."""

    module: str
    function: str

    def __call__(self, ctx: FaultContext, rng: random.Random) -> Fault | None:
        factory: Factory = getattr(importlib.import_module(self.module), self.function)
        return factory(ctx, rng)


#: the families of faults, each one thing done to the run (Jepsen's fault packages): a worker stopped or killed, a
#: worker's clock skewed, the store's server stopped, killed or cut off (its process or container), the store's clock
#: skewed, the workers' traffic to the store bent (Toxiproxy), the members of a cluster cut, lost or failed over, a
#: power cut (what was never fsynced dropped)
Family = Literal["worker", "worker-clock", "store", "store-clock", "network", "member", "power"]
FAMILIES: tuple[Family, ...] = get_args(Family)


@dataclass(frozen=True)
class FaultKind:
    """One row of the catalogue."""

    name: str
    #: one line for ``leasecheck nemeses``
    description: str
    #: how long the fault lasts, in ttls (low, high), drawn from the schedule's generator
    duration: tuple[float, float]
    #: the nemesis event ``f`` recorded when the fault starts, and when it is healed
    events: tuple[str, str]
    needs: frozenset[Need]
    factory: Factory | Lazy
    #: the situations (``leasecheck.histories.vocabulary.SITUATIONS``) a run with this fault must reach to count
    situations: tuple[str, ...] = ()
    #: the situations this fault makes likely and a run with it should reach, reported when it did not, not required
    seeks: tuple[str, ...] = ()
    #: what a fault of this kind takes whole (:data:`STORE`), if anything: the schedule starts none while another
    #: fault holding the same is on or still healing, since neither undoes the other's harm (a paused container
    #: cannot be paused again, a killed one cannot be paused, a restart must come after its reconnect)
    holds: str | None = None
    #: the family of faults it belongs to (:data:`FAMILIES`), declared with the row: what the verdict, the coverage and
    #: the report read a window of it as (a worker stopped, a worker's clock skewed, the store's power cut, ...)
    family: Family = "store"

    def make(self, ctx: FaultContext, rng: random.Random) -> Fault | None:
        return self.factory(ctx, rng)

    def duration_s(self, ctx: FaultContext, rng: random.Random) -> float:
        low, high = self.duration
        return ctx.ttl_s(rng.uniform(low, high))

    @property
    def on_store(self) -> bool:
        """A fault of the store itself (killed, paused, cut off), the family that brings about STORE_FAULT."""
        return bool(set(STORE_FAULT) & set(self.situations))

    @property
    def loses_power(self) -> bool:
        """A power loss (the store's, a member's, every member's): what was never fsynced is dropped at its start."""
        return self.family == "power"

    @property
    def module(self) -> str:
        """The module that defines the fault (and registers how ``leasecheck heal`` undoes it)."""
        return self.factory.module if isinstance(self.factory, Lazy) else self.factory.__module__


def _row(name: str, description: str, duration: tuple[float, float], events: tuple[str, str],
         factory: Factory | Lazy, *needs: Need, family: Family, situations: tuple[str, ...] = (),
         seeks: tuple[str, ...] = (), holds: str | None = None) -> FaultKind:
    return FaultKind(name, description, duration, events, frozenset(needs), factory, situations, seeks, holds, family)


_FAULTS, _CLOCK, _NETWORK = "leasecheck.nemesis.faults", "leasecheck.nemesis.clock", "leasecheck.nemesis.network"
_STORE_CLOCK, _CONTAINER = "leasecheck.nemesis.store_clock", "leasecheck.nemesis.container"
_MEMBERS, _POWER = "leasecheck.nemesis.members", "leasecheck.nemesis.power"
S, T, D, F, C, P = Need.SERVER, Need.TOXIPROXY, Need.DOCKER, Need.FAKETIME, Need.CLUSTER, Need.POWERFS
#: what the faults that stop, kill or cut off the store's server or container hold (FaultKind.holds): one at a time
STORE = "store"
#: what each family of faults exists to bring about (see the vocabulary's situations)
EXPIRY = ("claim-after-expiry",)
STORE_FAULT = ("lease-expires-during-store-fault",)
SKEWED_WORKER = ("lease-held-by-skewed-worker",)
PRIMARY_LOST = ("lease-granted-before-primary-lost",)
FAILED_OVER = (*PRIMARY_LOST, "lease-renewed-across-failover")
MEMBER_PARTITION = ("claim-during-member-partition",)
POWER_LOSS = ("granted-before-power-loss", "claim-after-power-loss")
#: what a fault makes likely (sought, not required: see FaultKind.seeks)
LAPSED = ("zombie-op-while-new-lapsed",)
IN_FLIGHT = ("op-in-flight-across-claim", "late-write-across-claim")
LAGGING = ("lagging-clock-claim-on-recent-node",)
#: a worker stopped (SIGSTOP) or killed (SIGKILL) with an op of each kind in flight: the faults aim there (see
#: :mod:`leasecheck.nemesis.inside`)
PAUSED_INSIDE = tuple(inside_situation("pause", f) for f in INSIDE_FUNCTIONS)
KILLED_INSIDE = tuple(inside_situation("kill", f) for f in INSIDE_FUNCTIONS)

#: every fault, in the order ``leasecheck nemeses`` lists them; a worker pause outlasts the ttl (the seed's GC pause)
CATALOGUE: tuple[FaultKind, ...] = (
    _row("pause", "SIGSTOP a worker (up to three, each inside an op of its own) for 1.5-3 ttl (the seed's GC pause), then SIGCONT",
         (1.5, 3.0), ("pause", "resume"), Lazy(_FAULTS, "make_pause"), family="worker", situations=EXPIRY,
         seeks=(*LAPSED, *IN_FLIGHT, *PAUSED_INSIDE)),
    _row("kill", "SIGKILL a worker (up to three, each inside an op of its own); a replacement starts under a new process number",
         (0.0, 0.0), ("kill", "start"), Lazy(_FAULTS, "make_kill"), family="worker", situations=EXPIRY,
         seeks=(*LAPSED, *KILLED_INSIDE)),  # nothing to heal: the replacement starts at once
    _row("pause-store", "SIGSTOP the store's server (Postgres, Redis) for 0.5-1.5 ttl",
         (0.5, 1.5), ("pause", "resume"), Lazy(_FAULTS, "make_pause_store"), S, family="store", situations=STORE_FAULT, holds=STORE),
    _row("kill-store", "SIGKILL the store's server, start it again on the same data 0.5-1.5 ttl later",
         (0.5, 1.5), ("kill", "start"), Lazy(_FAULTS, "make_kill_store"), S, family="store", situations=STORE_FAULT, holds=STORE),
    _row("clock-bump", "step one worker's wall clock by ±2-10 ttl for 1-3 ttl (what its backend sees as now)",
         (1.0, 3.0), ("clock-skew", "clock-reset"), Lazy(_CLOCK, "make_clock_bump"), family="worker-clock", situations=SKEWED_WORKER, seeks=LAGGING),
    _row("clock-strobe", "flip one worker's wall clock between 0 and ±2-10 ttl every 10-100 ms for 1-3 ttl",
         (1.0, 3.0), ("clock-skew", "clock-reset"), Lazy(_CLOCK, "make_clock_strobe"), family="worker-clock", situations=SKEWED_WORKER, seeks=LAGGING),
    _row("clock-store", "skew the store server's clock (libfaketime) by up to ±--store-skew for 1-2 ttl",
         (1.0, 2.0), ("clock-skew", "clock-reset"), Lazy(_STORE_CLOCK, "make_clock_store"), S, F, family="store-clock"),
    _row("partition", "Toxiproxy: cut off one worker, a minority or everyone from the store (hang or refuse) for 1.5-3 ttl",
         (1.5, 3.0), ("partition", "heal"), Lazy(_NETWORK, "make_partition"), S, T, family="network", situations=STORE_FAULT),
    _row("latency", "Toxiproxy: delay one worker's, a minority's or everyone's traffic by 0.2-1 ttl with jitter",
         (1.0, 2.0), ("latency", "heal"), Lazy(_NETWORK, "make_latency"), S, T, family="network", seeks=IN_FLIGHT),
    _row("bandwidth", "Toxiproxy: throttle one worker's, a minority's or everyone's traffic to 1-16 KB/s",
         (1.0, 2.0), ("bandwidth", "heal"), Lazy(_NETWORK, "make_bandwidth"), S, T, family="network"),
    _row("docker-pause", "--env docker: docker pause the store's container for 0.5-1.5 ttl",
         (0.5, 1.5), ("pause", "resume"), Lazy(_CONTAINER, "make_docker_pause"), S, D, family="store", situations=STORE_FAULT, holds=STORE),
    _row("docker-kill", "--env docker: docker kill the store's container, start it again on the same data",
         (0.5, 1.5), ("kill", "start"), Lazy(_CONTAINER, "make_docker_kill"), S, D, family="store", situations=STORE_FAULT, holds=STORE),
    _row("docker-disconnect", "--env docker: take the store's container off its network for 0.5-1.5 ttl",
         (0.5, 1.5), ("partition", "heal"), Lazy(_CONTAINER, "make_docker_disconnect"), S, D, family="store", situations=STORE_FAULT, holds=STORE),
    _row("isolate-primary", "--cluster: cut every link between the primary and the other members for 1.5-3 ttl",
         (1.5, 3.0), ("partition", "heal"), Lazy(_MEMBERS, "make_isolate_primary"), S, C,
         family="member", situations=(*PRIMARY_LOST, *MEMBER_PARTITION)),
    _row("partition-halves", "--cluster: cut a random minority of the members from the majority for 1.5-3 ttl",
         (1.5, 3.0), ("partition", "heal"), Lazy(_MEMBERS, "make_partition_halves"), S, C, family="member", situations=MEMBER_PARTITION),
    _row("partition-bridge", "--cluster: two sides that cannot see each other, one member seeing both, for 1.5-3 ttl",
         (1.5, 3.0), ("partition", "heal"), Lazy(_MEMBERS, "make_partition_bridge"), S, C, family="member", situations=MEMBER_PARTITION),
    _row("kill-primary", "--cluster: SIGKILL the primary's host, start it again on its data 1.5-3 ttl later",
         (1.5, 3.0), ("kill", "start"), Lazy(_MEMBERS, "make_kill_primary"), S, C,
         family="member", situations=(*FAILED_OVER, *STORE_FAULT)),
    _row("pause-primary", "--cluster: SIGSTOP the primary's host for 1.5-3 ttl, then SIGCONT",
         (1.5, 3.0), ("pause", "resume"), Lazy(_MEMBERS, "make_pause_primary"), S, C,
         family="member", situations=(*PRIMARY_LOST, *STORE_FAULT)),
    _row("failover", "--cluster: the cluster's own failover (SENTINEL FAILOVER, promote the standby, move the leader)",
         (1.0, 2.0), ("failover", "heal"), Lazy(_MEMBERS, "make_failover"), S, C, family="member", situations=FAILED_OVER),
    _row("clock-member", "--cluster: skew one member's clock (libfaketime) by up to ±--store-skew for 1-2 ttl",
         (1.0, 2.0), ("clock-skew", "clock-reset"), Lazy(_MEMBERS, "make_clock_member"), S, F, C, family="member"),
    _row("power-loss", "SIGKILL the store's server and drop every write it never fsynced (the page cache lost), start it "
         "again on what survived 0.5-1.5 ttl later", (0.5, 1.5), ("kill", "start"), Lazy(_POWER, "make_power_loss"), S, P,
         family="power", situations=(*STORE_FAULT, *POWER_LOSS), holds=STORE),
    _row("power-loss-member", "--cluster: cut one member's power (the primary half the time): its servers SIGKILLed, every "
         "write it never fsynced dropped, started again on what survived 1.5-3 ttl later", (1.5, 3.0), ("kill", "start"),
         Lazy(_POWER, "make_power_loss_member"), S, C, P, family="power", situations=(*STORE_FAULT, *POWER_LOSS), holds=STORE),
    _row("power-loss-all", "--cluster: cut every member's power at once (a data centre's outage), drop what each never "
         "fsynced, start them all again on what survived 1.5-3 ttl later", (1.5, 3.0), ("kill", "start"),
         Lazy(_POWER, "make_power_loss_all"), S, C, P, family="power", situations=(*STORE_FAULT, *POWER_LOSS), holds=STORE),
)

#: the catalogue by name
FAULTS: dict[str, FaultKind] = {kind.name: kind for kind in CATALOGUE}


class UnknownFault(BadInput):
    """A fault name the catalogue does not have; ``str()`` names the known ones."""


def lookup(names: Iterable[str]) -> tuple[FaultKind, ...]:
    """The rows for ``names``, in their order; raises UnknownFault naming every unknown and every known name."""
    names = list(names)
    unknown = [name for name in names if name not in FAULTS]
    if unknown:
        raise UnknownFault(f"unknown nemesis {', '.join(unknown)} (known: {', '.join(FAULTS)})")
    return tuple(FAULTS[name] for name in names)


def needs(kinds: Iterable[FaultKind]) -> frozenset[Need]:
    """Everything these faults need, together."""
    return frozenset(need for kind in kinds for need in kind.needs)


def needing(kinds: Iterable[FaultKind], need: Need) -> list[str]:
    """The names of those of ``kinds`` that need ``need``."""
    return [kind.name for kind in kinds if need in kind.needs]


def unmet(kinds: Iterable[FaultKind], provided: Iterable[Need]) -> str | None:
    """Why a run providing only ``provided`` cannot take these faults, in one line (the first need it lacks, with the
    faults needing it); None when it provides all they need. The runner refuses such a run before it starts."""
    kinds, have = list(kinds), set(provided)
    for need in Need:
        names = needing(kinds, need)
        if names and need not in have:
            return f"{', '.join(names)} {'needs' if len(names) == 1 else 'need'} {need.value}"
    return None


def import_fault_modules() -> list[str]:
    """Import every fault's module, so each has registered its undo records (for ``leasecheck heal``).

    A module whose optional extra is missing is skipped: no fault of it can
    have run here. Returns the modules imported.
    """
    done = []
    for module in dict.fromkeys(kind.module for kind in CATALOGUE):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        done.append(module)
    return done
