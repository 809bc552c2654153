"""The harness's checker thread: follows the history as the merge writes it, and says each anomaly as soon as it is proven.

The writer hands this thread every byte it writes (``HistoryWriter.follow``), in
file order; the thread reads them with the history's own reader (the same
validation, the same pairing of invokes and completions) and feeds the ops to the
online checker (:mod:`leasecheck.checker.online`). Whenever it has caught up with
the writer, it probes the nodes that changed; each anomaly proven is appended at
once to ``anomalies.jsonl`` in the run folder (one JSON object per line: the
anomaly, when its proof was complete and when it was said) and said in short on
stderr (:mod:`leasecheck.report.live`: one line per kind and node, the rest
counted, and :meth:`Following.summary` counts them at the end), and the first
sets :attr:`Following.proven`, which ``--fail-fast`` stops the run on.

A node the harness closes mid-run (:meth:`Following.close_after`: nobody can touch
it again and the harness read it) is judged once that read is in, and its ops are
dropped: what keeps a soak's memory flat. Only a clean read closes it (ok, and no
store fault on while it went: :mod:`leasecheck.verdict.read_back`); a node whose
read was not clean stays open, to be read again, and the harness is told which
(:attr:`Following.on_read`), so that it forgets only the nodes closed. At the end every node left is judged,
and :meth:`Following.finish` gives the verdict ``leasecheck check`` gives of the
same file. If the thread fails (a bug: the history is the harness's own), the
run falls back to checking the file after the end, and says so in its log.
"""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from leasecheck.checker import Verdict
from leasecheck.checker.attribution import FaultsOf
from leasecheck.checker.coverage import Coverage
from leasecheck.checker.online import OnlineChecker, Proven
from leasecheck.checker.windows import WindowsOf
from leasecheck.histories import HistoryReader, HistoryWriter
from leasecheck.histories.format import Event, Op
from leasecheck.report.live import LiveAnomalies
from leasecheck.report.refusals import Refusals
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.attribution import fault_victims
from leasecheck.verdict.read_back import StoreOutWindows
from leasecheck.verdict.run_verdict import fault_windows

log = logging.getLogger("leasecheck.run")


#: how long the thread waits for more bytes before it probes anyway (it probes whenever it has caught up, too)
PROBE_EVERY_S = 0.1


