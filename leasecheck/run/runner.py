"""``leasecheck run``: a backend under concurrent workers and faults, recorded and checked as it goes.

The flow is docs/how-it-works.md's "Data flow of one test": start the store, start the
workers (OS processes, one client each, forked from a forkserver that has the workload
and the backend imported: :mod:`leasecheck.run.pool`), let the nemesis inflict faults
from the catalogue on its seeded schedule, record every op (each worker stamps and logs
its own; :mod:`leasecheck.run.merge` puts the streams in time order) while a thread checks
the history as it is written (:mod:`leasecheck.run.following`; nodes nobody can touch
again are closed as the run goes, :mod:`leasecheck.run.closing`), then the final phase —
heal everything, stop the workers, wait until every lease can have expired, read every
node left (:mod:`leasecheck.run.final_reads`) — and the verdict. Every fault is healed
and every process we started is stopped on every exit path: normal end, SIGINT /
SIGTERM (:mod:`leasecheck.frame.interrupts`), or an exception.

The run's clock and the nemesis start only when every worker is up and has said hello (a barrier: 64 workers take
~1.5 s to come up on two cores). The verdict is the run verdict (:mod:`leasecheck.verdict.run_verdict`): a run that
tested too little is ``unknown``. Everything the run makes lives in its run directory, never in the system's temp folder.
"""
from __future__ import annotations

import logging
import queue
import random
import signal
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from leasecheck.frame.aiming import AIM_SLOT, Aimer
from leasecheck.frame.folder import RunFrame
from leasecheck.histories import HistoryWriter
from leasecheck.histories.vocabulary import INSIDE_FAULTS
from leasecheck.nemesis.catalogue import Need, needs
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.host_clock import ClockWatch
from leasecheck.nemesis.protocol import Fault
from leasecheck.nemesis.schedule import Nemesis
from leasecheck.nemesis.worker_clocks import ClockControl
from leasecheck.report.inputs import recorded_replay
from leasecheck.run.closing import Closer
from leasecheck.run.deadline import Deadline
from leasecheck.run.deliveries import Deliveries
from leasecheck.run.environment import Environment, prepare_for
from leasecheck.run.final_reads import read_back
from leasecheck.run.following import Following
from leasecheck.run.header import run_header
from leasecheck.run.judgement import Snapshots, finish, progress_of
from leasecheck.run.merge import Merge
from leasecheck.run.options import BadOptions, RunOptions, RunResult, Timing, load_target, validate
from leasecheck.run.pool import WorkerPool
from leasecheck.run.recorder import Recorder, Slot
from leasecheck.rundir.files import CLOCKS_DIR, note_mp_tempdir, remove_leftovers
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.rundir.storedir import mark_latest
from leasecheck.rundir.worker_logs import WORKERS_DIR, Journal
from leasecheck.servers.base import EnvironmentFailure
from leasecheck.servers.store_network import StoreNetwork
from leasecheck.targets.base import Indeterminate, Target, Unavailable
from leasecheck.targets.registry import TargetSpec
from leasecheck.verdict.tails import HistoryTail

log = logging.getLogger("leasecheck.run")


