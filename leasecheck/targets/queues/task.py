"""The task every audited library's workers run: the seed's workload inside one execution of a job, recorded.

The harness starts the library's workers with :data:`ENV_DIR` (the run's queue
folder: ``plan.json``, the resource, the event files) and :data:`ENV_SLOT` (which
worker this is) in their environment; every process below a worker inherits them.
An execution is recorded as one history process of its own:

* ``claim`` ok at the task's start, with the library's identity of the execution
  (its attempt number as the epoch, or its execution id as the token). The
  library took the job earlier; the harness puts the claim's invoke at the job's
  enqueue time, a bound it can prove (the recorded interval contains the real one);
* ``effect`` ×2 on the protected resource (:mod:`.resource`), with the work (and,
  where the library has one, its heartbeat as ``renew``) between them;
* ``commit``: invoked when the task returns its result (the execution's name), the
  library stores it afterwards; the harness completes the op ``ok`` when it first
  reads that result from the library, and leaves it open (``info``) otherwise.

Some executions stall between the two effects past the library's timeout (the
GC pause of the seed: ``time.sleep``, which stops the task's thread, or an
async library's whole event loop, as a real pause does); which ones is drawn from
the seed, the job and the execution's number. The stalled execution wakes as a
zombie once the library has run the job again.

In the ``fenced`` mode the task does what a careful user does with the library's
attempt number: every effect is conditional on it (refused ``stale`` below the
largest the resource accepted), and the task refuses to complete
(:class:`StaleExecution`) if a newer attempt has written; what the library then
stores is its own doing.

Each process appends its events to ``events/<slot>-<pid>.jsonl``, one ``write``
per event, so nothing is lost if the harness dies or the worker is killed.

A run that aims its pauses (``plan.json``'s ``aim``: a library whose task
heartbeats) arms the write after a heartbeat in the aim slot
(:mod:`leasecheck.machine.aim_slot`, ``aim`` in the queue folder): the task then
holds there a few ms, before the write's invoke is stamped, and says so on the
run's note socket (:class:`AimNote`), so that a pause lands between its
heartbeat and its write: woken after its next attempt started elsewhere, it
writes first thing, as a real GC pause there would have it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecheck.machine.aim_slot import AimSlot
from leasecheck.targets.queues.resource import Resource

ENV_DIR = "LEASECHECK_QUEUE_DIR"
ENV_SLOT = "LEASECHECK_QUEUE_SLOT"
PLAN_FILE, EVENTS_DIR, BUSY_DIR, RESOURCE_FILE, AIM_FILE = "plan.json", "events", "busy", "resource.sqlite3", "aim"
#: the kind of op a queue run's pause is aimed at: the task's write after its heartbeat
AIMED = ("effect",)


@dataclass(frozen=True)
class AimNote:
    """The word a held task sends the harness: worker ``process`` holds an op of kind ``f`` for aim ``serial`` since
    ``t`` (CLOCK_MONOTONIC ns), in execution ``n`` of ``job``."""

    process: int
    serial: int
    f: str
    t: int
    job: str
    n: int

    def encode(self) -> bytes:
        return json.dumps(self.__dict__).encode()

    @classmethod
    def decode(cls, data: bytes) -> AimNote:
        note = json.loads(data)
        return cls(int(note["process"]), int(note["serial"]), str(note["f"]), int(note["t"]), str(note["job"]),
                   int(note["n"]))


class StaleExecution(Exception):
    """A fenced task's refusal to complete: a newer execution of its job has written the resource."""


@dataclass(frozen=True)
class Identity:
    """What the library hands an execution: its attempt number (the epoch) or its execution id (the token)."""

    token: str
    epoch: int | None = None


@dataclass(frozen=True)
class Plan:
    """What the harness tells every task (``plan.json``)."""

    seed: int
    mode: str
    ttl_ms: int
    #: the chance that a job's first execution stalls past the library's timeout
    stall_rate: float = 0.5
    #: the abstract Unix socket a held task tells the harness on (None: the run aims nothing)
    aim: str | None = None

    @property
    def ttl_s(self) -> float:
        return self.ttl_ms / 1000


@dataclass(frozen=True)
class Step:
    """One thing an execution does: ``effect`` (payload), ``work`` or ``stall`` (seconds), ``renew``."""

    what: str
    arg: Any = None


