"""The harness's side of the workers: the recorder, one thread that serves every worker's pipe.

Workers stamp their own invokes and completions (CLOCK_MONOTONIC, one clock for
every process on the host) and send them without waiting; the recorder feeds
them to the merge (:mod:`leasecheck.run.merge`), which appends them to the
history in time order as soon as no live worker can still send an earlier one.
What the workload synchronises on — the takeovers a zombie waits for, the live
tally, a node's holder going silent — is answered from what was received, so a
merge held back by a paused worker delays the file, never the run. The recorder
also hands out nodes from the delivery queue (:mod:`leasecheck.run.deliveries`)
and notices workers that died (their open op is recorded ``info`` and their
process number retired).
"""

from __future__ import annotations

import queue
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from leasecheck.histories import HistoryWriter
from leasecheck.run.deliveries import Deliveries
from leasecheck.run.merge import MAX_BUFFERED, Merge, Stream
from leasecheck.run.pipe_words import ASKS, EVENTS, Word
from leasecheck.run.races import Races
from leasecheck.run.slots import SEEN_NODES, NodeCloser, Slot, Tally
from leasecheck.run.steering import Steering, Wait
from leasecheck.run.takeovers import Takeovers


class Recorder:
    """Serves the workers' pipes from one thread; see the module docstring."""

    def __init__(self, writer: HistoryWriter, deliveries: Deliveries, on_death: Callable[[Slot], None],
                 merge: Merge | None = None, seen_nodes: int = SEEN_NODES) -> None:
        self.writer = writer
        self.seen_nodes = seen_nodes
        self.merge = merge if merge is not None else Merge(writer)
        self.deliveries = deliveries
        self.on_death = on_death
        self.slots: dict[Connection, Slot] = {}
        self.tally = Tally()
        self.stopping = threading.Event()
        #: set when every worker is up (the runner's barrier): until then a worker asking for a node waits
        self.go = threading.Event()
        #: the last start-up failure a worker reported (its backend client could not be made)
        self.broken: str | None = None
        self._held_back: list[Connection] = []
        #: every node's leases as recorded: what wakes a stalled worker, and who holds a lease now
        self.takeovers = Takeovers()
        #: duplicated deliveries raced on purpose (:mod:`leasecheck.run.races`)
        self.races = Races(self._send)
        #: stalled workers waiting for a phase of their node, and the steered deliveries (the runner seeds it)
        header = writer.header
        self.steering = Steering(self.takeovers, deliveries, int((header.ttl_ms + header.clock_uncertainty_ms) * 1_000_000))
        #: is the store out (killed, paused, cut off) right now? The runner points it at its nemesis. A zombie's
        #: wait for its takeover does not run down while it is: nobody can take a node over from a store that is
        #: out, and how long one takes to come back is the machine's (a loaded one restarts Postgres in 3 s, not 1)
        self.store_out: Callable[[], bool] = lambda: False
        #: told (process, serial, f, boundary, invoke time) when an aimed op is held (:class:`leasecheck.frame.aiming.Aimer`)
        self.on_between: Callable[[int, int, str, int, int, bool], None] = lambda *note: None
        self._ticked = time.monotonic()
        self._next_process = 0
        self._lock = threading.Lock()
        #: the live workers' pipes, registered once (not per wait: a wait per message would cost more than the message)
        self._selector = selectors.DefaultSelector()
        self._thread = threading.Thread(target=self._serve, name="recorder", daemon=True)
        self.error: BaseException | None = None
        #: what closes settled nodes mid-run (:mod:`leasecheck.run.closing`), fed from this thread; None: none is
        self.closer: NodeCloser | None = None
        #: stopped workers whose pipes are to be drained before their streams halt (see :meth:`halted`)
        self._halts: queue.SimpleQueue[Slot] = queue.SimpleQueue()
        #: what each word of a worker's pipe is answered with (:meth:`_answer_table`)
        self._answers = self._answer_table()

    def new_process(self) -> int:
        with self._lock:
            p = self._next_process
            self._next_process += 1
            return p

    def add(self, conn: Connection, slot: int, pid: int | None, process: int | None = None, stream: Stream | None = None) -> Slot:
        """Register a started worker: its process number and stream (made before it started, see WorkerPool.spawn)."""
        s = Slot(self.new_process() if process is None else process, slot, conn, pid,
                 stream=stream if stream is not None else self.merge.stream(), seen=deque(maxlen=self.seen_nodes))
        with self._lock:
            self.slots[conn] = s
            self._selector.register(conn, selectors.EVENT_READ)
        return s

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.ident is not None:  # never started: nothing to wait for
            self._thread.join(timeout)

    def halted(self, process: int) -> None:
        """Worker ``process`` is stopped (a ``pause``): once what it wrote is taken in, the history stops waiting for it.

        Called by the nemesis once the worker is stopped; the recorder's thread
        drains its pipe first (see :meth:`leasecheck.run.merge.Merge.halt`).
        """
        s = self._slot_of(process)
        if s is not None:
            self.merge.want_halt(s.stream)
            self._halts.put(s)

    def resuming(self, process: int) -> None:
        """Worker ``process`` is about to be continued: what it sends from now on is stamped from now on."""
        s = self._slot_of(process)
        if s is not None:
            self.merge.resume(s.stream)

    def busy(self) -> set[str]:
        """The nodes a live worker may still send an op on (delivered to it, or among those it may read), or
        that a race holds; the rest of the done nodes are the closer's (this thread's view)."""
        busy = self.races.nodes()
        for s in self.live():
            busy |= s.may_touch()
        return busy

    def _slot_of(self, process: int) -> Slot | None:
        with self._lock:
            return next((s for s in self.slots.values() if s.process == process and s.alive), None)

    def _take_halts(self) -> None:
        """Drain the pipe of each worker stopped since the last call, then halt its stream."""
        while not self._halts.empty():
            s = self._halts.get_nowait()
            while s.alive and s.conn.poll(0):
                self._handle(s.conn)
            if s.alive:
                self.merge.halt(s.stream)

    def live(self) -> list[Slot]:
        with self._lock:
            return [s for s in self.slots.values() if s.alive]

    def ready(self) -> list[Slot]:
        """Live workers past their start-up: the only fair game for a fault."""
        return [s for s in self.live() if s.ready]

    def _serve(self) -> None:
        try:
            while True:
                conns = self._listened()
                if not conns:
                    self.merge.flush()  # the nemesis' events, when no worker is left
                    if self.stopping.is_set():
                        return
                    time.sleep(0.01)
                    continue
                ready: list[Any]
                if len(conns) < len(self._selector.get_map()):  # the buffer is full: the laggards alone
                    ready = wait(conns, timeout=0.05)
                else:
                    ready = [key.fileobj for key, _ in self._selector.select(0.05)]
                for conn in ready:
                    self._handle(conn)  # type: ignore[arg-type]
                if not self._halts.empty():
                    self._take_halts()
                self.merge.flush()
                now = time.monotonic()
                out_s = now - self._ticked if self.store_out() else 0.0
                self._ticked = now
                if self.steering.waits:
                    self._wake(out_s)
                twin = self.races.twin
                if twin is not None and (twin[2] < time.monotonic() or self.stopping.is_set()):
                    self._deliver(twin[0], twin[1])
                    self.races.twin = None
                if self.races.racers:
                    self.races.start_stale(self.stopping.is_set())
                if self._held_back and (self.go.is_set() or self.stopping.is_set()):
                    self._release_held_back()
                if self.closer is not None and not self.stopping.is_set():
                    self.closer.tick(now, self.busy)
        except BaseException as e:  # reported by the runner
            self.error = e

    def _listened(self) -> list[Connection]:
        """The live workers' pipes; while the merge's buffer is full, only those holding it back (bounded memory)."""
        with self._lock:
            live = [(c, s) for c, s in self.slots.items() if s.alive]
        if self.merge.buffered > MAX_BUFFERED and not self.stopping.is_set():
            laggards = {id(stream) for stream in self.merge.laggards()}
            held = [c for c, s in live if id(s.stream) in laggards]
            if held:
                return held
        return [c for c, _ in live]

    def _release_held_back(self) -> None:
        """The barrier is passed (or the run is stopping): answer the workers that asked for a node before it."""
        held, self._held_back = self._held_back, []
        for conn in held:
            s = self.slots.get(conn)
            if s is None or not s.alive:
                continue
            self._deliver(conn, None if self.stopping.is_set() else self.deliveries.next())

    def _wake(self, out_s: float = 0.0) -> None:
        """Answer the stalled workers whose phase came (or was missed, or never came in time).

        ``out_s``: seconds the store was out since the last call, added to every wait (see :attr:`store_out`).
        """
        def alive(conn: Connection) -> bool:
            s = self.slots.get(conn)
            return s is not None and s.alive

        live = len(self.live())
        for conn, answer in self.steering.due(self.merge.now(), time.monotonic(), out_s, alive, self.stopping.is_set(), live):
            self._send(conn, answer)

    def _deliver(self, conn: Connection, delivery: str | tuple[str, str] | None) -> None:
        """Answer a worker's ``next`` with a node (or a race for one, "" for none yet, None: stop); it works on it now."""
        s = self.slots.get(conn)
        if s is not None and delivery:
            s.current = delivery[1] if isinstance(delivery, tuple) else delivery
        self._send(conn, delivery)

    def _send(self, conn: Connection, answer: object) -> None:
        """Answer a worker that waits for us (one that may have died meanwhile).

        Whatever it sends next is stamped after this moment: that is its
        stream's bound from now on (it had none while it waited).
        """
        s = self.slots.get(conn)
        if s is None or not s.alive:
            return
        s.stream.bound = max(s.stream.bound, self.merge.now())
        s.stream.blocked = False
        try:
            conn.send(answer)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            self._died(s)

    def _handle(self, conn: Connection) -> None:
        if (s := self.slots.get(conn)) is None:  # died while this round was served (an answer to it failed)
            return
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            self._died(s)
            return
        try:
            self._answer(s, conn, msg)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            self._died(s)  # killed between its message and our answer

    def _answer(self, s: Slot, conn: Connection, msg: tuple[Any, ...]) -> None:
        """One message of a worker's pipe (:mod:`.pipe_words`), answered by the table's method for its word."""
        kind = msg[0]
        if kind == Word.BATCH:  # a held completion and the message after it (see worker_pipe.Hub.complete)
            for part in msg[1:]:
                self._answer(s, conn, part)
            return
        if kind in ASKS:  # it waits for our answer: nothing it sends next can be stamped before we answer
            s.stream.blocked = True
        self._answers[kind](s, conn, *msg[1:])

    def _on_invoke(self, s: Slot, conn: Connection, f: str, node: str, value: dict[str, Any], t: int, wait: bool) -> None:
        self.merge.push(s.stream, t, s.process, "invoke", f, node, value)
        s.open = (f, node)
        self.takeovers.invoke(s.process, f, node, value)
        if wait:  # a racing claim: goes to the store only once its rival's claim is in
            s.stream.blocked = True
            if f != "claim" or self.races.claim_invoked(conn, node):
                self._send(conn, True)

    def _on_complete(self, s: Slot, conn: Connection, typ: str, value: dict[str, Any], t: int) -> None:
        assert s.open is not None, f"process {s.process}: a completion with no op in flight"
        f, node = s.open
        self.merge.push(s.stream, t, s.process, typ, f, node, value)
        s.open = None
        if self.closer is not None:
            self.closer.completed(node)
        if typ == "ok" and f == "claim":
            s.seen.append(node)  # as the worker does
        self.tally.count(typ, value)
        alive = self.takeovers.complete(s.process, typ, value, t)
        if alive is not None:
            self.deliveries.touch(alive[1])

    def _on_next(self, s: Slot, conn: Connection) -> None:
        s.current = None  # done with the last one
        if not self.go.is_set() and not self.stopping.is_set():
            self._held_back.append(conn)  # answered when every worker is up
            return
        if self.stopping.is_set():
            self._send(conn, None)
            return
        ttl_ns = int(self.writer.header.ttl_ms * 1_000_000)
        steered = self.steering.steered(s.slot, s.process, self.merge.now(), ttl_ns, time.monotonic())
        if steered is not None:  # a late writer's contender, or a lagging clock's claimable node
            self._deliver(conn, steered)
            return
        node = self.deliveries.next()
        twin = self.races.twin
        if twin is not None and node == twin[1]:  # the copy: both workers get the node at once, and race
            self.races.twin = None
            self.races.start(node, twin[0], conn, time.monotonic() + self.deliveries.visibility_s / 4)
            self._deliver(twin[0], ("race", node))
            self._deliver(conn, ("race", node))
            return
        if twin is None and node and self.deliveries.copy_waits(node):
            self.races.twin = (conn, node, time.monotonic() + self.deliveries.visibility_s / 4)
            return
        self._deliver(conn, self.steering.tagged(node, self.merge.now(), ttl_ns) if node else node)

    def _on_tally(self, s: Slot, conn: Connection, counts: dict[str, int]) -> None:
        for typ, n in counts.items():
            setattr(self.tally, typ, getattr(self.tally, typ) + n)

    def _on_renumber(self, s: Slot, conn: Connection) -> None:
        s.process = self.new_process()
        self._send(conn, s.process)

    def _answer_table(self) -> dict[str, Callable[..., None]]:
        """Each word's answer (:class:`~leasecheck.run.pipe_words.Word`); every word has one (held by a test)."""
        ttl_s = self.writer.header.ttl_ms / 1000
        return {
            Word.INVOKE: self._on_invoke,
            Word.COMPLETE: self._on_complete,
            # an op held for the nemesis' aim reached a request boundary (run/holds.py)
            Word.BETWEEN: lambda s, conn, *note: self.on_between(s.process, *note),
            # asleep until this time at least: nothing it sends next is stamped before it
            Word.IDLE: lambda s, conn, t: setattr(s.stream, "bound", max(s.stream.bound, t)),
            Word.HELLO: lambda s, conn: setattr(s, "ready", True),
            Word.BROKEN: lambda s, conn, message: setattr(self, "broken", message),
            # a stalled worker: answered by _wake when its node reaches the phase
            Word.AWAIT: lambda s, conn, node, key, phase, timeout_s: self.steering.wait(
                Wait(conn, node, key, s.process, phase, time.monotonic() + timeout_s, s.slot)),
            Word.NEXT: self._on_next,
            # granted a lease it will write late in: a contender may wait for it (run/steering.py)
            Word.LATE: lambda s, conn, node: self.steering.late(node, s.process, time.monotonic(), ttl_s),
            Word.DONE: lambda s, conn, node: self.deliveries.ack(node),
            Word.REQUEUE: lambda s, conn, node: self.deliveries.requeue(node),
            # a worker that ran without recording reports its counts at exit
            Word.TALLY: self._on_tally,
            Word.RENUMBER: self._on_renumber,
        }

    def _died(self, s: Slot) -> None:
        """A worker is gone: its open op is recorded ``info`` (stamped now, after all it sent) and its process retired."""
        if not s.alive:
            return
        s.alive = False
        self._drain(s)
        with self._lock:
            self.slots.pop(s.conn, None)  # forgotten: a night of crashing workers must not pile up
            try:
                self._selector.unregister(s.conn)
            except (KeyError, ValueError):
                pass
        s.conn.close()
        if s.open is not None:
            self.takeovers.complete(s.process, "info", {})
            self.tally.count("info", {})
        self.merge.end(s.stream, s.process, s.open)
        s.open = None
        self.on_death(s)

    def _drain(self, s: Slot) -> None:
        """Take in the events a dead worker sent before it died (found while answering it, they may be unread)."""
        try:
            while s.conn.poll(0):
                msg = s.conn.recv()
                if msg[0] in EVENTS:
                    self._answer(s, s.conn, (*msg[:5], False) if msg[0] == Word.INVOKE else msg)
        except (EOFError, OSError):
            pass


__all__ = ["Recorder", "Slot", "Tally"]
