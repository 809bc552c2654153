"""Every node read back: which nodes the history never read cleanly once their last write was done.

A lost write is proven by a read after it: ``lost-commit`` needs the node's record
read after the commit completed, a lost effect the protected resource read after it.
Under a store fault (the store killed, paused or cut off) the harness's closing read
of a node may fail (``info``) or be answered while the fault was on; a node left
so is never proven either way. The run reads such nodes again once every fault is
healed (:mod:`leasecheck.run.final_reads`), and what the history still lacks is
named here, by the history alone (so ``results.json`` says the same of a run folder
read again):

* a read is *clean* when it completed ``ok`` and no store-out fault (a row of the
  catalogue that takes the store away: :data:`STORE_OUT_FAULTS`) was on at any time
  between its invoke and its completion, as the nemesis events stamp the faults;
* a node is *read back* when its latest clean ``read`` was invoked after every
  other event of the node (a write completed later, or still in flight then, needs
  a later read);
* every node that appears in the history and is not read back is *unread*.

The rule of the run verdict (docs/contracts/run-verdict.md): unread nodes are named
(``results.json``'s ``unread_nodes``) and counted in the run's summary; they make the
run ``unknown`` only when no node at all was read back (:func:`read_back_gap`): a few
unread nodes of many leave the rest proven, but a run that read nothing back has no
last word on any node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leasecheck.histories.format import NEMESIS, Event
from leasecheck.nemesis.catalogue import CATALOGUE, Need

#: the faults that take the store away from its clients: killed, paused, cut off (the family the nemesis counts as
#: the store being out), and a cluster's member faults that move or cut off its primary (not its clocks)
STORE_OUT_FAULTS: frozenset[str] = frozenset(
    kind.name for kind in CATALOGUE
    if kind.on_store or (Need.CLUSTER in kind.needs and kind.events[0] != "clock-skew")
)
_EDGES = {kind.name: kind.events for kind in CATALOGUE if kind.name in STORE_OUT_FAULTS}


@dataclass
class StoreOutWindows:
    """The store-out faults' windows of a history, fed its nemesis events in file order (start stamp, heal stamp or None)."""

    windows: list[list[int | None]] = field(default_factory=list)
    _open: dict[str, list[list[int | None]]] = field(default_factory=dict)

    def feed(self, ev: Event) -> None:
        value = ev.value if isinstance(ev.value, dict) else {}
        name = value.get("fault")
        edges = _EDGES.get(name) if isinstance(name, str) else None
        if edges is None:
            return
        if ev.f == edges[0]:
            window: list[int | None] = [ev.time, None]
            self.windows.append(window)
            self._open.setdefault(name, []).append(window)  # type: ignore[arg-type]
        elif ev.f == edges[1] and self._open.get(name):  # type: ignore[arg-type]
            self._open[name].pop(0)[1] = ev.time  # type: ignore[index]

    def overlaps(self, start: int, end: int) -> bool:
        """Was a store-out fault on at any time in [start, end]?"""
        return any(w[0] <= end and (w[1] is None or w[1] >= start) for w in self.windows)  # type: ignore[operator]


@dataclass
class ReadBack:
    """Which nodes a history read back (see the module docstring), fed its events in file order."""

    store: StoreOutWindows = field(default_factory=StoreOutWindows)
    #: node -> index of its latest event a read must follow (-1: none but its reads), for the nodes not read back
    _unread: dict[str, int] = field(default_factory=dict)
    #: process -> (node, f, invoke index, invoke time) of its op in flight
    _pending: dict[Any, tuple[str, str, int, int]] = field(default_factory=dict)

    def feed(self, ev: Event) -> None:
        if ev.process == NEMESIS:
            self.store.feed(ev)
            return
        if ev.type == "invoke":
            if ev.node is None:
                return
            self._pending[ev.process] = (ev.node, ev.f, ev.index, ev.time)
            self._touch(ev.node, ev.f, ev.index)
            return
        pending = self._pending.pop(ev.process, None)
        if pending is None:
            return
        node, f, invoked, at = pending
        if f == "read" and ev.type == "ok" and not self.store.overlaps(at, ev.time):
            if self._unread.get(node, -1) < invoked:
                self._unread.pop(node, None)
            return
        self._touch(node, f, ev.index)

    def _touch(self, node: str, f: str, index: int) -> None:
        if f in ("read", "read-resource"):
            self._unread.setdefault(node, -1)
        else:
            self._unread[node] = index

    def unread(self) -> list[str]:
        """The nodes not read back so far, sorted."""
        return sorted(self._unread)


def read_back_gap(unread: int, nodes: int) -> str | None:
    """The run verdict's reason when none of the history's ``nodes`` was read back (None when one was, or there is none)."""
    if nodes and unread >= nodes:
        return (f"no node was read back cleanly after its last write ({unread} of {nodes} unread: every closing read "
                "failed or met a store fault), so no lost write could be proven")
    return None


def unread_line(unread: list[str], nodes: int) -> str | None:
    """One line for the summary and the report: how many of ``nodes`` were never read back (None when every one was)."""
    if not unread:
        return None
    shown = ", ".join(unread[:3]) + (f" and {len(unread) - 3} more" if len(unread) > 3 else "")
    return (f"{len(unread)} of {nodes} nodes never read back after the faults healed (a write lost on them cannot be "
            f"proven; results.json's unread_nodes): {shown}")


__all__ = ["STORE_OUT_FAULTS", "ReadBack", "StoreOutWindows", "read_back_gap", "unread_line"]
