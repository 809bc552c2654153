"""A node's last word: its protected resource and its record, read once nothing can touch it again.

The final phase reads every node the closer did not (after every lease can have
expired); the closer (:mod:`leasecheck.run.closing`) reads each node that settled
while the run goes. Both read the same way, through a client of their own:

* the protected resource first (``read-resource``, when the target can read it:
  :func:`~leasecheck.targets.base.reads_resource`): the fence and every effect it
  accepted, in order. What landed there is the lasting damage of a zombie's write
  (an effect of an old lease accepted after the takeover, a fence set back), which
  the ops alone cannot prove when the write was concurrent with the takeover;
* then the record (``read``): the history's last word on the node (``lost-commit``
  is judged against it), and the op the closer's checker waits for to judge it.

A read that fails is recorded ``info``, and its process is retired: the next node
is read by a fresh client under a new process number, as a crashed worker would be
replaced.

Every node read back, once the store is back. Under a store fault a closing read
may fail, or be answered while the fault was on; such a node is not closed (the
checker that follows the run closes a node on a clean read alone), so the final
phase, which runs once every fault is healed, reads it with the rest. A final read
that fails is tried again while the store comes back (a killed server restarting):
the same node is read again until a read succeeds (the evidence that the store
answers again), then the next at once; bounded by :data:`NODE_RETRIES` reads of one
node, :data:`RETRY_PROBES` in all and :data:`RETRY_PATIENCE_S` seconds, the waits
between them doubling from 50 ms (a signal ends them).
What the history still never read back is named in results.json
(:mod:`leasecheck.verdict.read_back`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from leasecheck.histories import HistoryWriter
from leasecheck.run.deliveries import node_name
from leasecheck.run.recorder import Recorder
from leasecheck.targets.base import Target, reads_resource
from leasecheck.targets.registry import TargetSpec

log = logging.getLogger("leasecheck.run")

#: records one event of a read: (type, f, value)
Emit = Callable[[str, str, dict[str, Any]], None]


def node_names(run_id: str, runs: int, nodes: int) -> list[str]:
    """Every node the queue can have delivered: ``RUNID/run-R/node-I`` for each run so far."""
    return [node_name(run_id, r, i) for r in range(1, runs + 1) for i in range(nodes)]


def last_reads(target: Target, node: str, emit: Emit) -> bool:
    """Read ``node``'s protected resource (if ``target`` can), then its record, each invoke and completion through
    ``emit``; False once one failed (recorded ``info``: the process is retired, and what was left unread stays so)."""
    reads: list[tuple[str, Callable[[str], Any]]] = [("read-resource", target.read_resource)] if reads_resource(target) else []
    reads.append(("read", target.read))
    for f, read in reads:
        emit("invoke", f, {})
        try:
            state = read(node)
        except Exception as e:
            emit("info", f, {"error": f"{type(e).__name__}: {e}"})
            return False
        emit("ok", f, state.to_json())
    return True


#: the most reads the final phase tries again in all (a store that does not answer yet), the most of them on one
#: node, and the most seconds it goes on trying from the first failure
RETRY_PROBES = 20
NODE_RETRIES = 8
RETRY_PATIENCE_S = 30.0
#: the first wait between probes (doubling, up to :data:`RETRY_PAUSE_MAX_S`)
RETRY_PAUSE_S = 0.05
RETRY_PAUSE_MAX_S = 2.0


class _Reader:
    """The final phase's client, recording each read under its process number (a new one after a failure)."""

    def __init__(self, spec: TargetSpec, recorder: Recorder, writer: HistoryWriter) -> None:
        self.spec, self.recorder, self.writer = spec, recorder, writer
        self.client: Target | None = None
        self.process = -1
        #: reads that failed (or found no client), in all
        self.failures = 0

    def read(self, node: str) -> bool:
        """:func:`last_reads` of ``node``; False if a read failed (or no client could be made: nothing was invoked)."""
        if self.client is None:
            try:
                self.client = self.spec.make()
            except Exception as e:  # the store not back yet: as a failed read, but nothing happened
                log.info("final reads: no client yet (%s: %s)", type(e).__name__, e)
                self.failures += 1
                return False
            self.process = self.recorder.new_process()

        def emit(typ: str, f: str, value: dict[str, Any]) -> None:
            if typ == "invoke":
                self.writer.invoke(self.process, f, node, value)
            else:
                self.writer.complete(self.process, typ, value)

        if last_reads(self.client, node, emit):
            return True
        self.failures += 1
        self.close()  # its process is retired: the next read comes from a new client under a new number
        return False

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def read_every_node(
    spec: TargetSpec, recorder: Recorder, writer: HistoryWriter, nodes: list[str], stop: Callable[[], bool] = lambda: False,
    wait: Callable[[float], object] = time.sleep, patience_s: float = RETRY_PATIENCE_S,
) -> list[str]:
    """:func:`last_reads` of each node through a client of its own, recorded as ops; a node whose read failed is read
    again while the store comes back (see the module docstring). The nodes whose reads failed to the end (and those
    left when ``stop()`` cut it short: a signal). ``wait(s)``: how a wait between reads is spent (a signal ends it)."""
    reader = _Reader(spec, recorder, writer)
    todo, failed = deque(nodes), list[str]()
    tries: dict[str, int] = {}
    probes, pause, deadline = 0, RETRY_PAUSE_S, math.inf
    try:
        while todo:
            if stop():
                return failed + list(todo)
            node = todo[0]
            if reader.read(node):  # the store answers: on with the next, at once
                todo.popleft()
                pause = RETRY_PAUSE_S
                continue
            if deadline == math.inf:
                deadline = time.monotonic() + patience_s
            tries[node] = tries.get(node, 0) + 1
            if tries[node] > NODE_RETRIES or probes >= RETRY_PROBES or time.monotonic() >= deadline:
                failed.append(todo.popleft())  # given up: named as never read back
                continue
            probes += 1
            wait(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(2 * pause, RETRY_PAUSE_MAX_S)
        if failed:
            log.warning("final reads: %d of %d node(s) never read back (%d reads failed): %s", len(failed), len(nodes),
                        reader.failures, ", ".join(failed[:10]))
        elif reader.failures:
            log.info("final reads: every node read back, after %d failed read(s)", reader.failures)
        return failed
    finally:
        reader.close()


def read_back(run: Any) -> None:
    """The final phase of a :class:`~leasecheck.run.runner.Run` whose faults are healed and workers gone: once every
    lease can have expired (unless a signal came first), :func:`read_every_node` of every node not closed, those whose
    closing read failed or met a store fault among them; none after ``--fail-fast`` (the verdict is proven already:
    what the reads would add is not worth the wait)."""
    stop = run.interrupts.event
    if run.stopped_early:
        log.info("--fail-fast: no final reads")
        return
    pending = run.closer.settle(timeout=60.0) if run.closer is not None else set()  # the checker's word on its reads
    if pending:
        log.warning("final reads: %d node(s) read by the closer still await the checker's word, not read again", len(pending))
    if not stop.wait(run.timing.expiry_wait_s):
        nodes = [n for n in run.deliveries.unclosed if n not in pending]  # those closed are judged and forgotten already
        read_every_node(run.spec, run.recorder, run.writer, nodes, stop=stop.is_set, wait=stop.wait)
