"""A worker's client: one backend op run with its recording, its outcome as a completion of the history format.

Apart from the workload (what a worker does, :mod:`leasecheck.run.workload`): this is how any one op is done, the same
for a claim, a heartbeat or a read. The invoke is recorded before the call and the completion after it (a pause in
between only widens the interval: docs/background.md, "Timestamps"), an op held for a fault aimed inside it is held here
(:meth:`~leasecheck.run.worker_pipe.Hub.hold`), and the adapter's two exceptions become ``fail`` (``unavailable``) and
``info`` (anything else it raises is a bug of the adapter: ``info`` with the message).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from leasecheck.run.worker_pipe import Hub
from leasecheck.targets.base import Indeterminate, Lease, NodeState, Refused, ResourceState, Target, Unavailable
from leasecheck.targets.registry import TargetSpec


def _value_of(out: Any) -> tuple[str, dict[str, Any]]:
    """An adapter's answer as a completion: (type, value)."""
    if isinstance(out, Refused):
        return "fail", out.to_json()
    if isinstance(out, Lease):
        return "ok", out.to_json() if out.epoch is not None else {"epoch": None, "token": out.token}
    if isinstance(out, NodeState | ResourceState):
        return "ok", out.to_json()
    return "ok", {}


class Client:
    """Runs one backend op with its recording, and maps the outcome to the types of docs/contracts/history-format.md."""

    def __init__(self, hub: Hub, spec: TargetSpec, owner: str) -> None:
        self.hub = hub
        self.spec = spec
        self.owner = owner
        self.target: Target = spec.make()
        #: outcomes of ops run without recording (the overhead benchmark's baseline)
        self.unrecorded: Counter[str] = Counter()

    def op(self, f: str, node: str, value: dict[str, Any], call: Callable[[], Any], wait: bool = False) -> tuple[str, Any]:
        """(type, adapter outcome); type ``info`` means this process number is retired. ``wait``: a racing claim."""
        if self.hub.record:
            self.hub.invoke(f, node, value, wait)
        try:
            with self.hub.hold(f):  # held between its round trips when the nemesis aims a fault inside it
                out = call()
        except Unavailable as e:
            typ, val, out = "fail", {"reason": "unavailable", "message": str(e)}, None
        except Indeterminate as e:
            typ, val, out = "info", {"error": str(e)}, None
        except Exception as e:  # an adapter bug: it may have happened
            typ, val, out = "info", {"error": f"{type(e).__name__}: {e}"}, None
        else:
            typ, val = _value_of(out)
        if self.hub.record:
            self.hub.complete(f, node, typ, val)
        else:
            self.unrecorded[typ] += 1
        return typ, out

    def reconnect(self) -> None:
        """After an indeterminate op: a fresh client, as a restarted worker would have."""
        try:
            self.target.close()
        except Exception:
            pass
        self.target = self.spec.make()
