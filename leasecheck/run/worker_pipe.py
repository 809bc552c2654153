"""The worker's end of its pipe to the harness: it stamps, logs and sends the events of its ops.

Every operation is recorded without a round trip: the worker stamps its invoke
with CLOCK_MONOTONIC (one clock for every process on the host) before it talks
to the store and its completion after the reply, appends each to its own log in
the run folder (what recovery reads if the harness dies) and sends it to the
hub without waiting; the hub merges the workers' streams in time order
(:mod:`leasecheck.run.merge`). So the recorded interval always contains the real
one, whatever the timing. One case keeps the round trip: a claim racing a
duplicate delivery waits until its rival's claim is in (see
:meth:`leasecheck.run.recorder.Recorder._claim_invoked`).

When the nemesis aims a fault inside an op (:mod:`leasecheck.nemesis.inside`),
the hub reads the armed kind at each invoke; the op it matches runs under a
:class:`~leasecheck.run.holds.Hold`, which sends a ``between`` note after each
of its requests and holds it at the armed one (between the invoke's stamp and
the completion's: the interval still contains the real one).
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from leasecheck.machine.aim_slot import AimSlot, HoldMark
from leasecheck.run.holds import Hold
from leasecheck.run.pipe_words import Word
from leasecheck.rundir.worker_logs import WorkerLog

#: a worker about to sleep at least this long says so first (``idle``), so that the merge need not wait for it
IDLE_NOTE_S = 0.02


@dataclass(frozen=True)
class Recording:
    """How a worker records: where its log goes, the history's time origin, its first process number."""

    log_dir: str
    start_ns: int
    process: int
    #: the shared slot the nemesis arms to land a fault inside an op (None: no pause or kill to aim)
    aim: str | None = None


class Hub:
    """The worker's end of its pipe to the harness, and its own log of the events it stamps."""

    def __init__(self, conn: Connection, recording: Recording | None = None, slot: int = 0) -> None:
        self.conn = conn
        self.record = recording is not None
        self.start_ns = recording.start_ns if recording is not None else 0
        #: this worker's process number in the history (a new one after each ``info`` op)
        self.process = recording.process if recording is not None else -1
        self.log = WorkerLog(recording.log_dir, slot) if recording is not None else None
        #: the last completion, stamped but not yet logged nor sent: (its log line, its message)
        self._held: tuple[bytes, tuple[Any, ...]] | None = None
        self.aim = AimSlot(recording.aim) if recording is not None and recording.aim else None
        #: the last invoke's stamp
        self._invoked = 0
        #: the (aim's serial, kind of op) this worker held an op for: once each (a worker is one victim of a fault at
        #: most; the harness takes it for the first kind it lands in and disarms each kind once it landed)
        self._aimed: set[tuple[int, str]] = set()
        #: set while this worker holds an aimed op (made at its first hold)
        self._mark: HoldMark | None = None

    def _release(self, line: bytes = b"", msg: tuple[Any, ...] | None = None) -> None:
        """Log ``line`` and send ``msg``, each after the held completion's: one write, one message."""
        held, self._held = self._held, None
        if held is not None:
            line = held[0] + line
            msg = held[1] if msg is None else (Word.BATCH, held[1], msg)
        if line:
            assert self.log is not None
            self.log.write_bytes(line)
        if msg is not None:
            self.conn.send(msg)

    def ask(self, *msg: Any) -> Any:
        self._release(msg=msg)
        return self.conn.recv()

    def tell(self, *msg: Any) -> None:
        self._release(msg=msg)

    def flush(self) -> None:
        """Log and send the held completion now (before a sleep, a crash, the end)."""
        self._release()

    def stamp(self) -> int:
        """Now on the history's clock (CLOCK_MONOTONIC, shared by every process on the host)."""
        return time.monotonic_ns() - self.start_ns

    def invoke(self, f: str, node: str, value: dict[str, Any], wait: bool = False) -> None:
        """Stamp and record an invoke, before the op goes to the store; ``wait``: until the hub says go (a racing claim).

        The log gets the held completion and this invoke in one write, and the
        hub one message: half the system calls of recording an op.
        """
        t = self.stamp()
        self._invoked = t
        assert self.log is not None
        self._release(self.log.line(t, self.process, "invoke", f, node, value), (Word.INVOKE, f, node, value, t, wait))
        if wait:
            self.conn.recv()

    def sought(self) -> str | None:
        """The kind of op a fault is aimed at now that it has landed in least (the slot lists them so:
        :func:`~leasecheck.nemesis.inside.choose`), among those this worker has not held for it yet; None: no aim. The workload then does
        one where it may (a read, a release, an effect, an early heartbeat, a claim): rare kinds came by a few times in
        a 40 s gate, and its aims went empty. Only the rarest, not every armed kind: the workload did the quickest of
        them at once (a read, a commit), and that took each aim's first victim while effects and renews were never
        stopped inside on SQLite, whose writer holding its lock leaves no other write to land in (sqlite gate, seeds
        1-10: ``paused-inside-effect`` short in 8, ``*-inside-renew`` in 10)."""
        if self.aim is None:
            return None
        return next((a.f for a in self.aim.armed() if (a.serial, a.f) not in self._aimed), None)

    def hold(self, f: str) -> AbstractContextManager[object]:
        """What the op of kind ``f`` just invoked runs under: a :class:`Hold` if the nemesis armed its kind (once per aim
        and kind: with every short kind armed at once, one hold per aim spent each worker's on the first renew that came,
        a kind landed already, and no claim was ever held), else nothing."""
        if self.aim is None:
            return nullcontext()
        arm = next((a for a in self.aim.armed() if a.f == f), None)
        if arm is None or (arm.serial, f) in self._aimed:
            return nullcontext()
        serial = arm.serial
        self._aimed = {(s, k) for s, k in self._aimed if s == serial} | {(serial, f)}  # only this aim's are kept
        invoked = self._invoked
        if self._mark is None:  # made in this process, by its pid: the first time it holds an op
            self._mark = HoldMark(self.aim.path)
        return Hold(arm, lambda k, last: self.conn.send((Word.BETWEEN, serial, f, k, invoked, last)), self._mark)

    def complete(self, f: str, node: str, typ: str, value: dict[str, Any]) -> None:
        """Stamp the completion, after the store's reply; it is logged and sent with this worker's next message.

        That message comes at once in the workload (the next invoke, or a word
        to the hub), and :meth:`sleep` sends it before any pause: holding it
        saves a write and a message per op, never a wait. A worker killed in
        between loses it, and the op is recorded ``info``, as when it is killed
        before the store's reply.
        """
        t = self.stamp()
        assert self.log is not None
        self._held = (self.log.line(t, self.process, typ, f, node, value), (Word.COMPLETE, typ, value, t))

    def renumber(self) -> None:
        """After an ``info`` op: this process number is retired, the hub hands out the next."""
        self.process = self.ask(Word.RENUMBER)

    def sleep(self, seconds: float) -> None:
        """Sleep; a long sleep is announced first, so the merge can write past this worker meanwhile.

        ``time.sleep`` waits on CLOCK_MONOTONIC until at least ``seconds`` after
        it is called (a SIGSTOP only makes it later): nothing this worker stamps
        next can be earlier than now + ``seconds``, and that is what it tells the hub.
        """
        if self.record and seconds >= IDLE_NOTE_S:
            self.tell(Word.IDLE, self.stamp() + int(seconds * 1e9) - 1_000)
        else:
            self.flush()
        time.sleep(seconds)