class Following(threading.Thread):
    """Follows one run's history (see the module docstring); :meth:`finish` once the writer is closed."""

    def __init__(self, writer: HistoryWriter, run_dir: Path, *, budget: float | None, windows: WindowsOf | None = fault_windows,
                 faults: FaultsOf | None = fault_victims, say: TextIO | None = sys.stderr, losses_ahead: bool = False) -> None:
        """``windows`` and ``faults``: what makes the coverage's and the attribution's fault windows (the run's, by default);
        ``losses_ahead``: the run has a power-loss fault (:class:`~leasecheck.checker.online.OnlineChecker`)."""
        super().__init__(name="online-checker", daemon=True)
        self.writer = writer
        self.run_dir = run_dir
        self.budget = budget
        self.windows = windows
        self.faults = faults
        self.losses_ahead = losses_ahead
        self.say = say
        #: set at the first anomaly proven (``--fail-fast`` stops the run on it)
        self.proven = threading.Event()
        #: every anomaly said so far, in the order it was said
        self.said: list[Proven] = []
        #: what of them was said on stderr, and what only counted (:meth:`summary`)
        self.lines = LiveAnomalies()
        self.error: BaseException | None = None
        #: the run's refusals by reason, those a fault explains counted under it (:mod:`leasecheck.report.refusals`),
        #: once the thread is done; None if it failed
        self.refusals: dict[str, Any] | None = None
        self.verdict: Verdict | None = None
        #: seconds of this thread's CPU time spent checking (its share of a core while the run goes)
        self.cpu_s = 0.0
        self._chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        #: (node, process) of the harness's closing reads: each node is judged once that read's completion is in
        self._awaited: dict[tuple[str, int], bool] = {}
        #: told of each closing read that completed ok: (node, closed); closed False when a store fault met the read
        self.on_read: Callable[[str, bool], None] = lambda node, closed: None
        #: the store faults' windows, from the nemesis events the reader has seen
        self._store_out = StoreOutWindows()
        self._nemesis_seen = 0
        self._checker: OnlineChecker | None = None
        self._last_probe = 0.0
        #: the writer is closed: every byte was taken
        self._ended = False
        self._out = RunFolder(run_dir).anomalies.open("a", encoding="utf-8")  # each anomaly the moment it is proven
        #: held while the thread changes the checker, so that :meth:`coverage` reads it whole
        self._lock = threading.Lock()
        writer.follow(self._chunks.put)

    # ----------------------------------------------------------------- the caller's side

    def close_after(self, node: str, process: int) -> None:
        """``node`` gets no op after the read (``f`` ``read``) ``process`` is about to do of it: judge it and drop it once
        that read is in (its protected resource is read first, by the same process).

        Called before the reads are invoked, so the thread knows it before it can see the read."""
        self._awaited[node, process] = True

    def finish(self, timeout: float = 600.0) -> Verdict | None:
        """The writer is closed: judge every node left; the verdict (None if the thread failed: check the file).

        Says first the one line that counts the proofs the live lines only counted (:meth:`summary`)."""
        self._chunks.put(None)
        self.join(timeout)
        self._out.close()
        if self.is_alive():
            log.warning("the online checker did not finish in %g s: the history is checked from the file", timeout)
            return None
        self.summary()
        if self.error is not None:
            log.warning("the online checker failed (%s: %s): the history is checked from the file",
                        type(self.error).__name__, self.error, exc_info=self.error)
            return None
        return self.verdict

    def summary(self) -> None:
        """Say, on one line, the proofs the live lines only counted (nothing when each had a line of its own)."""
        line = self.lines.summary(f"{RunFolder.ANOMALIES} of the run folder")
        if self.say is not None and line is not None:
            print(line, file=self.say, flush=True)

    @property
    def open_nodes(self) -> int:
        """Nodes whose ops are held (not yet judged)."""
        return self._checker.open_nodes if self._checker is not None else 0

    @property
    def judged(self) -> int:
        """Nodes judged so far (closed mid-run, or at the end)."""
        return self._checker.closed if self._checker is not None else 0

    def coverage(self) -> Coverage | None:
        """The situations the history reached so far (what the run's deadline waits on), without reading the file
        again; None if the thread failed (its counts stopped: read the file)."""
        checker = self._checker
        if self.error is not None:
            return None
        if checker is None:
            return Coverage()
        with self._lock:
            return checker.coverage_so_far()

    # ----------------------------------------------------------------- the thread

    def run(self) -> None:
        began = time.thread_time()
        try:
            reader = HistoryReader(self._lines(), name=str(self.writer.path))
            checker = self._checker = OnlineChecker(reader.header, reader.nemesis, budget=self.budget,
                                                    windows=self.windows, faults=self.faults, losses_ahead=self.losses_ahead)
            awaited, lock = self._awaited, self._lock
            refusals = Refusals()
            for op in reader.ops(open_ops=checker.in_flight):
                with lock:
                    checker.add(op)
                if op.type == "fail":
                    refusals.add(op)
                if awaited and op.f == "read" and awaited.pop((op.node, op.process), False) and op.type == "ok":
                    clean = self._clean(op, reader.nemesis)
                    if clean:
                        with lock:
                            proofs = checker.close(op.node)
                        self._tell(proofs)
                    self.on_read(op.node, clean)
            with lock:
                proofs = checker.close_all()
            self._tell(proofs)
            self.verdict = checker.verdict_of(reader)
            self.refusals = refusals.to_json(self.faults(reader.nemesis) if self.faults is not None else [])
        except BaseException as e:  # reported by finish(): the run checks the file instead
            self.error = e
            while not self._ended and self._chunks.get() is not None:  # let the writer go on: drain until the end
                pass
        finally:
            self.cpu_s = time.thread_time() - began

    def _clean(self, read: Op, nemesis: list[Event]) -> bool:
        """Was no store fault on while ``read`` went? (The nemesis events before its completion are all read.)"""
        for ev in nemesis[self._nemesis_seen:]:
            self._store_out.feed(ev)
        self._nemesis_seen = len(nemesis)
        end = read.complete_time if read.complete_time is not None else read.invoke_time
        return not self._store_out.overlaps(read.invoke_time, end)

    def _lines(self) -> Iterator[bytes]:
        """The history's lines as the writer writes them; probes whenever it has caught up (or every 0.1 s)."""
        rest = b""
        while True:
            try:
                chunk = self._chunks.get(timeout=PROBE_EVERY_S) if self._chunks.empty() else self._chunks.get_nowait()
            except queue.Empty:
                self._probe()
                continue
            if chunk is None:
                self._ended = True
                if rest:
                    yield rest  # a torn last line (the writer writes whole ones): the reader refuses it, the file is checked
                return
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield line + b"\n"
            if self._chunks.empty() or time.monotonic() - self._last_probe > PROBE_EVERY_S:
                self._probe()

    def _probe(self) -> None:
        checker = self._checker
        if checker is None:
            return
        self._last_probe = time.monotonic()
        with self._lock:
            proofs = checker.probe()
        self._tell(proofs)

    def _tell(self, proofs: list[Proven]) -> None:
        """Record each anomaly whole in anomalies.jsonl, say it in short on stderr (:class:`LiveAnomalies`: one line
        per kind and node, a count for the rest); the first sets :attr:`proven`."""
        if not proofs:
            return
        now_s = self.writer.now() / 1e9
        for p in proofs:
            a = p.anomaly
            self.said.append(p)
            record: dict[str, Any] = {**a.to_json(), "proof_s": round(p.proof_ns / 1e9, 6), "said_s": round(now_s, 6),
                                      "early": p.early, **({"provisional": True} if p.provisional else {})}
            self._out.write(json.dumps(record) + "\n")
            line = self.lines.line(a.kind, a.node, a.ops, p.proof_ns / 1e9, p.provisional)
            if self.say is not None and line is not None:
                print(line, file=self.say, flush=True)
        self._out.flush()
        self.proven.set()


__all__ = ["PROBE_EVERY_S", "Following"]
