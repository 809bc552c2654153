"""``leasecheck run``: a backend under concurrent workers and faults, recorded, then checked.

The flow is DESIGN.md's "Data flow of one test": start the store, spawn the
workers (OS processes, one client each: :mod:`leasecheck.pool`), let the
nemesis inflict faults from the catalogue on its seeded schedule, record every
op through the hub, then the final phase — heal everything, stop the workers,
wait until every lease can have expired, read every node
(:mod:`leasecheck.final_reads`) — and check the history. Every fault is healed
and every process we started is stopped on every exit path: normal end,
Ctrl-C, or an exception.
"""

from __future__ import annotations

import logging
import queue
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from leasecheck.checker import Verdict, check_source
from leasecheck.environment import Environment, prepare
from leasecheck.final_reads import node_names, read_every_node
from leasecheck.histories import Header, HistoryWriter
from leasecheck.hub import Deliveries, Recorder, Slot
from leasecheck.nemesis.catalogue import Need, needs
from leasecheck.nemesis.context import FaultContext
from leasecheck.nemesis.faults import Fault
from leasecheck.nemesis.schedule import Nemesis
from leasecheck.nemesis.worker_clocks import ClockControl
from leasecheck.options import BadOptions, RunOptions, RunResult, Timing, check_store, validate
from leasecheck.pool import WorkerPool
from leasecheck.servers.base import EnvironmentFailure
from leasecheck.store_network import StoreNetwork
from leasecheck.storedir import new_run_dir, save_faults, write_json
from leasecheck.targets.base import Indeterminate, Target, TargetConfig, Unavailable
from leasecheck.targets.registry import TargetSpec, load

log = logging.getLogger("leasecheck.run")