def steps(plan: Plan, job: str, n: int, heartbeat: bool) -> list[Step]:
    """What execution ``n`` of ``job`` does, drawn from the seed alone (a pure function).

    The job is named by its number in the run (``j0007`` of ``lc1a2b3c4d-j0007``): a run's id is new every
    time, and the same seed must stall the same jobs."""
    rng = random.Random(f"{plan.seed}/{job.rpartition('-')[2]}/{n}")
    stall = n == 1 and rng.random() < plan.stall_rate
    work = plan.ttl_s * rng.uniform(0.05, 0.3)
    middle: list[Step]
    if heartbeat:  # the library's heartbeat between slices of work, as a worker that is alive beats
        middle = [Step("work", work / 3), Step("renew"), Step("work", work / 3), Step("renew"), Step("work", work / 3)]
    else:
        middle = [Step("work", work)]
    if stall:  # past the timeout: 1.5-3 of it, the seed's GC pause (no heartbeat while it lasts)
        middle.insert(1, Step("stall", plan.ttl_s * rng.uniform(1.5, 3.0)))
    return [Step("effect", "1"), *middle, Step("effect", "2"), Step("commit")]


class _Run:
    """This process's view of the run: the plan, its event file, the resource; made once per process."""

    def __init__(self, folder: Path, slot: int) -> None:
        self.folder = folder
        self.slot = slot
        raw = json.loads((folder / PLAN_FILE).read_text())
        self.plan = Plan(**raw)
        self.resource = Resource(folder / RESOURCE_FILE)
        self.lock = threading.Lock()
        self.fd = -1
        self.pid = -1
        self.aim = AimSlot(folder / AIM_FILE) if self.plan.aim else None
        #: the aim this process last held for: once per aim (a worker is one victim of a fault at most)
        self.held = -1

    def write(self, event: dict[str, Any]) -> None:
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        with self.lock:
            if self.pid != os.getpid():  # first event, or a fork of the worker (RQ's work-horse, a pool's child)
                self.pid = os.getpid()
                path = self.folder / EVENTS_DIR / f"{self.slot}-{self.pid}.jsonl"
                self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(self.fd, line)


    def hold_if_aimed(self, f: str, job: str, n: int) -> None:
        """Hold here, before an op of kind ``f`` of execution ``n`` of ``job`` is invoked, if the nemesis armed that
        kind: the harness is told, then the hold's sleep, which its pause lands in (a stopped sleep that is continued
        past its end returns at once)."""
        if self.aim is None or self.plan.aim is None:
            return
        arm = next((a for a in self.aim.armed() if a.f == f and a.serial != self.held), None)
        if arm is None:
            return
        self.held = arm.serial
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notes:
            try:
                notes.sendto(AimNote(self.slot, arm.serial, f, time.monotonic_ns(), job, n).encode(), "\0" + self.plan.aim)
            except OSError:  # the harness has gone (or stopped listening): no pause is coming
                return
        time.sleep(arm.hold_s)


_run: _Run | None = None
_run_lock = threading.Lock()


def _this_run() -> _Run:
    global _run
    with _run_lock:
        if _run is None:
            folder, slot = os.environ.get(ENV_DIR), os.environ.get(ENV_SLOT)
            if not folder or slot is None:
                raise RuntimeError(f"{ENV_DIR} and {ENV_SLOT} are not set: this task runs only under `leasecheck audit`")
            _run = _Run(Path(folder), int(slot))
        return _run


