"""The fault windows of a history with their victims: what the checker's attribution takes.

:mod:`leasecheck.checker.attribution` says, for each anomaly, whether a fault
hit the processes that prove it; which nemesis events make a window, and whom
the fault hit, is the catalogue's business, so it is decided here. Windows are
those of :func:`leasecheck.verdict.run_verdict.fault_windows_of` (a start until its
heal), one row at a time; a fault on the store's side (a server paused, killed,
disconnected or skewed) hits every process, and so does a network fault whose
start event says ``"scope": "all"`` (or names no process number); a worker's
fault hits the process numbers its events name. A history without fault names may give
one window to several rows of the same event (``kill`` of the store: both
``kill-store`` and ``docker-kill``): the first row in catalogue order keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leasecheck.checker.attribution import FaultWindow
from leasecheck.histories.format import Event
from leasecheck.nemesis.catalogue import CATALOGUE, FaultKind, Need
from leasecheck.nemesis.members import member_label
from leasecheck.verdict.run_verdict import fault_windows_of

#: what a fault did to one victim, by its start event
_DID = {"pause": "paused", "kill": "killed", "partition": "cut off from the store", "latency": "slowed",
        "bandwidth": "throttled", "clock-skew": "clock-skewed"}
#: what a store-side fault did, by its start event
_DID_STORE = {"pause": "paused the store", "kill": "killed the store", "partition": "took the store off its network",
              "clock-skew": "skewed the store's clock"}
#: what a fault between a cluster's members did (it hits every process), by its start event
_DID_CLUSTER = {"partition": "cut the store's members apart", "kill": "killed the store's primary",
                "pause": "paused the store's primary", "failover": "failed the store over",
                "clock-skew": "skewed a member's clock"}
#: what a network fault on everyone did, by its start event
_DID_EVERYONE = {"partition": "cut every worker off from the store", "latency": "slowed every worker's traffic",
                 "bandwidth": "throttled every worker's traffic"}


def _start_value(events: Sequence[Event], kind: FaultKind, start: int) -> dict[str, Any]:
    """The value of ``kind``'s start event at ``start`` ({} if none)."""
    for ev in events:
        if (ev.time == start and ev.f == kind.events[0] and isinstance(ev.value, dict)
                and ev.value.get("fault", kind.name) == kind.name):
            return ev.value
    return {}


def _scope(events: Sequence[Event], kind: FaultKind, start: int) -> Any:
    """The ``scope`` of ``kind``'s start event at ``start`` (network faults say ``all`` or ``some``)."""
    return _start_value(events, kind, start).get("scope")


def _did_cluster(events: Sequence[Event], kind: FaultKind, start: int) -> str:
    """What a member fault did, with the members its start event names: ``cut the store's members apart (m1 | m2 m3)``."""
    did = ("cut the power of the store's members" if kind.loses_power
           else _DID_CLUSTER.get(kind.events[0], f"hit the store's members ({kind.events[0]})"))
    members = member_label(_start_value(events, kind, start))
    return f"{did} ({members})" if members else did


def fault_victims(events: Sequence[Event]) -> list[FaultWindow]:
    """Every fault window of a history's nemesis events, with whom it hit, in order of start."""
    out: list[FaultWindow] = []
    seen: set[tuple[int, int | None, frozenset[int]]] = set()
    for kind in CATALOGUE:
        start_f = kind.events[0]
        network = Need.TOXIPROXY in kind.needs
        for w in fault_windows_of(events, kind):
            if (w.start, w.end, w.victims) in seen:
                continue
            seen.add((w.start, w.end, w.victims))
            store_side = Need.SERVER in kind.needs and not network
            # a network fault naming no process number cut off workers we cannot name: everyone, to be safe
            everyone = store_side or (network and (not w.victims or _scope(events, kind, w.start) == "all"))
            did_all = (_did_cluster(events, kind, w.start) if Need.CLUSTER in kind.needs
                       else "cut the store's power" if kind.loses_power
                       else (_DID_EVERYONE if network else _DID_STORE).get(start_f, f"hit every process ({start_f})"))
            out.append(FaultWindow(kind.name, w.start, w.end, w.victims, everyone, _DID.get(start_f, start_f), did_all))
    return sorted(out, key=lambda w: (w.start, w.fault))