class Run:
    """One run, from environment to verdict; ``execute()`` does it all."""

    run_dir: Path
    clocks: ClockControl
    spec: TargetSpec
    writer: HistoryWriter
    merge: Merge
    deliveries: Deliveries
    recorder: Recorder
    nemesis: Nemesis

    def __init__(self, opts: RunOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.kinds = validate(opts)
        self.opts = opts
        self.target_cls = load_target(opts, self.kinds)
        self.needs = needs(self.kinds)
        self.seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2**31)
        #: the life cycle both run kinds share: the folder and its files, the run id, the signals, faults.json
        self.frame = RunFrame(Path(opts.store), opts.target)
        self.run_id = self.frame.run_id  # in every node's name: runs that share a store never see each other's nodes
        self.progress = progress
        self.timing = Timing.of(opts, skews_store=Need.FAKETIME in self.needs)
        self.deaths: queue.Queue[Slot] = queue.Queue()
        self.env: Environment | None = None
        self.network: StoreNetwork | None = None
        self.pool: WorkerPool | None = None
        self.interrupts = self.frame.interrupts
        self.tail: HistoryTail | None = None
        #: when the test proper ends, and when it did (``--until-covered``'s figures in results.json)
        self.deadline: Deadline | None = None
        self.drove_until: float | None = None
        self.started: float | None = None
        self.following: Following | None = None
        self.closer: Closer | None = None
        #: --fail-fast stopped the run at its first proven anomaly
        self.stopped_early = False
        #: the target reads its protected resource back (the history's header says so): else no situation of a
        #: ``read-resource`` op applies to the run
        self.resource_read = True

    def _spawn(self) -> Slot:
        assert self.pool is not None
        return self.pool.spawn()

    # -------------------------------------------------------------------- run

    def execute(self) -> RunResult:
        """The run, phase by phase (docs/how-it-works.md), in its frame (:class:`~leasecheck.frame.folder.RunFrame`: the
        folder, its log and test.json, the signals; an exception marks the folder failed and goes on up). On every exit:
        every fault is healed and faults.json emptied, then the history closed, every clock reset, every process we
        started stopped."""
        with self.frame.opened(asdict(self.opts), self.seed, on_failure=self._failed, **recorded_replay()) as self.run_dir:
            self._open_run_folder()
            try:
                self._start_store()
                self._start_proxies()
                producer = self._connect_producer()
                self._open_history(producer)
                self._set_up_workers(producer)
                self._set_up_nemesis()
                try:
                    with self.frame.healed(self._heal):
                        if self._start_workers():
                            self._drive()
                        self.frame.say_if_interrupted()
                finally:
                    self._stop_workers()
                self._read_every_node()
                self.writer.close()  # finished (an interrupted run's too): its history-end event, the last line
                producer.close()
            finally:
                self._clean_up()
            return self._judge()

    def _open_run_folder(self) -> None:
        """The run's clock and the workers' clocks, in the folder the frame made."""
        log.info("run %s: target %s, seed %d", self.run_dir, self.opts.target, self.seed)
        self.started = time.monotonic()
        self.clocks = ClockControl(self.run_dir / CLOCKS_DIR)  # removed at the end, or by ``leasecheck heal``

    def _failed(self) -> None:
        """The run failed: let the checker thread end (the frame marks the folder failed)."""
        if self.following is not None:
            self.following.finish(timeout=5)

    # ---------------------------------------------------------- the parts

    def _start_store(self) -> None:
        """The store the backend runs against (a server of ours, or ``--url``), and the spec every client is made from."""
        self.env = prepare_for(self.opts, self.target_cls, self.run_dir, self.run_id, self.needs)
        self.spec = TargetSpec(self.opts.target, self.env.client_config(self.opts, self.run_dir))

    def _start_proxies(self) -> None:
        """Toxiproxy between each worker and the store, when a fault needs it (the producer and the final reads bypass it)."""
        self.network = StoreNetwork(self.run_dir / "toxiproxy", seed=self.seed) if Need.TOXIPROXY in self.needs else None

    def _connect_producer(self) -> Target:
        """The producer's client (it creates the queue's nodes), set up; a store it cannot reach is the environment's failure."""
        assert self.env is not None
        try:
            producer = self.env.set_up(self.spec.make)
        except (Unavailable, Indeterminate) as e:
            raise EnvironmentFailure(f"cannot reach the {self.opts.target} store at {self.env.url or '(no --url)'}: {e}") from None
        return producer

    def _open_history(self, producer: Target) -> None:
        """history.jsonl with its header, the merge of the workers' streams into it; only now is the run store/latest."""
        opts = self.opts
        cluster = self.env.members if self.env is not None else None  # its members and their addresses, for the report
        header = run_header(opts, self.seed, self.run_id, self.target_cls, producer, self.timing.uncertainty_ms, cluster)
        self.resource_read = header.meta["resource_read"]
        self.start_ns = time.monotonic_ns()  # the history's time origin: the workers stamp their events against it
        self.writer = HistoryWriter(RunFolder(self.run_dir).history, header, start_ns=self.start_ns)
        if opts.record:  # checked as it is written: each anomaly said when proven, --fail-fast stops on the first
            self.following = Following(self.writer, self.run_dir, budget=opts.check_budget,
                                       losses_ahead=any(k.loses_power for k in self.kinds))
            self.following.start()
        journal = Journal(self.run_dir / WORKERS_DIR) if opts.record else None
        self.merge = Merge(self.writer, journal)
        mark_latest(self.run_dir)  # only now: a run that failed to start never becomes store/latest

    def _set_up_workers(self, producer: Target) -> None:
        """The delivery queue, the recorder that serves the workers' pipes, the pool that starts them (none started yet)."""
        opts = self.opts
        self.deliveries = Deliveries(random.Random(f"{self.seed}/queue"), opts.nodes, opts.dup_rate,
                                     visibility_s=self.timing.visibility_s, add_nodes=producer.add_nodes, run_id=self.run_id)
        self.recorder = Recorder(self.writer, self.deliveries, self.deaths.put, self.merge, opts.workload.seen_nodes)
        self.recorder.steering.rng, self.recorder.steering.lagging = random.Random(f"{self.seed}/steering"), self.clocks.lagging
        if self.following is not None:  # nodes nobody can touch again are read, judged and forgotten as the run goes
            self.closer = Closer.started(self.spec, self.merge, self.deliveries, self.recorder, self.following,
                                         quiet_s=self.timing.expiry_wait_s)
        self.pool = WorkerPool(self.spec, opts.workload, self.seed, opts.record, self.recorder, self.clocks, self.network,
                               log_dir=self.run_dir / WORKERS_DIR, start_ns=self.start_ns)
        self.aimer: Aimer | None = None  # a worker pause or kill lands inside an op: the slot it arms, the notes that answer it
        if opts.record and any(kind.name in INSIDE_FAULTS for kind in self.kinds):
            self.aimer = Aimer(self.run_dir / CLOCKS_DIR / AIM_SLOT, self.resource_read, opts.goal_count, opts.require)
            self.recorder.on_between, self.pool.aim_path = self.aimer.note, str(self.aimer.path)

    def _set_up_nemesis(self) -> None:
        """The nemesis on its seeded schedule, and what its faults act on (not started yet)."""
        assert self.env is not None
        opts, (server, cluster) = self.opts, self.env.fault_targets()
        context = FaultContext(
            ttl_ms=opts.ttl_ms, workers=self.recorder.ready, holders=self.recorder.takeovers.holders,
            writing=self.recorder.takeovers.writing, clocks=self.clocks,
            network=self.network.network if self.network is not None else None,
            server=server, cluster=cluster, store_skew_ms=self.timing.store_skew_ms,
            halted=self.recorder.halted, resuming=self.recorder.resuming, aiming=self.aimer, hurried=self._hurried,
        )
        self.nemesis = Nemesis(
            self.kinds, opts.nemesis_interval, context, self.merge.nemesis, random.Random(f"{self.seed}/nemesis"),
            on_change=self.frame.save_faults, first_interval_s=opts.time_limit / 3,
        )
        self.recorder.store_out = self.nemesis.store_out

    # ---------------------------------------------------------- the test

    def _hurried(self, fault: str) -> bool:
        """Does the run want ``fault``'s evidence sooner? (its deadline's word: ``--until-covered`` while short)"""
        return self.deadline is not None and any(self.deadline.hurry(kind) for kind in self.kinds if kind.name == fault)

    def _check_parts(self) -> None:
        for part in (self.recorder, self.deliveries, self.nemesis):
            if part.error is not None:
                raise RuntimeError(f"{type(part).__name__.lower()} failed: {part.error!r}") from part.error

    def _replace_dead(self) -> Slot | None:
        """Start a replacement for a worker that died (waiting a moment for one to die); the one that died."""
        try:
            dead = self.deaths.get(timeout=0.1)
        except queue.Empty:
            return None
        new = self._spawn()
        self.merge.nemesis("start", {"victims": [new.process], "replaces": dead.process})
        log.info("worker %d (process %d) died; started process %d", dead.slot, dead.process, new.process)
        return dead

    def _start_workers(self) -> bool:
        """The barrier: spawn every worker and wait until each has said hello; False if interrupted first."""
        if self.interrupts.event.is_set():  # before anything was started: nothing to start
            return False
        n = self.opts.concurrency
        self.deliveries.start()
        self.recorder.start()
        log.info("starting %d workers", n)
        for _ in range(n):
            if self.interrupts.event.is_set():
                return False
            self._spawn()
        note_mp_tempdir(self.run_dir)  # the workers' forkserver socket is there: `heal` removes it after a kill -9
        limit = self.timing.startup_s(n)
        deadline = time.monotonic() + limit
        died = 0
        while len(self.recorder.ready()) < n or len(self.recorder.live()) < n:
            if self.interrupts.event.is_set():
                return False
            self._check_parts()
            if self._replace_dead() is not None:
                died += 1
                if died > n:
                    raise EnvironmentFailure(f"workers keep dying at start-up ({died} so far): {self.recorder.broken or 'see leasecheck.log'}")
            if time.monotonic() > deadline:
                raise EnvironmentFailure(f"only {len(self.recorder.ready())} of {n} workers were up after {limit:g} s")
        log.info("all %d workers up: the clock starts", n)
        self.recorder.tally.started = time.monotonic()
        self.recorder.go.set()
        return True

    def _drive(self) -> None:
        """The test proper: workers under the nemesis until the deadline (past the time limit while evidence is missing),
        or a signal; dead workers replaced, the progress callback fed."""
        assert self.started is not None
        end = self.deadline = Deadline(RunFolder(self.run_dir).history, self.kinds, self.opts.require, self.opts.time_limit,
                                       self.opts.longest_s, time.monotonic(), self.following.coverage if self.following else None,
                                       self.opts.coverage_goal(self.kinds, self.resource_read))
        # toward what the goal is short of: faults sooner, claims racing for a READY node, a zombie's phase
        self.nemesis.hurry, end.on_pace, self.recorder.steering.short = end.hurry, self.nemesis.repace, end.short
        self.deliveries.race_more = lambda: "claim-race-ready" in end.short()
        self.nemesis.start()
        self.clock_watch = ClockWatch.started(self.merge.nemesis, self.timing.uncertainty_ms)  # a VM restored, a resume
        self.tail = end.tail
        snapshots = Snapshots(self.run_dir, self.opts.snapshot_every_s, self.following, now=time.monotonic())
        while not self.interrupts.event.is_set():
            if end.passed(time.monotonic()) or self._failed_fast():
                break
            snapshots.due(time.monotonic(), self)
            self._check_parts()
            self._replace_dead()
            if self.progress is not None:
                try:
                    self.progress(progress_of(self, self.started))
                except KeyboardInterrupt:  # a caller's callback may stop the run this way (bench/bench_runner.py)
                    self.interrupts.interrupt(signal.SIGINT)
        self.drove_until = time.monotonic()
        snapshots.close()

    def _failed_fast(self) -> bool:
        """``--fail-fast`` and an anomaly is proven: the test is over (the run goes on to heal, record and report)."""
        self.stopped_early = bool(self.opts.fail_fast and self.following is not None and self.following.proven.is_set())
        return self.stopped_early

    # ---------------------------------------------------------- the end

    def _heal(self) -> list[Fault]:
        """Heal every fault: the nemesis', the proxies', the store's containers' or cluster's (whatever of them was
        made); the faults it could not heal (a host lost mid-run), which faults.json keeps."""
        unhealed: list[Fault] = []
        if hasattr(self, "nemesis"):
            self.nemesis.heal_all()
            unhealed = list(self.nemesis.unhealed)
        if self.network is not None:
            self.network.heal()
        if self.env is not None:
            for report in self.env.heal_store():
                log.info("store heal: %s", report)
        return unhealed

    def _stop_workers(self) -> None:
        """Let every worker finish its op and exit (kill stragglers); the rest of what they sent goes into the history."""
        if not hasattr(self, "recorder"):
            return
        self.recorder.stopping.set()
        if self.pool is not None:
            self.pool.stop(0.0 if self.stopped_early else self.timing.wind_down_s)  # --fail-fast: their open ops are info
        self.recorder.join(10)
        if self.closer is not None:
            self.closer.stop()
        self.deliveries.stop()
        if hasattr(self, "clock_watch"):
            self.clock_watch.stop()
        self.merge.drain()  # every worker is gone: what is still buffered goes into the history, in time order

    def _read_every_node(self) -> None:
        """Once every fault is healed and every lease can have expired: the final read of every node left."""
        read_back(self)

    def _clean_up(self) -> None:
        """Close the history, reset every clock, stop Toxiproxy and the store (on every exit path).

        A history not finished by now (the harness failed) is abandoned: it never gets its history-end
        event, so every reader says it was cut, never valid."""
        if getattr(self, "writer", None) is not None:
            self.writer.abandon()
        merge = getattr(self, "merge", None)
        if merge is not None and merge.journal is not None:  # drained, the history holds every event: the logs are redundant
            (merge.journal.remove if merge.drained else merge.journal.close)()  # else left for `leasecheck check RUN_DIR`
        self.clocks.reset_all()
        self.clocks.cleanup()
        if getattr(self, "aimer", None) is not None:
            self.aimer.close()  # type: ignore[union-attr]
        if self.network is not None:
            self.network.stop()
        if self.env is not None:
            self.env.stop(keep_logs_in=self.run_dir)
        remove_leftovers(self.run_dir)

    def _judge(self) -> RunResult:
        """Check the history, write results.json and the report: what the run returns."""
        return finish(self)


def run(opts: RunOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run one test; raises BadOptions (exit 3) or EnvironmentFailure (exit 4)."""
    return Run(opts, progress).execute()


__all__ = ["BadOptions", "EnvironmentFailure", "Run", "RunOptions", "RunResult", "run"]