class _Execution:
    """One execution's recorder: stamps each event with CLOCK_MONOTONIC (invoke before, completion after)."""

    def __init__(self, job: str, identity: Identity) -> None:
        self.run = _this_run()
        self.job = job
        self.identity = identity
        self.key = f"{self.run.slot}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        self.lease: dict[str, Any] = ({"epoch": identity.epoch} if identity.epoch is not None
                                      else {"epoch": None, "token": identity.token})
        self.fenced = self.run.plan.mode == "fenced"
        #: the library's heartbeat has answered: the next write is the one a pause is aimed before
        self.beat = False
        #: this execution's number among its job's (:meth:`begin`)
        self.n = 0
        if self.fenced and identity.epoch is None:
            raise RuntimeError("the fenced mode needs the library's attempt number")

    def event(self, type_: str, f: str, value: dict[str, Any], **extra: Any) -> None:
        self.run.write({"x": self.key, "slot": self.run.slot, "t": time.monotonic_ns(), "type": type_, "f": f,
                        "node": self.job, "value": value, **extra})

    def begin(self, heartbeat: bool) -> list[Step]:
        """Record the claim, count this execution, and draw what it does."""
        self.busy = self.run.folder / BUSY_DIR / self.key.replace("/", "-")
        self.busy.touch()  # the nemesis aims its pauses at workers with a job in hand
        self.event("ok", "claim", self.lease, owner=f"w{self.run.slot}")
        self.n = self.run.resource.begin(self.job)
        return steps(self.run.plan, self.job, self.n, heartbeat)

    def effect(self, payload: str) -> None:
        payload = f"{self.key}:{payload}"  # unique: a read of the resource names the op that wrote each entry
        if self.beat:
            self.run.hold_if_aimed("effect", self.job, self.n)
        self.event("invoke", "effect", {**self.lease, "payload": payload})
        try:
            accepted = self.run.resource.append(self.job, self.key, self.identity.epoch, payload, self.fenced,
                                                self.identity.token)
        except Exception as e:  # a write that may have landed
            self.event("info", "effect", {"reason": "error", "message": f"{type(e).__name__}: {e}"})
            raise
        self.event("ok" if accepted else "fail", "effect", {} if accepted else {"reason": "stale"})

    def renew_invoke(self) -> None:
        self.event("invoke", "renew", dict(self.lease))

    def renew_done(self, ok: bool | None, error: BaseException | None = None) -> None:
        if error is not None:
            self.event("info", "renew", {"reason": "error", "message": f"{type(error).__name__}: {error}"})
        else:
            self.event("ok" if ok else "fail", "renew", {} if ok else {"reason": "not-owner"})
            self.beat = self.beat or bool(ok)

    def commit(self) -> str:
        """The result to return (the library stores it), or :class:`StaleExecution` in the fenced mode."""
        self.event("invoke", "commit", {**self.lease, "result": self.key})
        if self.fenced:
            fence = self.run.resource.fence(self.job)
            if fence is not None and self.identity.epoch is not None and fence > self.identity.epoch:
                self.event("fail", "commit", {"reason": "stale"})
                raise StaleExecution(f"{self.job}: attempt {self.identity.epoch} is stale (the resource saw {fence})")
        return self.key

    def done(self) -> None:
        """The execution has ended (returned, refused or ended by the library): its worker is no longer busy."""
        busy = getattr(self, "busy", None)
        if busy is not None:
            busy.unlink(missing_ok=True)


def execute(job: str, identity: Identity, heartbeat: Callable[[], object] | None = None) -> str:
    """Run one execution of ``job`` in a synchronous task; returns the result the library should store.

    ``heartbeat`` is the library's own (called between slices of work; a falsy
    return or an exception is recorded as a renew that failed or may have)."""
    x = _Execution(job, identity)
    try:
        for step in x.begin(heartbeat is not None):
            if step.what == "effect":
                x.effect(step.arg)
            elif step.what in ("work", "stall"):
                time.sleep(step.arg)
            elif step.what == "renew":
                assert heartbeat is not None
                x.renew_invoke()
                try:
                    ok = heartbeat()
                except Exception as e:
                    x.renew_done(None, e)
                else:
                    x.renew_done(ok is not False)
        return x.commit()
    finally:  # a library that ends an overdue execution with an exception (RQ's, huey's timeout) ends it here
        x.done()


async def execute_async(job: str, identity: Identity, heartbeat: Callable[[], Awaitable[object]] | None = None) -> str:
    """:func:`execute` for an async task. Work awaits; a stall blocks the event loop, as a real pause would."""
    x = _Execution(job, identity)
    try:
        for step in x.begin(heartbeat is not None):
            if step.what == "effect":
                x.effect(step.arg)
            elif step.what == "work":
                await asyncio.sleep(step.arg)
            elif step.what == "stall":
                time.sleep(step.arg)  # the point: the whole worker stops, heartbeats and all
            elif step.what == "renew":
                assert heartbeat is not None
                x.renew_invoke()
                try:
                    ok = await heartbeat()
                except Exception as e:
                    x.renew_done(None, e)
                else:
                    x.renew_done(ok is not False)
        return x.commit()
    finally:  # cancelled (a library's timeout) or failed: no longer busy
        x.done()
