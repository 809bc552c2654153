"""``leasecheck run``: a backend under concurrent workers and faults, recorded, then checked.

The flow is DESIGN.md's "Data flow of one test": start the store, spawn the
workers (OS processes, one client each), let the nemesis inflict faults on its
seeded schedule, record every op through the hub, then the final phase — heal
everything, stop the workers, wait until every lease can have expired, read
every node — and check the history. Every fault is healed and every process we
started is stopped on every exit path: normal end, Ctrl-C, or an exception.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from leasecheck.checker import Verdict, check_source
from leasecheck.conformance import TargetSpec
from leasecheck.environment import Environment, prepare
from leasecheck.histories import Header, HistoryWriter
from leasecheck.hub import Deliveries, Recorder, Slot
from leasecheck.nemesis.clock import ClockBump, ClockControl, ClockStrobe, required_uncertainty_ms
from leasecheck.nemesis.faults import Fault, KillProcess, PauseProcess, ServerFault
from leasecheck.nemesis.network import NETWORK_EVENTS, Network, make_network_fault
from leasecheck.nemesis.schedule import Nemesis
from leasecheck.servers.base import EnvironmentFailure
from leasecheck.storedir import new_run_dir, save_faults, write_json
from leasecheck.targets.base import Indeterminate, NodeState, TargetConfig, Unavailable
from leasecheck.targets.registry import load
from leasecheck.workload import Workload, worker_main

log = logging.getLogger("leasecheck.run")

#: faults this runner knows, with one line each for ``leasecheck nemeses``
FAULTS = {
    "pause": "SIGSTOP one worker for 1.5-3 ttl (the seed's GC pause), then SIGCONT",
    "kill": "SIGKILL one worker; a replacement starts under a new process number",
    "pause-store": "SIGSTOP the store's server (Postgres, Redis) for 0.5-1.5 ttl",
    "kill-store": "SIGKILL the store's server, start it again on the same data 0.5-1.5 ttl later",
    "clock-bump": "step one worker's wall clock by ±2-10 ttl for 1-3 ttl (what its backend sees as now)",
    "clock-strobe": "flip one worker's wall clock between 0 and ±2-10 ttl every 10-100 ms for 1-3 ttl",
    "clock-store": "skew the store server's clock (libfaketime) by up to ±--store-skew for 1-2 ttl",
    "partition": "Toxiproxy: cut off one worker, a minority or everyone from the store (hang or refuse) for 1.5-3 ttl",
    "latency": "Toxiproxy: delay one worker's, a minority's or everyone's traffic by 0.2-1 ttl with jitter",
    "bandwidth": "Toxiproxy: throttle one worker's, a minority's or everyone's traffic to 1-16 KB/s",
    "docker-pause": "--env docker: docker pause the store's container for 0.5-1.5 ttl",
    "docker-kill": "--env docker: docker kill the store's container, start it again on the same data",
    "docker-disconnect": "--env docker: take the store's container off its network for 0.5-1.5 ttl",
}
#: faults that need a store server
SERVER_FAULTS = ("pause-store", "kill-store", "clock-store")
#: faults that need the store in a container (--env docker)
DOCKER_FAULTS = ("docker-pause", "docker-kill", "docker-disconnect")
#: faults that need each worker to reach the store over TCP through its own proxy
NETWORK_FAULTS = tuple(NETWORK_EVENTS)
PROCESS_FAULTS = tuple(FAULTS)


class BadOptions(ValueError):
    """Options that cannot make a run; ``str()`` is the one-line reason."""


@dataclass(frozen=True)
class RunOptions:
    """Everything that defines a run; written to test.json so it can be replayed."""

    target: str = "sqlite"
    url: str | None = None
    nemesis: tuple[str, ...] = ("pause",)
    nemesis_interval: float = 5.0
    time_limit: float = 30.0
    concurrency: int = 5
    ttl_ms: int = 1000
    nodes: int = 20
    dup_rate: float = 0.1
    rate: float = 0.0
    seed: int | None = None
    store: str = "store"
    #: "local": stores as local processes; "docker": as containers (Postgres, Redis)
    env: str = "local"
    clock_uncertainty_ms: float = 10.0
    #: the most the clock-store fault skews the store's clock (default: a quarter of the ttl)
    store_skew_ms: float | None = None
    op_timeout_s: float = 5.0
    check_budget: float = 60.0
    #: False only for the recorder-overhead benchmark: workers skip recording, the verdict is unknown
    record: bool = True
    workload: Workload = field(default_factory=Workload)


@dataclass
class RunResult:
    """What a run produced: its folder, the verdict, and its figures."""

    run_dir: Path
    seed: int
    verdict: Verdict
    stats: dict[str, Any]


def validate(opts: RunOptions) -> None:
    """Reject options that cannot make a run, before anything is started."""
    unknown = [k for k in opts.nemesis if k not in PROCESS_FAULTS]
    if unknown:
        raise BadOptions(f"unknown nemesis {', '.join(unknown)} (known: {', '.join(PROCESS_FAULTS)})")
    if opts.env not in ("local", "docker"):
        raise BadOptions(f"--env must be local or docker, not {opts.env!r}")
    if opts.env != "docker" and any(k in DOCKER_FAULTS for k in opts.nemesis):
        raise BadOptions("docker-* faults need --env docker")
    if opts.env == "docker" and "clock-store" in opts.nemesis:
        raise BadOptions("clock-store runs the store under libfaketime, which --env docker does not do")
    if opts.concurrency < 1:
        raise BadOptions("--concurrency must be at least 1")
    if opts.ttl_ms < 10:
        raise BadOptions("--ttl must be at least 10 ms")
    if opts.time_limit <= 0 or opts.nemesis_interval <= 0:
        raise BadOptions("--time-limit and --nemesis-interval must be positive")
    if opts.nodes < 1:
        raise BadOptions("--nodes must be at least 1")
    if not 0 <= opts.dup_rate <= 1:
        raise BadOptions("--dup-rate must be between 0 and 1")


#: how long each fault lasts, in ttls (low, high); a worker pause outlasts the ttl (the seed's GC pause)
DURATIONS = {
    "pause": (1.5, 3.0), "partition": (1.5, 3.0),
    "pause-store": (0.5, 1.5), "kill-store": (0.5, 1.5),
    "docker-pause": (0.5, 1.5), "docker-kill": (0.5, 1.5), "docker-disconnect": (0.5, 1.5),
    "clock-bump": (1.0, 3.0), "clock-strobe": (1.0, 3.0), "clock-store": (1.0, 2.0),
    "latency": (1.0, 2.0), "bandwidth": (1.0, 2.0),
    "kill": (0.0, 0.0),  # nothing to heal: the replacement starts at once
}


def _durations(ttl_s: float) -> Callable[[str, random.Random], float]:
    """A fault's duration in seconds, drawn from the nemesis' seeded RNG."""

    def duration(kind: str, rng: random.Random) -> float:
        low, high = DURATIONS[kind]
        return rng.uniform(low, high) * ttl_s

    return duration


class Run:
    """One run, from environment to verdict; ``execute()`` does it all."""

    def __init__(self, opts: RunOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> None:
        validate(opts)
        self.opts = opts
        self.target_cls = load(opts.target)
        self.seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2**31)
        self.progress = progress
        self.ctx = mp.get_context("spawn")
        self.deaths: queue.Queue[Slot] = queue.Queue()
        self.procs: dict[int, mp.process.BaseProcess] = {}
        self.next_slot = 0
        self.env: Environment | None = None
        self.toxiproxy: Any = None
        self.network: Network | None = None
        self.store_skew_ms = opts.store_skew_ms if opts.store_skew_ms is not None else opts.ttl_ms / 4
        #: the history's clock_uncertainty_ms: a skewed store clock misjudges intervals by up to twice the skew
        self.uncertainty_ms = opts.clock_uncertainty_ms
        if "clock-store" in opts.nemesis:
            self.uncertainty_ms = max(self.uncertainty_ms, required_uncertainty_ms(self.store_skew_ms))
        if self.target_cls.store not in ("postgres", "redis") and any(k in SERVER_FAULTS + NETWORK_FAULTS + DOCKER_FAULTS for k in opts.nemesis):
            raise BadOptions(f"{opts.target} has no store server to pause or kill (nemesis {', '.join(opts.nemesis)})")

    # ----------------------------------------------------------------- workers

    def _spawn(self) -> Slot:
        parent, child = self.ctx.Pipe()
        slot = self.next_slot
        self.next_slot += 1
        config = replace(self.spec.config, clock=self.clocks.clock(slot))
        if self.network is not None:  # each worker reaches the store through its own proxy
            config = replace(config, url=self.network.route(slot, self.spec.config.url))
        spec = TargetSpec(self.spec.target, config)
        p = self.ctx.Process(
            target=worker_main, args=(child, spec, self.opts.workload, self.seed, slot, self.opts.record),
            name=f"leasecheck-worker-{slot}", daemon=True,
        )
        p.start()
        child.close()
        self.procs[slot] = p
        return self.recorder.add(parent, slot, p.pid)

    def _make_fault(self, kind: str, rng: random.Random) -> Fault | None:
        ttl = self.opts.ttl_ms
        if kind in NETWORK_FAULTS:
            return make_network_fault(kind, self.network, rng, ttl) if self.network is not None else None
        if kind in ("clock-bump", "clock-strobe"):
            # one fault per clock at a time: healing one resets the clock to 0
            live = [s for s in self.recorder.ready() if not self.clocks.is_skewed(s.slot)]
            if not live:
                return None
            v = rng.choice(sorted(live, key=lambda s: s.slot))
            delta = rng.choice((-1, 1)) * rng.uniform(2, 10) * ttl
            if kind == "clock-bump":
                return ClockBump(self.clocks, [v.slot], delta, processes=[v.process])
            return ClockStrobe(self.clocks, [v.slot], delta, rng.uniform(10, 100), 3 * ttl / 1000, processes=[v.process])
        if kind in ("pause", "kill"):
            live = [s for s in self.recorder.ready() if s.pid is not None]
            if not live:
                return None
            victim = rng.choice(sorted(live, key=lambda s: s.slot))
            return (PauseProcess if kind == "pause" else KillProcess)(victim.process, victim.pid)  # type: ignore[arg-type]
        server = self.env.server if self.env else None
        if server is None:
            return None
        if kind in DOCKER_FAULTS:
            from leasecheck.nemesis.container import ContainerDisconnect, ContainerKill, ContainerPause

            container = getattr(server, "container", None)
            if container is None:
                return None
            cls = {"docker-pause": ContainerPause, "docker-kill": ContainerKill, "docker-disconnect": ContainerDisconnect}[kind]
            return cls(container)
        if kind == "clock-store":
            return server.clock_fault(rng.uniform(-1, 1) * self.store_skew_ms)  # type: ignore[attr-defined]
        if kind == "pause-store":
            pid = server.pid
            record = {"kind": "sigcont", "pids": [pid], "tree": True} if pid else None
            return ServerFault("pause-store", server.pause, server.resume, record=record)
        return ServerFault("kill-store", server.kill, server.start)

    def _start_network(self) -> None:
        """Toxiproxy in front of the store; the producer and the final reads bypass it."""
        from leasecheck.servers.toxiproxy import ToxiproxyServer

        self.toxiproxy = ToxiproxyServer(self.run_dir / "toxiproxy", seed=self.seed).start()
        self.network = Network(self.toxiproxy.url)

    def _stop_network(self) -> None:
        if self.network is not None:
            try:
                self.network.heal_everything()
                self.network.close()
            except Exception as e:  # the server dies with us; say so and go on
                log.warning("toxiproxy cleanup: %s", e)
        if self.toxiproxy is not None:
            self.toxiproxy.stop()

    def _save_faults(self, active: list[Fault]) -> None:
        """Keep faults.json true: what ``leasecheck heal`` must undo if we die now."""
        records = [r for r in (f.undo_record() for f in active) if r is not None]
        save_faults(self.run_dir, records)

    # -------------------------------------------------------------------- run

    def execute(self) -> RunResult:
        opts = self.opts
        self.run_dir = new_run_dir(Path(opts.store), opts.target)
        handler = logging.FileHandler(self.run_dir / "leasecheck.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        write_json(self.run_dir / "test.json", {"options": asdict(opts), "seed": self.seed, "argv": sys.argv})
        log.info("run %s: target %s, seed %d", self.run_dir, opts.target, self.seed)
        started = time.monotonic()
        self.clocks = ClockControl()  # a private directory, removed at the end
        try:
            self.env = prepare(self.target_cls, self.run_dir, opts.url, skewable="clock-store" in opts.nemesis, env=opts.env)
            self.spec = TargetSpec(opts.target, TargetConfig(url=self.env.url, ttl_ms=opts.ttl_ms, timeout_s=opts.op_timeout_s))
            if any(k in NETWORK_FAULTS for k in opts.nemesis):
                self._start_network()
            try:
                producer = self.spec.make()
                producer.setup()
            except (Unavailable, Indeterminate) as e:
                raise EnvironmentFailure(f"cannot reach the {opts.target} store at {self.env.url}: {e}") from None
            header = Header(opts.ttl_ms, self.uncertainty_ms, {
                "target": opts.target, "seed": self.seed, "nemesis": list(opts.nemesis),
                "concurrency": opts.concurrency, "store": self.target_cls.store,
            })
            self.writer = HistoryWriter(self.run_dir / "history.jsonl", header)
            self.deliveries = Deliveries(
                random.Random(f"{self.seed}/queue"), opts.nodes, opts.dup_rate,
                visibility_s=1.5 * opts.ttl_ms / 1000,
                add_nodes=producer.add_nodes,
            )
            self.recorder = Recorder(self.writer, self.deliveries, self.deaths.put)
            self.nemesis = Nemesis(
                opts.nemesis, opts.nemesis_interval, _durations(opts.ttl_ms / 1000), self._make_fault,
                self.writer.nemesis, random.Random(f"{self.seed}/nemesis"),
                on_change=self._save_faults,
            )
            try:
                self._drive(started)
            finally:
                self._wind_down()
                save_faults(self.run_dir, [])
            self._final_reads()
            producer.close()
        finally:
            if getattr(self, "writer", None) is not None:
                self.writer.close()
            self.clocks.reset_all()
            self.clocks.cleanup()
            self._stop_network()
            if self.env is not None:
                self.env.stop(keep_logs_in=self.run_dir)
            log.removeHandler(handler)
            handler.close()
        if opts.record:
            verdict = check_source(self.run_dir / "history.jsonl", budget=opts.check_budget)
        else:  # the recorder-overhead baseline: workers ran without recording, nothing to judge
            verdict = Verdict("unknown", [], {"ops": 0, "nodes": 0}, ["recording was off: no history to check"])
        stats = self._stats(time.monotonic() - started)
        write_json(self.run_dir / "results.json", {**verdict.to_json(), "seed": self.seed, "run": stats})
        return RunResult(self.run_dir, self.seed, verdict, stats)

    def _drive(self, started: float) -> None:
        """The test proper: workers under the nemesis until the time limit (or Ctrl-C)."""
        self.deliveries.start()
        for _ in range(self.opts.concurrency):
            self._spawn()
        self.recorder.start()
        self.nemesis.start()
        deadline = time.monotonic() + self.opts.time_limit
        try:
            while time.monotonic() < deadline:
                for part in (self.recorder, self.deliveries, self.nemesis):
                    if part.error is not None:
                        raise RuntimeError(f"{type(part).__name__.lower()} failed: {part.error!r}") from part.error
                try:
                    dead = self.deaths.get(timeout=0.2)
                except queue.Empty:
                    dead = None
                if dead is not None:
                    new = self._spawn()
                    self.writer.nemesis("start", {"victims": [new.process], "replaces": dead.process})
                    log.info("worker %d (process %d) died; started process %d", dead.slot, dead.process, new.process)
                if self.progress is not None:
                    self.progress(self.snapshot(started))
        except KeyboardInterrupt:
            log.info("interrupted: winding down")
            print("\ninterrupted: healing faults and checking what was recorded", file=sys.stderr)

    def snapshot(self, started: float) -> dict[str, Any]:
        t = self.recorder.tally
        elapsed = time.monotonic() - started
        return {
            "elapsed": elapsed, "ops": t.ops, "ok": t.ok, "fail": t.fail, "info": t.info,
            "ops_per_s": t.ops / max(1e-9, time.monotonic() - t.started),
            "faults": self.nemesis.active_names(), "workers": len(self.recorder.live()),
        }

    def _wind_down(self) -> None:
        """Heal every fault, then let every worker finish its op and exit (kill stragglers)."""
        if hasattr(self, "nemesis"):
            self.nemesis.heal_all()
        if self.network is not None:
            self.network.heal_everything()
        if self.env is not None:
            for report in self.env.heal_containers():
                log.info("container heal: %s", report)
        if not hasattr(self, "recorder"):
            return
        self.recorder.stopping.set()
        grace = time.monotonic() + 3 * self.opts.ttl_ms / 1000 + self.opts.op_timeout_s + 5
        for p in list(self.procs.values()):
            p.join(max(0.0, grace - time.monotonic()))
        for p in self.procs.values():
            if p.is_alive():
                p.kill()
                p.join(5)
        self.recorder.join(10)
        self.deliveries.stop()

    def _final_reads(self) -> None:
        """Wait until every lease can have expired, then read every node once."""
        time.sleep((self.opts.ttl_ms + self.uncertainty_ms) / 1000 + 0.05)
        reader = self.spec.make()
        process = self.recorder.new_process()
        nodes = [f"run-{r}/node-{i}" for r in range(1, self.deliveries.runs + 1) for i in range(self.opts.nodes)]
        for node in nodes:
            self.writer.invoke(process, "read", node, {})
            try:
                state: NodeState = reader.read(node)
            except Exception as e:
                self.writer.complete(process, "info", {"error": f"{type(e).__name__}: {e}"})
                process = self.recorder.new_process()
                reader.close()
                reader = self.spec.make()
                continue
            self.writer.complete(process, "ok", state.to_json())
        reader.close()

    def _stats(self, seconds: float) -> dict[str, Any]:
        t = self.recorder.tally
        return {
            "seconds": round(seconds, 3), "ops": t.ops, "ok": t.ok, "fail": t.fail, "info": t.info,
            "fail_reasons": dict(t.by_reason), "deliveries": self.deliveries.delivered,
            "duplicate_deliveries": self.deliveries.duplicated, "runs": self.deliveries.runs,
            "faults": self.nemesis.started, "worker_processes": self.next_slot,
        }


def run(opts: RunOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run one test; raises BadOptions (exit 3) or EnvironmentFailure (exit 4)."""
    return Run(opts, progress).execute()


__all__ = ["BadOptions", "EnvironmentFailure", "RunOptions", "RunResult", "run"]
