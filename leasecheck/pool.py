"""The worker processes of a run: spawned one per slot, replaced when they die, stopped at the end.

Workers are separate OS processes (``spawn``, never ``fork``: a worker holds
database connections) so that a pause or a clock skew hits one worker alone.
Each gets its own wall clock (slot ``n`` reads ``clocks.clock(n)``) and, when
the run has Toxiproxy, its own proxy to the store.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import replace
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess

from leasecheck.hub import Recorder, Slot
from leasecheck.interrupts import shielded
from leasecheck.nemesis.worker_clocks import ClockControl
from leasecheck.store_network import StoreNetwork
from leasecheck.targets.registry import TargetSpec
from leasecheck.workload import Workload, worker_main


class WorkerPool:
    """Spawns workers into the recorder; ``stop`` lets them finish (or kills them)."""

    def __init__(
        self, spec: TargetSpec, workload: Workload, seed: int, record: bool, recorder: Recorder,
        clocks: ClockControl, network: StoreNetwork | None = None,
    ) -> None:
        self.spec = spec
        self.workload = workload
        self.seed = seed
        self.record = record
        self.recorder = recorder
        self.clocks = clocks
        self.network = network
        self.procs: dict[int, BaseProcess] = {}
        #: worker processes spawned so far, replacements included (the next one's slot)
        self.spawned = 0
        self._mp = mp.get_context("spawn")

    def spawn(self) -> Slot:
        """Start the next worker (a new slot, with its own clock and proxy) and register it with the recorder."""
        parent, child = self._mp.Pipe()
        slot = self.spawned
        self.spawned += 1
        config = replace(self.spec.config, clock=self.clocks.clock(slot))
        if self.network is not None:  # each worker reaches the store through its own proxy
            config = replace(config, url=self.network.route(slot, self.spec.config.url))
        spec = replace(self.spec, config=config)
        p = self._mp.Process(
            target=worker_main, args=(child, spec, self.workload, self.seed, slot, self.record),
            name=f"leasecheck-worker-{slot}", daemon=True,
        )
        # the resource tracker's first start unblocks SIGINT / SIGTERM in this thread: start it outside the shield
        resource_tracker.ensure_running()
        with shielded():  # the child starts with SIGINT / SIGTERM blocked, until it ignores them
            p.start()
        child.close()
        self.procs[slot] = p
        return self.recorder.add(parent, slot, p.pid)

    def stop(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` in all for every worker to exit; kill the stragglers."""
        deadline = time.monotonic() + grace_s
        for p in list(self.procs.values()):
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs.values():
            if p.is_alive():
                p.kill()
                p.join(5)
