"""The worker processes of a run: started one per slot, replaced when they die, stopped at the end.

Workers are separate OS processes so that a pause or a clock skew hits one
worker alone. Each gets its own wall clock (slot ``n`` reads
``clocks.clock(n)``) and, when the run has Toxiproxy, its own proxy to the store.

They are forked from the run's zygote (:mod:`leasecheck.run.zygote`: a forkserver
that has imported the workload and the backend's module once), never from the
harness, which holds connections and threads; a worker makes its own client
after the fork. That takes 64 workers up in a fraction of what ``spawn`` (a
fresh interpreter importing everything, per worker) took. Should the zygote
fail (a preloaded module started a thread or hangs, the forkserver died), the
pool says so in the run's log and spawns the rest of its workers instead.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import time
from dataclasses import dataclass, replace
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, ClassVar, cast

from leasecheck.frame.interrupts import shielded
from leasecheck.nemesis.worker_clocks import ClockControl
from leasecheck.run import zygote
from leasecheck.run.recorder import Recorder, Slot
from leasecheck.run.worker_pipe import Recording
from leasecheck.run.workload import worker_main
from leasecheck.run.workload_options import Workload
from leasecheck.servers.store_network import StoreNetwork
from leasecheck.targets.base import Target
from leasecheck.targets.registry import TargetSpec, load

log = logging.getLogger("leasecheck.run")


@dataclass(frozen=True)
class ResolvedSpec(TargetSpec):
    """A :class:`TargetSpec` whose backend class the harness has found already: a worker imports it by its path.

    ``TargetSpec.make`` reads every installed package's entry points to find a
    name (5-10 ms of CPU a call, ``module:Class`` included): 64 workers' worth is
    a good part of a second on two cores, and the answer is the harness's.
    """

    #: ``module:qualname`` of the class ``load(target)`` gave the harness
    where: str = ""

    def make(self, **changes: Any) -> Target:
        config = replace(self.config, **changes) if changes else self.config
        module, _, name = self.where.partition(":")
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return cast("type[Target]", obj)(config)

    @classmethod
    def of(cls, spec: TargetSpec) -> TargetSpec:
        """``spec`` with its class resolved, when that class can be imported by its path (not an exec: one, made on the fly)."""
        found = load(spec.target)
        where = f"{found.__module__}:{found.__qualname__}"
        try:
            obj: Any = importlib.import_module(found.__module__)
            for part in found.__qualname__.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            return spec
        return cls(spec.target, spec.config, where) if obj is found else spec


class WorkerPool:
    """Starts workers into the recorder; ``stop`` lets them finish (or kills them)."""

    #: how workers start: ``"forkserver"`` (forked from the run's zygote) or ``"spawn"`` (a fresh
    #: interpreter each: what the zygote replaced, kept as its fallback and the benchmark's baseline)
    start_method: ClassVar[str] = "forkserver"

    def __init__(
        self, spec: TargetSpec, workload: Workload, seed: int, record: bool, recorder: Recorder,
        clocks: ClockControl, network: StoreNetwork | None = None, log_dir: Path | None = None, start_ns: int = 0,
    ) -> None:
        self.spec = spec
        #: what the workers are given: ``spec``, its class resolved once here
        self._worker_spec = ResolvedSpec.of(spec)
        self.workload = workload
        self.seed = seed
        self.record = record
        self.recorder = recorder
        self.clocks = clocks
        self.network = network
        #: where each recording worker keeps its log (:mod:`leasecheck.rundir.worker_logs`), and the history's time origin
        self.log_dir = log_dir
        self.start_ns = start_ns
        self.procs: dict[int, BaseProcess] = {}
        #: worker processes spawned so far, replacements included (the next one's slot)
        self.spawned = 0
        self._method = self.start_method
        #: the modules the zygote imports once (None until this pool has asked for the zygote)
        self._preload: list[str] | None = None
        #: the slot a pause or kill arms to land inside an op (:mod:`leasecheck.nemesis.inside`); the runner sets it
        self.aim_path: str | None = None

    def spawn(self) -> Slot:
        """Start the next worker (a new slot, with its own clock and proxy) and register it with the recorder."""
        parent, child = mp.Pipe()
        slot = self.spawned
        self.spawned += 1
        config = replace(self.spec.config, clock=self.clocks.clock(slot))
        if self.network is not None:  # each worker reaches the store through its own proxy
            config = replace(config, url=self.network.route(slot, self.spec.config.url))
        spec = replace(self._worker_spec, config=config)
        process = self.recorder.new_process()
        stream = self.recorder.merge.stream()  # before the start: nothing the worker stamps can precede it
        recording = None
        if self.record:
            assert self.log_dir is not None, "a recording worker needs a folder for its log"
            recording = Recording(str(self.log_dir), self.start_ns, process, self.aim_path)
        try:
            p = self._start(f"leasecheck-worker-{slot}", (child, spec, self.workload, self.seed, slot, recording))
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.procs[slot] = p
        return self.recorder.add(parent, slot, p.pid, process, stream)

    def _start(self, name: str, args: tuple[object, ...]) -> BaseProcess:
        """The worker, started: forked by the zygote, or spawned (for good, once the zygote failed)."""
        if self._method == "forkserver":
            forked = mp.get_context("forkserver").Process(target=worker_main, args=args, name=name, daemon=True)
            try:
                if self._preload is None:
                    cls = load(self.spec.target)
                    preload = zygote.preloads(cls.__module__, cls.requires)  # exec: its module, with the class made on the fly
                    zygote.acquire(preload)
                    self._preload = preload  # acquired: stop() releases it
                else:
                    zygote.ensure_running(self._preload)  # started again, from the right thread, should it have died
                zygote.start(forked)
                return forked
            except (OSError, EOFError) as e:  # it died, or was stuck, before serving (see leasecheck.run.zygote)
                log.warning("the workers' zygote failed (%s: %s): spawning workers instead", type(e).__name__, e)
                self._method = "spawn"
        p = mp.get_context("spawn").Process(target=worker_main, args=args, name=name, daemon=True)
        # the resource tracker's first start unblocks SIGINT / SIGTERM in this thread: start it outside the shield
        resource_tracker.ensure_running()
        with shielded():  # the child starts with SIGINT / SIGTERM blocked, until it ignores them
            p.start()
        return p

    def stop(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` in all for every worker to exit; kill the stragglers; then stop the zygote."""
        deadline = time.monotonic() + grace_s
        for p in list(self.procs.values()):
            p.join(max(0.0, deadline - time.monotonic()))
        for slot, p in self.procs.items():
            if p.is_alive():
                if grace_s > 0:  # none: the run stops at once (--fail-fast), and says so itself
                    log.warning("worker %d (pid %s) did not exit within %g s: killed", slot, p.pid, grace_s)
                p.kill()
                p.join(5)
        if self._preload is not None:
            self._preload = None
            zygote.release()
