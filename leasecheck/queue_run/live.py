"""A queue run's anomalies said as they are proven: its history so far, put together and checked every few seconds.

A lease run's history is written as it goes and followed op by op
(:mod:`leasecheck.run.following`); a queue run's is put together from what the
executions, the watcher and the nemesis recorded (:mod:`.assemble`), so it is checked
the other way: every ``every_s`` the history so far is assembled (the ops not yet
complete stay open: ``info``, which may or may not have happened, so nothing proven on
it is undone by what comes later) and judged by the same checker. Each (kind, job) is
said once on stderr when first proven (as many jobs of a kind as a lease run names),
and :attr:`LiveCheck.proven` is set, which ``--fail-fast`` stops the run on. The final
verdict is the whole history's; anomalies.jsonl holds its anomalies, each with when it
was first said.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from leasecheck.checker import check_source
from leasecheck.histories import Header
from leasecheck.queue_run.assemble import Entry
from leasecheck.queue_run.history import write_history
from leasecheck.report.live import NODES_PER_KIND

log = logging.getLogger("leasecheck.queue_run")

#: the history so far, rewritten at each probe (in the run's queue folder)
SO_FAR = "history-so-far.jsonl"


class LiveCheck(threading.Thread):
    """Checks ``snapshot()``'s history every ``every_s`` seconds until :meth:`finish`; says each new (kind, job)."""

    def __init__(self, snapshot: Callable[[], tuple[Header, list[Entry], int]], folder: Path, every_s: float = 2.0,
                 say: TextIO | None = sys.stderr) -> None:
        super().__init__(name="queue-live-check", daemon=True)
        self.snapshot = snapshot
        self.path = folder / SO_FAR
        self.every_s = every_s
        self.say = say
        #: set at the first anomaly proven (``--fail-fast`` stops the run on it)
        self.proven = threading.Event()
        #: (kind, job) -> seconds into the run when it was first said
        self.said_at: dict[tuple[str, str], float] = {}
        self._done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self._done.wait(self.every_s):
            try:
                self.probe()
            except Exception as e:  # the final check of the whole history is the verdict: say it in the log only
                self.error = e
                log.warning("the live check failed (%s: %s): the history is checked at the end", type(e).__name__, e)
                return

    def probe(self) -> None:
        """Assemble and check the history so far; say each (kind, job) proven for the first time."""
        header, entries, start_ns = self.snapshot()
        write_history(self.path, header, entries, start_ns)
        verdict = check_source(self.path)
        now_s = (time.monotonic_ns() - start_ns) / 1e9
        for a in verdict.anomalies:
            key = (a.kind, a.node)
            if key in self.said_at:
                continue
            self.said_at[key] = now_s
            n = sum(1 for kind, _ in self.said_at if kind == a.kind)
            if self.say is not None and n <= NODES_PER_KIND:  # its ops are named in anomalies.jsonl, of the whole history
                more = "; the next are counted at the end" if n == NODES_PER_KIND else ""
                print(f"anomaly {a.kind} {a.node} at {now_s:.3f} s{more}", file=self.say, flush=True)
            self.proven.set()

    def finish(self) -> None:
        """Stop probing (the run is over: its whole history is checked next); the history so far is removed."""
        self._done.set()
        if self.is_alive():
            self.join(60)
        self.path.unlink(missing_ok=True)


__all__ = ["SO_FAR", "LiveCheck"]
