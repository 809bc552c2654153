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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasecheck.histories import HistoryWriter
from leasecheck.run.deliveries import node_name
from leasecheck.run.recorder import Recorder
from leasecheck.targets.base import Target, reads_resource
from leasecheck.targets.registry import TargetSpec

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


def read_every_node(
    spec: TargetSpec, recorder: Recorder, writer: HistoryWriter, nodes: list[str], stop: Callable[[], bool] = lambda: False,
) -> None:
    """:func:`last_reads` of each node through a client of its own, recorded as ops; ``stop()`` cuts it short (a signal)."""
    reader = spec.make()
    process = recorder.new_process()

    def emit(typ: str, f: str, value: dict[str, Any]) -> None:
        if typ == "invoke":
            writer.invoke(process, f, node, value)
        else:
            writer.complete(process, typ, value)

    for node in nodes:
        if stop():
            break
        if not last_reads(reader, node, emit):
            process = recorder.new_process()
            reader.close()
            reader = spec.make()
    reader.close()