class Run:
    """One run, from environment to verdict; ``execute()`` does it all."""

    run_dir: Path
    clocks: ClockControl
    spec: TargetSpec
    writer: HistoryWriter
    deliveries: Deliveries
    recorder: Recorder
    nemesis: Nemesis

    def __init__(self, opts: RunOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.kinds = validate(opts)
        self.opts = opts
        self.target_cls = load(opts.target)
        check_store(opts, self.kinds, self.target_cls.store)
        self.needs = needs(self.kinds)
        self.seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(2**31)
        self.progress = progress
        self.timing = Timing.of(opts, skews_store=Need.FAKETIME in self.needs)
        self.deaths: queue.Queue[Slot] = queue.Queue()
        self.env: Environment | None = None
        self.network: StoreNetwork | None = None
        self.pool: WorkerPool | None = None

    def _spawn(self) -> Slot:
        assert self.pool is not None
        return self.pool.spawn()

    def _save_faults(self, active: list[Fault]) -> None:
        """Keep faults.json true: what ``leasecheck heal`` must undo if we die now."""
        records = [r for r in (f.undo_record() for f in active) if r is not None]
        save_faults(self.run_dir, records)

    # -------------------------------------------------------------------- run

    def execute(self) -> RunResult:
        opts = self.opts
        self.run_dir = new_run_dir(Path(opts.store), opts.target)
        handler = _log_to(self.run_dir / "leasecheck.log")
        write_json(self.run_dir / "test.json", {"options": asdict(opts), "seed": self.seed, "argv": sys.argv})
        log.info("run %s: target %s, seed %d", self.run_dir, opts.target, self.seed)
        started = time.monotonic()
        self.clocks = ClockControl()  # a private directory, removed at the end
        try:
            producer = self._prepare()
            try:
                self._drive(started)
            finally:
                self._wind_down()
                save_faults(self.run_dir, [])
            time.sleep(self.timing.expiry_wait_s)
            read_every_node(self.spec, self.recorder, self.writer, node_names(self.deliveries.runs, opts.nodes))
            producer.close()
        finally:
            self._clean_up()
            log.removeHandler(handler)
            handler.close()
        return self._judge(time.monotonic() - started)

    def _prepare(self) -> Target:
        """Store, proxies, history, queue, recorder, workers' pool and nemesis; returns the producer's client."""
        opts = self.opts
        self.env = prepare(self.target_cls, self.run_dir, opts.url, skewable=Need.FAKETIME in self.needs, env=opts.env)
        self.spec = TargetSpec(opts.target, TargetConfig(url=self.env.url, ttl_ms=opts.ttl_ms, timeout_s=opts.op_timeout_s))
        if Need.TOXIPROXY in self.needs:  # the producer and the final reads bypass it
            self.network = StoreNetwork(self.run_dir / "toxiproxy", seed=self.seed)
        try:
            producer = self.spec.make()
            producer.setup()
        except (Unavailable, Indeterminate) as e:
            raise EnvironmentFailure(f"cannot reach the {opts.target} store at {self.env.url}: {e}") from None
        header = Header(opts.ttl_ms, self.timing.uncertainty_ms, {
            "target": opts.target, "seed": self.seed, "nemesis": list(opts.nemesis),
            "concurrency": opts.concurrency, "store": self.target_cls.store,
        })
        self.writer = HistoryWriter(self.run_dir / "history.jsonl", header)
        self.deliveries = Deliveries(
            random.Random(f"{self.seed}/queue"), opts.nodes, opts.dup_rate,
            visibility_s=self.timing.visibility_s,
            add_nodes=producer.add_nodes,
        )
        self.recorder = Recorder(self.writer, self.deliveries, self.deaths.put)
        self.pool = WorkerPool(self.spec, opts.workload, self.seed, opts.record, self.recorder, self.clocks, self.network)
        context = FaultContext(
            ttl_ms=opts.ttl_ms, workers=self.recorder.ready, clocks=self.clocks,
            network=self.network.network if self.network is not None else None,
            server=self.env.server, store_skew_ms=self.timing.store_skew_ms,
        )
        self.nemesis = Nemesis(
            self.kinds, opts.nemesis_interval, context, self.writer.nemesis, random.Random(f"{self.seed}/nemesis"),
            on_change=self._save_faults,
        )
        return producer

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
            self.network.heal()
        if self.env is not None:
            for report in self.env.heal_containers():
                log.info("container heal: %s", report)
        if not hasattr(self, "recorder"):
            return
        self.recorder.stopping.set()
        if self.pool is not None:
            self.pool.stop(self.timing.wind_down_s)
        self.recorder.join(10)
        self.deliveries.stop()

    def _clean_up(self) -> None:
        """Close the history, reset every clock, stop Toxiproxy and the store (on every exit path)."""
        if getattr(self, "writer", None) is not None:
            self.writer.close()
        self.clocks.reset_all()
        self.clocks.cleanup()
        if self.network is not None:
            self.network.stop()
        if self.env is not None:
            self.env.stop(keep_logs_in=self.run_dir)

    def _judge(self, seconds: float) -> RunResult:
        """Check the history and write results.json."""
        if self.opts.record:
            verdict = check_source(self.run_dir / "history.jsonl", budget=self.opts.check_budget)
        else:  # the recorder-overhead baseline: workers ran without recording, nothing to judge
            verdict = Verdict("unknown", [], {"ops": 0, "nodes": 0}, ["recording was off: no history to check"])
        stats = self._stats(seconds)
        write_json(self.run_dir / "results.json", {**verdict.to_json(), "seed": self.seed, "run": stats})
        return RunResult(self.run_dir, self.seed, verdict, stats)

    def _stats(self, seconds: float) -> dict[str, Any]:
        t = self.recorder.tally
        return {
            "seconds": round(seconds, 3), "ops": t.ops, "ok": t.ok, "fail": t.fail, "info": t.info,
            "fail_reasons": dict(t.by_reason), "deliveries": self.deliveries.delivered,
            "duplicate_deliveries": self.deliveries.duplicated, "runs": self.deliveries.runs,
            "faults": self.nemesis.started, "worker_processes": self.pool.spawned if self.pool is not None else 0,
        }


def _log_to(path: Path) -> logging.Handler:
    """Send the run's log to its folder (the caller removes the handler at the end)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


def run(opts: RunOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run one test; raises BadOptions (exit 3) or EnvironmentFailure (exit 4)."""
    return Run(opts, progress).execute()


__all__ = ["BadOptions", "EnvironmentFailure", "Run", "RunOptions", "RunResult", "run"]
