"""One queue run: the library's workers under faults run leasecheck's task; the history checked like any other.

The flow mirrors ``leasecheck run`` (docs/auditing.md, "Job queues"): start the
broker, start N of the library's own workers, enqueue jobs (and keep enough of
them waiting that no worker idles), wait for the first execution to start (the
run's clock and the nemesis start then: a worker's start-up is not the library's
fault), inflict the faults on the seeded schedule until the time limit, then
stop enqueuing and let every job finish (a zombie wakes, acts and returns within
the library's timeout and its longest stall), heal, read every job one last
time, stop the workers and the broker, and put the history together
(:mod:`.assemble`). Faults are healed and every process we started is stopped
on every exit path.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from leasecheck.checker import check_source
from leasecheck.errors import BadInput
from leasecheck.frame.ending import RunResult, draw_report, last_word, record_anomalies, write_results
from leasecheck.frame.folder import RunFrame
from leasecheck.frame.store_server import store_server
from leasecheck.histories import Header
from leasecheck.histories.format import EffectFence
from leasecheck.nemesis.catalogue import FaultKind, Need, lookup
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.protocol import Fault
from leasecheck.nemesis.schedule import Nemesis
from leasecheck.queue_run.aim_notes import AimNotes
from leasecheck.queue_run.assemble import Entry, ResourceRead, assemble
from leasecheck.queue_run.faults import AIMED_FAULTS, POWER_LOSS_FAULT, QUEUE_FAULTS, queue_kinds
from leasecheck.queue_run.history import read_events, write_history
from leasecheck.queue_run.live import LiveCheck
from leasecheck.queue_run.options import QueueOptions
from leasecheck.queue_run.watcher import Watcher
from leasecheck.queue_run.workers import QueueWorkers, worker_python_path
from leasecheck.rundir.files import remove_leftovers
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.rundir.storedir import mark_latest
from leasecheck.servers.base import EnvironmentFailure, LocalServer
from leasecheck.servers.store_network import StoreNetwork
from leasecheck.targets.durability import check_profile, settings
from leasecheck.targets.queues.base import QueueConfig, QueueLibrary
from leasecheck.targets.queues.registry import load
from leasecheck.targets.queues.resource import Resource
from leasecheck.targets.queues.task import BUSY_DIR, EVENTS_DIR, PLAN_FILE, RESOURCE_FILE
from leasecheck.verdict.attribution import fault_victims
from leasecheck.verdict.run_verdict import evidence_of, fault_windows, run_verdict
from leasecheck.verdict.situations import coverage_json

log = logging.getLogger("leasecheck.queue_run")


class QueueRun:
    """One run of a queue library's audit; ``execute()`` does it all."""

    def __init__(self, opts: QueueOptions) -> None:
        bad = [n for n in opts.nemesis if n not in QUEUE_FAULTS]
        if bad:
            raise BadInput(f"a queue run takes the faults {', '.join(QUEUE_FAULTS)}, not {', '.join(bad)}")
        self.opts = opts
        self.cls: type[QueueLibrary] = load(opts.library)
        if POWER_LOSS_FAULT in opts.nemesis and self.cls.broker not in ("redis", "postgres"):
            raise BadInput(f"power-loss cuts a Redis or Postgres broker's power; {opts.library}'s broker is {self.cls.broker}")
        check_profile(opts.store_config)
        if opts.mode == "fenced" and self.cls.identity != "attempt":
            raise BadInput(f"{opts.library} hands its executions no attempt number: it has no fenced mode")
        if (problem := self.cls.ttl_problem(opts.ttl_ms)) is not None:
            raise BadInput(problem)
        self.kinds: list[FaultKind] = list(lookup(list(opts.nemesis))) if opts.nemesis else []
        #: the life cycle both run kinds share: the folder and its files, the run id, the signals, faults.json
        self.frame = RunFrame(Path(opts.store), f"queue-{opts.library}")
        self.run_id = self.frame.run_id  # in every job's name: runs that share a broker never see each other's jobs
        self.enqueued: dict[str, int] = {}
        self.nemesis_events: list[tuple[int, str, dict[str, Any]]] = []
        self.replaced = 0
        self._dead: list[Any] = []
        self._lock = threading.Lock()
        #: set by SIGINT / SIGTERM (the frame's): the loops end, the run heals, stops and records what it has
        self.stop = self.frame.interrupts.event
        #: when the first execution started (the run's clock)
        self.started: float | None = None
        self.server: LocalServer | None = None
        self.workers: QueueWorkers | None = None
        self.watcher: Watcher | None = None
        self.nemesis: Nemesis | None = None
        self.network: StoreNetwork | None = None
        #: the history so far, checked every few seconds (anomalies said as proven); --fail-fast stopped the test
        self.live: LiveCheck | None = None
        self.stopped_early = False
        #: the aim of a library whose task heartbeats: its pauses and kills land between a heartbeat and a write
        self.aim: AimNotes | None = None

    # ------------------------------------------------------------------ the run

    def execute(self) -> RunResult:
        """The run in its frame (:class:`~leasecheck.frame.folder.RunFrame`: the folder, its log and test.json, the
        signals; an exception marks the folder failed and goes on up): every fault healed and faults.json emptied, every
        process we started stopped, on every exit; then the history put together and judged."""
        with self.frame.opened(asdict(self.opts), self.opts.seed, kind="queue") as self.run_dir:
            self.queue_dir = self.run_dir / "queue"
            try:
                with self.frame.healed(self._heal):
                    self._start_broker()
                    self._prepare()
                    if self._start():
                        self._follow()
                        self._drive()
                        if not self.stopped_early:  # --fail-fast: the open executions stay open (info)
                            self._drain()
                    self.frame.say_if_interrupted()
            finally:
                self._stop_all()
            history = self._write_history()
            return self._judge(history)

    def _start_broker(self) -> None:
        """The library's broker in the run folder: Redis or Postgres as a lease run's store is started (its durability
        profile, the power-loss layer under a ``power-loss`` run), or Temporal's dev server."""
        if self.cls.broker == "temporal":
            from leasecheck.servers.temporal import TemporalServer

            self.server = TemporalServer(self.run_dir / self.cls.broker).start()
            return
        self.server = store_server(self.cls.broker, self.run_dir, profile=self.opts.store_config,
                                   power_layer=POWER_LOSS_FAULT in self.opts.nemesis).start()

    def _prepare(self) -> None:
        """The queue folder (plan, resource, events), the library's broker set up, the watcher and the workers made."""
        opts = self.opts
        assert self.server is not None
        for sub in (EVENTS_DIR, BUSY_DIR):
            (self.queue_dir / sub).mkdir(parents=True, exist_ok=True)
        if self.cls.heartbeat and any(f in AIMED_FAULTS for f in opts.nemesis):  # a pause lands between beat and write
            self.aim = AimNotes(self.queue_dir, self.run_id, time.monotonic_ns())
        (self.queue_dir / PLAN_FILE).write_text(json.dumps(
            {"seed": opts.seed, "mode": opts.mode, "ttl_ms": opts.ttl_ms, "stall_rate": opts.stall_rate,
             "aim": self.aim.name if self.aim is not None else None}))
        Resource(self.queue_dir / RESOURCE_FILE).create()
        config = QueueConfig(self.server.url, opts.ttl_ms, opts.mode, self.run_id, str(self.queue_dir), dict(opts.options))
        self.producer = self.cls(config)
        self.producer.setup()
        self.watcher = Watcher(self.cls(config), interval_s=min(0.2, opts.ttl_ms / 10_000))
        if "partition" in opts.nemesis:  # each worker reaches the broker through a proxy of its own (the producer
            self.network = StoreNetwork(self.run_dir / "toxiproxy", seed=opts.seed)  # and the watcher do not)
        network = self.network

        def library_for(slot: int) -> QueueLibrary:
            return self.producer if network is None else self.cls(replace(config, url=network.route(slot, config.url)))

        self.workers = QueueWorkers(library_for, self.queue_dir, self.run_dir / "workers", worker_python_path(self.cls))
        self.start_ns = time.monotonic_ns()
        if self.aim is not None:
            self.aim.start_ns = self.start_ns  # what a held task's word is stamped from (history time)
        mark_latest(self.run_dir)

    def _enqueue(self, n: int) -> None:
        first = len(self.enqueued)
        jobs = [f"{self.run_id}-j{i:04d}" for i in range(first, first + n)]
        at = time.monotonic_ns()  # before the call: the library cannot take a job before it is enqueued
        try:
            self.producer.enqueue(jobs)
        except Exception as e:
            if not any(Need.SERVER in kind.needs for kind in self.kinds):  # no fault of ours touched the broker
                raise
            # the broker was cut off or restarted under the producer (a connection its restart closed): the jobs may or
            # may not be queued; watched as enqueued, a claim that never came stays open, and the next call reconnects
            log.warning("enqueueing %d jobs during a broker fault failed (%s): they may or may not be queued", n, e)
        for job in jobs:
            self.enqueued[job] = at
        assert self.watcher is not None
        self.watcher.add(jobs)

    def _start(self) -> bool:
        """Workers up and jobs waiting; True once an execution has started (the run's clock starts then)."""
        assert self.workers is not None and self.watcher is not None
        for _ in range(self.opts.workers):
            self.workers.spawn()
        self._enqueue(2 * self.opts.workers)
        self.watcher.start()
        limit = 60 + 10 * self.opts.workers
        deadline = time.monotonic() + limit
        while not any(p.stat().st_size for p in (self.queue_dir / EVENTS_DIR).iterdir()):
            self._replace_dead(at_start=True)
            if time.monotonic() > deadline:
                raise EnvironmentFailure(f"{self.opts.library}: no worker started a job in {limit} s; "
                                         f"the last worker's log:\n{self.workers.log_tail()}")
            if self.stop.wait(0.05):
                return False
        log.info("the first execution started: the clock starts")
        self.started = time.monotonic()
        return True

    def _record_nemesis(self, f: str, value: Any) -> None:
        with self._lock:
            self.nemesis_events.append((time.monotonic_ns(), f, value if isinstance(value, dict) else {"value": value}))
        with (self.queue_dir / "nemesis.jsonl").open("a") as journal:
            journal.write(json.dumps({"t": time.monotonic_ns(), "f": f, "value": value}) + "\n")

    def _drive(self) -> None:
        opts = self.opts
        assert self.workers is not None and self.watcher is not None
        workers = self.workers
        context = FaultContext(ttl_ms=opts.ttl_ms, workers=workers.live, holders=workers.busy, server=self.server,
                               network=self.network.network if self.network is not None else None,
                               aiming=self.aim.aimer if self.aim is not None else None)
        self.nemesis = Nemesis(self.kinds, opts.nemesis_interval, context, self._record_nemesis,
                               random.Random(f"{opts.seed}/nemesis"), on_change=self.frame.save_faults,
                               first_interval_s=opts.time_limit / 4)
        self.nemesis.start()
        end = time.monotonic() + opts.time_limit
        while time.monotonic() < end and not self.stop.is_set():
            if self.opts.fail_fast and self.live is not None and self.live.proven.is_set():
                self.stopped_early = True
                log.info("the first anomaly is proven: --fail-fast stops the test")
                break
            if self.nemesis.error is not None:
                raise RuntimeError(f"nemesis failed: {self.nemesis.error!r}") from self.nemesis.error
            self._replace_dead()
            waiting = len(self.enqueued) - len(self.watcher.finished)
            if waiting < 2 * opts.workers and not self.nemesis.store_out():  # a broker that is out takes no job
                self._enqueue(opts.workers)
            self.stop.wait(0.05)

    def _drain(self) -> None:
        """No more jobs: heal, then let every job finish (a zombie wakes and returns) within its bound."""
        assert self.watcher is not None
        if self.nemesis is not None:
            self.nemesis.heal_all()
        # an execution that stalled just before the time limit wakes within 3 ttl and returns a little later
        bound = time.monotonic() + 3.5 * self.opts.ttl_ms / 1000 + 2
        while time.monotonic() < bound and not self.stop.is_set():
            self._replace_dead()
            live = {w.slot for w in self.workers.live()} if self.workers is not None else set()
            busy = self.workers.busy() & live if self.workers is not None else set()
            if len(self.watcher.finished) >= len(self.enqueued) and not busy:
                break
            self.stop.wait(0.05)

    def _replace_dead(self, at_start: bool = False) -> None:
        """A worker that died (killed by the nemesis, or by itself) is replaced, as its supervisor would."""
        assert self.workers is not None
        self._dead += self.workers.deaths()
        if self._dead and self.nemesis is not None and self.nemesis.store_out():
            return  # a worker that exits when its broker is gone (RQ's) is replaced once the broker is back
        dead_now, self._dead = self._dead, []
        for dead in dead_now:
            self.replaced += 1
            if self.replaced > 3 * self.opts.workers + 10:
                raise EnvironmentFailure(f"{self.opts.library}: workers keep dying ({self.replaced}); "
                                         f"the last worker's log:\n{self.workers.log_tail()}")
            new = self.workers.spawn()
            if not at_start:
                self._record_nemesis("start", {"victims": [new.slot], "replaces": dead.slot})
            log.info("worker %d died; started worker %d", dead.slot, new.slot)

    def _follow(self) -> None:
        """The live check of the history so far (:mod:`.live`), from the run's first execution on."""
        if self.opts.live_every_s > 0:
            self.live = LiveCheck(self._so_far, self.queue_dir, every_s=self.opts.live_every_s)
            self.live.start()

    def _so_far(self) -> tuple[Header, list[Entry], int]:
        """The history as recorded so far: what the live check judges (copies: the run goes on meanwhile)."""
        assert self.watcher is not None
        with self._lock:
            nemesis = list(self.nemesis_events)
        entries = assemble(dict(self.enqueued), read_events(self.queue_dir / EVENTS_DIR, warn=False),
                           list(self.watcher.reads), nemesis, [])
        return self._header(), entries, self.start_ns

    def _heal(self) -> list[Fault]:
        """Heal every fault: the nemesis', the proxies' (whatever of them was made); the faults it could not heal (a
        host lost mid-run)."""
        if self.nemesis is not None:
            self.nemesis.heal_all()
        if self.network is not None:
            self.network.heal()
        return list(self.nemesis.unhealed) if self.nemesis is not None else []

    def _stop_all(self) -> None:
        """Once healed: the live check, the watcher and the workers stopped, every job read one last time, the broker
        stopped."""
        if self.live is not None:
            self.live.finish()
        if self.watcher is not None:
            self.watcher.stop()
        if self.workers is not None:
            self.workers.stop()
        if self.watcher is not None and self.server is not None:
            try:
                self.watcher.sweep()  # the final reads: every job as the library leaves it
            except Exception as e:
                log.warning("final reads failed: %s", e)
        for lib in (getattr(self, "producer", None), self.watcher.library if self.watcher else None):
            if lib is not None:
                try:
                    lib.close()
                except Exception:
                    pass
        if self.network is not None:
            self.network.stop()
        if self.aim is not None:
            self.aim.close()
        if self.server is not None:
            self.server.resume()  # a paused server cannot shut down (the nemesis healed it; say it twice)
            self.server.stop()
        remove_leftovers(self.run_dir)  # the broker's data, and a server home linked from outside the run

    @staticmethod
    def required_ops(library: str) -> Sequence[str]:
        """The ops a run must have seen succeed: a library without a heartbeat has no ``renew``."""
        return ("claim", "renew", "effect", "commit") if load(library).heartbeat else ("claim", "effect", "commit")

    # ------------------------------------------------------------------ the history

    def _write_history(self) -> Path:
        assert self.watcher is not None
        entries = assemble(self.enqueued, read_events(self.queue_dir / EVENTS_DIR), self.watcher.reads,
                           self.nemesis_events, self._read_resources())
        return write_history(RunFolder(self.run_dir).history, self._header(), entries, self.start_ns)

    def _header(self) -> Header:
        opts = self.opts
        return Header(opts.ttl_ms, 50, {"target": f"queue:{opts.library}", "library": self.cls.library,
                                        "mode": opts.mode, "seed": opts.seed, "run_id": self.run_id,
                                        "nemesis": list(opts.nemesis), "workers": opts.workers,
                                        **({"durability": {"profile": opts.store_config, "settings": said}}
                                           if (said := settings(self.cls.broker, opts.store_config)) else {})},
                      effect_fence=effect_fence(opts.mode), lease_expiry="queue")

    def _read_resources(self) -> list[ResourceRead]:
        """Each job's protected resource, read once every worker stopped (in the order the jobs were enqueued)."""
        resource = Resource(self.queue_dir / RESOURCE_FILE)
        out = []
        for job in self.enqueued:
            invoked = time.monotonic_ns()
            state = resource.read(job)
            out.append(ResourceRead(job, invoked, time.monotonic_ns(), state.to_json()))
        return out

    def _judge(self, history: Path) -> RunResult:
        """The run verdict of the history, its last word (:func:`~leasecheck.frame.ending.last_word`: an interrupted run
        keeps its verdict), results.json, anomalies.jsonl and report.html: what the run returns."""
        opts = self.opts
        checked = check_source(history, windows=fault_windows, faults=fault_victims)
        with history.open("rb") as f:
            evidence = evidence_of(f)
        ops = self.required_ops(opts.library)
        valid, reason = run_verdict(checked.valid, evidence, queue_kinds(opts.nemesis), checked.coverage or _empty(),
                                    opts.require, ops)
        valid, reason = last_word(valid, reason, checked.cut, self.frame.interrupts, self.started)
        verdict = replace(checked, valid=valid)
        stats = {"jobs": len(self.enqueued), "finished": len(self.watcher.finished) if self.watcher else 0,
                 "reads": len(self.watcher.reads) if self.watcher else 0,
                 "faults": self.nemesis.started if self.nemesis else 0, "worker_processes": self.replaced + opts.workers,
                 **({"stopped_at_first_anomaly": True} if self.stopped_early else {})}
        if stats["finished"] < stats["jobs"]:
            verdict.warnings.append(f"{stats['jobs'] - stats['finished']} of {stats['jobs']} jobs enqueued never finished "
                                    f"(the broker may have lost them: nothing of theirs is judged)")
        write_results(self.run_dir, verdict, reason, self.frame.interrupts, target=f"queue:{opts.library}",
                      library=self.cls.library, mode=opts.mode, nemesis=list(opts.nemesis), seed=opts.seed,
                      run_dir=str(self.run_dir), run=stats,
                      coverage=coverage_json(checked.coverage or _empty(), queue_kinds(opts.nemesis), opts.require, queue=True))
        end_s = (time.monotonic_ns() - self.start_ns) / 1e9 if hasattr(self, "start_ns") else 0.0
        record_anomalies(self.run_dir, verdict, end_s, self.live.said_at if self.live is not None else None)
        draw_report(self.run_dir)
        return RunResult(self.run_dir, opts.seed, verdict, stats, reason, self.frame.interrupted)


def effect_fence(mode: str) -> EffectFence:
    """The rule the history's effects are judged by. ``documented``: the protocol's own (``"lease"``: once the job
    was run again, nothing of an older execution may land), which a task that trusts the queue breaks by design;
    ``fenced``: what a resource checking the library's attempt number promises (``"token"``: nothing below the
    largest attempt it accepted), which lets a stale execution write before the newer one's first write."""
    return "lease" if mode == "documented" else "token"


def _empty() -> Any:
    from leasecheck.checker.coverage import Coverage

    return Coverage()


def run_queue(opts: QueueOptions) -> RunResult:
    """Run one queue audit run; raises BadInput (options it cannot take) or EnvironmentFailure."""
    return QueueRun(opts).execute()


__all__ = ["QueueOptions", "QueueRun", "RunResult", "effect_fence", "run_queue"]
