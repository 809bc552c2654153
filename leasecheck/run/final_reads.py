"""The final phase's reads: every node read once, after every lease can have expired.

They are the history's last word on each node (``lost-commit`` is judged
against them), so a read that fails is recorded ``info`` and the next node is
read by a fresh client under a new process number, as a crashed worker would
be replaced.
"""

from __future__ import annotations

from collections.abc import Callable

from leasecheck.histories import HistoryWriter
from leasecheck.run.deliveries import node_name
from leasecheck.run.recorder import Recorder
from leasecheck.targets.base import NodeState
from leasecheck.targets.registry import TargetSpec


def node_names(run_id: str, runs: int, nodes: int) -> list[str]:
    """Every node the queue can have delivered: ``RUNID/run-R/node-I`` for each run so far."""
    return [node_name(run_id, r, i) for r in range(1, runs + 1) for i in range(nodes)]


def read_every_node(
    spec: TargetSpec, recorder: Recorder, writer: HistoryWriter, nodes: list[str], stop: Callable[[], bool] = lambda: False,
) -> None:
    """Read each node once through a client of its own, recording each read as an op; ``stop()`` cuts it short (a signal)."""
    reader = spec.make()
    process = recorder.new_process()
    for node in nodes:
        if stop():
            break
        writer.invoke(process, "read", node, {})
        try:
            state: NodeState = reader.read(node)
        except Exception as e:
            writer.complete(process, "info", {"error": f"{type(e).__name__}: {e}"})
            process = recorder.new_process()
            reader.close()
            reader = spec.make()
            continue
        writer.complete(process, "ok", state.to_json())
    reader.close()
