"""What defines a run (:class:`RunOptions`), what refuses one (:func:`validate`, :func:`load_target`), and the durations it derives.

Faults are validated against the catalogue (:mod:`leasecheck.nemesis.catalogue`):
unknown names are refused naming the known ones, and each fault's needs
(a store server, Docker, libfaketime) are checked against the options before
anything is started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from leasecheck.errors import BadInput
from leasecheck.frame.ending import RunResult as RunResult  # the one result of a run of either kind
from leasecheck.histories.vocabulary import SITUATIONS
from leasecheck.lists import BadList, distinct, repeated
from leasecheck.nemesis import clock
from leasecheck.nemesis.catalogue import CATALOGUE, FaultKind, Need, UnknownFault, lookup, needing, unmet
from leasecheck.nemesis.store_clock import required_uncertainty_ms
from leasecheck.run.clusters import CLUSTERS
from leasecheck.run.workload_options import Workload
from leasecheck.targets.base import Target
from leasecheck.targets.durability import PROFILES
from leasecheck.targets.exec_target import EXEC_PREFIX, EXEC_STORES, ExecTarget
from leasecheck.targets.registry import load, server_not_installed
from leasecheck.targets.urls import url_problem
from leasecheck.verdict.situations import CoverageGoal, coverage_goal

#: stores we run as servers (what the store faults pause, kill and proxy)
SERVER_STORES = ("postgres", "redis", "zookeeper", "etcd")
#: stores we can run under libfaketime (what clock-store skews)
FAKETIME_STORES = ("postgres", "redis")


#: ``--min-count``'s default: each applicable situation reached this many times
MIN_COUNT = 3
#: ``--max-time``'s default, in time limits
MAX_TIME_LIMITS = 4.0


class BadOptions(BadInput):
    """Options that cannot make a run; ``str()`` is the one-line reason."""


@dataclass(frozen=True)
class RunOptions:
    """Everything that defines a run; written to test.json so it can be replayed."""

    target: str = "sqlite"
    url: str | None = None
    #: for ``--target exec:COMMAND``: the store leasecheck starts for the child (its URL is the child's
    #: ``LEASECHECK_URL``, and store faults can hit it); "none": the child's own, named by ``url`` if at all
    exec_store: str = "none"
    nemesis: tuple[str, ...] = ("pause",)
    nemesis_interval: float = 5.0
    time_limit: float = 30.0
    #: after the time limit, go on up to this many more seconds while the history still lacks
    #: what the run verdict needs (an ok claim, renew, effect, commit, a contended claim, every
    #: fault started and healed); 0: stop at the time limit, and the verdict says what was missing
    evidence_wait_s: float = 0.0
    #: coverage situations the run must reach (``--require``): it goes on past the time limit (up to
    #: ``evidence_wait_s``) while one is missing, and is ``unknown`` if one never happened, as it is for the
    #: situations each fault requires. Why: a test that asserts a situation was reached waits on the
    #: history showing it, not on the machine being fast enough to show it within the time limit
    require: tuple[str, ...] = ()
    #: ``--until-covered``: past the time limit, go on until every situation that applies to the run's faults was
    #: reached ``min_count`` times (and the run verdict lacks nothing), up to ``max_time`` seconds in all. Why: a
    #: gate should end on evidence that it reached the dangerous windows, not on the clock
    until_covered: bool = False
    #: how often each applicable situation must be reached (``--min-count``; None: :data:`MIN_COUNT`)
    min_count: int | None = None
    #: the most an ``--until-covered`` run's test proper lasts, seconds (``--max-time``; None: 4 × the time limit)
    max_time: float | None = None
    #: ``--strict-coverage``: a situation still short of ``min_count`` at ``max_time`` makes the run ``unknown``
    strict_coverage: bool = False
    concurrency: int = 5
    ttl_ms: int = 1000
    nodes: int = 20
    dup_rate: float = 0.1
    rate: float = 0.0
    seed: int | None = None
    store: str = "store"
    #: "local": stores as local processes; "docker": as containers (Postgres, Redis)
    env: str = "local"
    #: a replicated store leasecheck starts instead of one server (``leasecheck clusters``); None: one server
    cluster: str | None = None
    #: a deployment file (``--hosts``): the store's members on hosts of the team's own, faulted over SSH or docker
    #: exec (:mod:`leasecheck.hosts`); clients reach the store at ``url``
    hosts: str | None = None
    #: how durably the store keeps what it acknowledged (:data:`leasecheck.targets.durability.PROFILES`)
    store_config: str = "durable"
    clock_uncertainty_ms: float = 10.0
    #: the most the clock-store fault skews the store's clock (default: a quarter of the ttl)
    store_skew_ms: float | None = None
    op_timeout_s: float = 5.0
    check_budget: float = 60.0
    #: stop at the first proven anomaly (heal, record, report, exit 1) instead of running to the time limit
    fail_fast: bool = False
    #: seconds between snapshots of results.json and the report while the run goes (0: none)
    snapshot_every_s: float = 300.0
    #: False only for the recorder-overhead benchmark: workers skip recording, the verdict is unknown
    record: bool = True
    workload: Workload = field(default_factory=Workload)

    @property
    def goal_count(self) -> int | None:
        """How many times ``--until-covered`` wants each situation reached (None: the run has no goal)."""
        return (self.min_count or MIN_COUNT) if self.until_covered else None

    def coverage_goal(self, kinds: Sequence[FaultKind], resource_read: bool = True) -> CoverageGoal | None:
        """What ``--until-covered`` waits for (every situation applicable to these faults and a target that reads its
        resource back or not, ``min_count`` times), or None."""
        if not self.until_covered:
            return None
        return coverage_goal(kinds, self.require, self.goal_count or MIN_COUNT, self.strict_coverage, resource_read)

    @property
    def longest_s(self) -> float:
        """The most the test proper lasts: the time limit and ``--evidence-wait``, or ``--until-covered``'s ``--max-time``
        (4 × the time limit unless given) when that is longer."""
        longest = self.time_limit + self.evidence_wait_s
        if self.until_covered:
            longest = max(longest, self.max_time if self.max_time is not None else MAX_TIME_LIMITS * self.time_limit)
        return longest


def _they(names: list[str], one: str, many: str) -> str:
    return f"{', '.join(names)} {one if len(names) == 1 else many}"


def validate(opts: RunOptions) -> tuple[FaultKind, ...]:
    """Reject options that cannot make a run, before anything is started; the catalogue rows of ``--nemesis``."""
    try:
        distinct(opts.nemesis, "--nemesis")  # options made in Python too (an audit's, a benchmark's), not only parsed ones
        repeated(opts.require, "--require")
        kinds = lookup(opts.nemesis)
    except (BadList, UnknownFault) as e:
        raise BadOptions(str(e)) from None
    if opts.exec_store not in EXEC_STORES:
        raise BadOptions(f"--exec-store must be one of {', '.join(EXEC_STORES)}, not {opts.exec_store!r}")
    if opts.target.startswith(EXEC_PREFIX):
        # they move the worker's logical clock (TargetConfig.clock), which a child process never reads
        skewing = [kind.name for kind in kinds if kind.module == clock.__name__]
        if skewing:
            raise BadOptions(f"{_they(skewing, 'skews', 'skew')} the worker's own clock, which an exec: child does not read")
    elif opts.exec_store != "none":
        raise BadOptions("--exec-store is for --target exec:COMMAND (other backends declare their store)")
    if opts.env not in ("local", "docker"):
        raise BadOptions(f"--env must be local or docker, not {opts.env!r}")
    cluster_problem(opts, kinds)
    if opts.store_config not in PROFILES:
        raise BadOptions(f"--store-config must be one of {', '.join(PROFILES)}, not {opts.store_config!r}")
    docker_only = needing(kinds, Need.DOCKER)
    if opts.env != "docker" and docker_only:
        raise BadOptions(f"{_they(docker_only, 'needs', 'need')} --env docker")
    faketime = needing(kinds, Need.FAKETIME)
    if opts.env == "docker" and faketime:
        raise BadOptions(f"{_they(faketime, 'runs', 'run')} the store under libfaketime, which --env docker does not do")
    if opts.concurrency < 1:
        raise BadOptions("--concurrency must be at least 1")
    if opts.ttl_ms < 10:
        raise BadOptions("--ttl must be at least 10 ms")
    if opts.time_limit <= 0 or opts.nemesis_interval <= 0:
        raise BadOptions("--time-limit and --nemesis-interval must be positive")
    if opts.evidence_wait_s < 0:
        raise BadOptions("--evidence-wait must not be negative")
    goal_options = [flag for flag, given in (("--min-count", opts.min_count is not None), ("--max-time", opts.max_time is not None),
                                             ("--strict-coverage", opts.strict_coverage)) if given]
    if goal_options and not opts.until_covered:
        raise BadOptions(f"{', '.join(goal_options)} {'is' if len(goal_options) == 1 else 'are'} for --until-covered")
    if opts.min_count is not None and opts.min_count < 1:
        raise BadOptions("--min-count must be at least 1")
    if opts.max_time is not None and opts.max_time < opts.time_limit:
        raise BadOptions(f"--max-time {opts.max_time:g} is less than --time-limit {opts.time_limit:g}: the time limit is the least a run lasts")
    unknown = [s for s in opts.require if s not in SITUATIONS]
    if unknown:
        raise BadOptions(f"--require {unknown[0]}: no such situation (one of {', '.join(SITUATIONS)})")
    if opts.nodes < 1:
        raise BadOptions("--nodes must be at least 1")
    if not 0 <= opts.dup_rate <= 1:
        raise BadOptions("--dup-rate must be between 0 and 1")
    if (problem := store_folder_problem(Path(opts.store))) is not None:
        raise BadOptions(f"--store {opts.store}: {problem}")
    return kinds


def cluster_problem(opts: RunOptions, kinds: tuple[FaultKind, ...]) -> None:
    """Refuse ``--cluster`` with what cannot go with it, and the member faults without it or ``--hosts`` (BadOptions)."""
    member_faults = needing(kinds, Need.CLUSTER)
    if opts.hosts is not None:
        hosts_problem(opts, kinds)
        return
    if opts.cluster is None:
        if member_faults:
            raise BadOptions(f"{_they(member_faults, 'acts', 'act')} on the members of a cluster: add --cluster KIND"
                             f" ({', '.join(CLUSTERS)}), or --hosts FILE for your own")
        return
    kind = CLUSTERS.get(opts.cluster)
    if kind is None:
        raise BadOptions(f"--cluster {opts.cluster}: no such cluster (one of {', '.join(CLUSTERS)})")
    if opts.env != "local":
        raise BadOptions("--cluster starts its members as local processes, on hosts of their own: not with --env docker")
    if opts.url:
        raise BadOptions("--cluster starts a cluster of leasecheck's own; --url names a store of yours: give one or the other")
    one_server = [k.name for k in kinds if Need.SERVER in k.needs and Need.CLUSTER not in k.needs]
    if one_server:
        raise BadOptions(f"{_they(one_server, 'acts', 'act')} on one store server; a cluster's faults are "
                         f"{', '.join(k.name for k in CATALOGUE if Need.CLUSTER in k.needs)}")
    skewing = needing(kinds, Need.FAKETIME)
    if skewing and not kind.skewable:
        skewable = ", ".join(name for name, row in CLUSTERS.items() if row.skewable)
        raise BadOptions(f"{_they(skewing, 'skews', 'skew')} a member's clock under libfaketime, which {opts.cluster}"
                         f" cannot take (leasecheck skews the members of {skewable})")


def hosts_problem(opts: RunOptions, kinds: tuple[FaultKind, ...]) -> None:
    """Refuse ``--hosts FILE`` with what cannot go with it: the file itself (its first problem, ``FILE:LINE: what``),
    a cluster or containers of ours, no ``--url``, a store fault on a deployment of several members, a clock no member
    lets leasecheck skew (BadOptions)."""
    from leasecheck.hosts.deployment import DeploymentError, load_deployment

    if opts.cluster is not None or opts.env != "local":
        raise BadOptions("--hosts faults a deployment of yours; --cluster and --env docker start stores of leasecheck's own:"
                         " give one or the other")
    try:
        deployment = load_deployment(opts.hosts or "")
    except DeploymentError as e:
        raise BadOptions(str(e)) from None
    if not opts.url:
        raise BadOptions(f"--hosts {opts.hosts}: add --url, the address your clients reach the {deployment.store} at")
    one_server = [k.name for k in kinds if Need.SERVER in k.needs and Need.CLUSTER not in k.needs
                  and Need.TOXIPROXY not in k.needs]
    if one_server and (len(deployment.members) != 1 or needing(kinds, Need.FAKETIME)):
        raise BadOptions(f"{_they(one_server, 'acts', 'act')} on one store server: through --hosts, on a deployment of one"
                         f" member, and a store's clock as clock-member (a member whose faketime file the deployment gives)")
    if needing(kinds, Need.FAKETIME) and not any(m.faketime for m in deployment.members):
        raise BadOptions(f"{_they(needing(kinds, Need.FAKETIME), 'skews', 'skew')} a member's clock: leasecheck never steps"
                         f" a host's clock, and no member of {opts.hosts} gives a faketime file")


def profiled(opts: RunOptions, store: str | None) -> bool:
    """Does ``--store-config`` set the store's durability in this run? For SQLite always (its client runs the
    PRAGMAs); for a Postgres or Redis server only when leasecheck starts it itself, locally (not a store of yours,
    a cluster or a container)."""
    return store == "sqlite" or (not (opts.url or opts.hosts or opts.cluster) and opts.env == "local"
                                 and store in ("postgres", "redis"))


def provided(opts: RunOptions, store: str | None) -> set[Need]:
    """The needs a run of these options meets that the other checks do not already ask about: the power-loss layer
    under a Postgres or Redis server leasecheck starts locally, or under every member of a cluster it starts."""
    ours = (profiled(opts, store) and store != "sqlite") or (opts.cluster is not None and opts.hosts is None)
    return {need for need in Need if need is not Need.POWERFS or ours}


def _deployed_store(path: str) -> str:
    from leasecheck.hosts.deployment import load_deployment

    return load_deployment(path).store


def store_folder_problem(store: Path) -> str | None:
    """Why ``store`` cannot hold run folders (a file is in the way), or None; it may not exist yet."""
    for folder in (store, *store.parents):
        if folder.exists():
            if not folder.is_dir():
                return f"{folder} is a file, not a folder" if folder == store else f"{folder} (on its path) is a file"
            return None
    return None


def check_store(opts: RunOptions, kinds: tuple[FaultKind, ...], store: str | None) -> None:
    """Reject faults that need a store server for a backend whose store is none we run (a file, the user's own),
    and a backend that brings its own store (``store = None``) without ``--url``: we cannot start it. An
    ``exec:`` child may need no store at all: it runs with an empty ``LEASECHECK_URL`` then."""
    exec_target = opts.target.startswith(EXEC_PREFIX)
    if store not in SERVER_STORES and needing(kinds, Need.SERVER):
        hint = " (--exec-store postgres or redis starts one for it)" if exec_target else ""
        raise BadOptions(f"{opts.target} has no store server to pause or kill (nemesis {', '.join(opts.nemesis)}){hint}")
    faketime = needing(kinds, Need.FAKETIME)
    if faketime and store in SERVER_STORES and store not in FAKETIME_STORES and opts.hosts is None:
        raise BadOptions(f"{_they(faketime, 'runs', 'run')} the store under libfaketime, which leasecheck does for"
                         f" {' and '.join(FAKETIME_STORES)} servers only, not {store}")
    own_server = [k.name for k in kinds if Need.SERVER in k.needs and Need.TOXIPROXY not in k.needs]
    if opts.url and own_server and opts.hosts is None:  # with --hosts the deployment says how to reach its process  # the store is the user's: no process of ours to pause, kill or skew
        raise BadOptions(f"{_they(own_server, 'acts', 'act')} on a store server that leasecheck started itself, and"
                         f" --url names a store of yours: drop --url (leasecheck then starts a throwaway"
                         f" {store or 'store'} server) or choose faults that need no server of ours")
    if opts.url and (problem := url_problem(store, opts.url)) is not None:
        raise BadOptions(f"--url: {problem}")
    if store is None and not opts.url and not exec_target:  # an exec: child may need no store (LEASECHECK_URL empty)
        raise BadOptions(f"{opts.target} brings its own store (its class says store = None): pass the store's address"
                         " with --url URL (the adapter gets it as self.config.url)")



def load_target(opts: RunOptions, kinds: tuple[FaultKind, ...]) -> type[Target]:
    """The backend class ``--target`` names (an ``exec:`` child over ``--exec-store``'s store), refused (BadOptions) when it
    cannot take the run: its store (:func:`check_store`), a server whose client library is missing, the ttl."""
    target_cls = load(opts.target)
    if issubclass(target_cls, ExecTarget) and opts.exec_store != "none":
        target_cls = target_cls.with_store(opts.exec_store)
    if opts.cluster is not None and target_cls.store != CLUSTERS[opts.cluster].store:
        raise BadOptions(f"--cluster {opts.cluster} runs {CLUSTERS[opts.cluster].store}; --target {opts.target}"
                         f" runs on {target_cls.store or 'a store of its own'}")
    if opts.hosts is not None and target_cls.store != (deployed := _deployed_store(opts.hosts)):
        raise BadOptions(f"--hosts {opts.hosts} deploys {deployed}; --target {opts.target} runs on {target_cls.store or 'a store of its own'}")
    check_store(opts, kinds, target_cls.store)
    if (unmet_need := unmet(kinds, provided(opts, target_cls.store))) is not None:
        raise BadOptions(f"{unmet_need}: leasecheck puts there the Postgres or Redis server it starts itself (no --url,"
                         f" --hosts or --env docker) and the members of a --cluster it starts")
    if not opts.url and (lacking := server_not_installed(target_cls.store)) is not None:
        raise BadOptions(f"--target {opts.target}: {lacking}")  # a team's adapter need not declare psycopg to be told
    if (problem := target_cls.ttl_problem(opts.ttl_ms)) is not None:
        raise BadOptions(f"--target {opts.target}: {problem}")
    return target_cls

@dataclass(frozen=True)
class Timing:
    """Every duration a run derives from the lease, worked out here once.

    The ttl comes in milliseconds — as the user gives it, the history records
    it and backends take it — and stays in milliseconds; what the harness
    waits for is in seconds, and those are derived here and nowhere else.
    """

    ttl_ms: int
    #: the history's clock_uncertainty_ms
    uncertainty_ms: float
    #: the most the clock-store fault skews the store's clock
    store_skew_ms: float
    op_timeout_s: float

    @classmethod
    def of(cls, opts: RunOptions, skews_store: bool) -> Timing:
        """From the options; a skewed store clock misjudges intervals by up to twice the skew."""
        skew = opts.store_skew_ms if opts.store_skew_ms is not None else opts.ttl_ms / 4
        uncertainty = opts.clock_uncertainty_ms
        if skews_store:
            uncertainty = max(uncertainty, required_uncertainty_ms(skew))
        return cls(opts.ttl_ms, uncertainty, skew, opts.op_timeout_s)

    @property
    def visibility_s(self) -> float:
        """How long a delivered node stays invisible before the queue delivers it again: 1.5 ttl."""
        return 1.5 * self.ttl_ms / 1000

    @property
    def wind_down_s(self) -> float:
        """How long the workers get to finish their op and exit: a renew period or three, an op's timeout, slack."""
        return 3 * self.ttl_ms / 1000 + self.op_timeout_s + 5

    def startup_s(self, workers: int) -> float:
        """How long every worker gets to come up and say hello: ~1.5 s for 64 on two cores, ~40 s if spawned; room for a busy machine."""
        return 60.0 + 2.0 * workers

    @property
    def expiry_wait_s(self) -> float:
        """How long until every lease can have expired, by any clock the history allows."""
        return (self.ttl_ms + self.uncertainty_ms) / 1000 + 0.05
