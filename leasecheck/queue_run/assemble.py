"""What the executions, the watcher and the nemesis recorded, put together as one history (a pure function).

Process numbers: the library's workers keep their slot numbers (0, 1, …: what
the nemesis names), the watcher's reads are process :data:`READER`, and every
execution is a process of its own from :data:`FIRST_EXECUTION` on, in the order
the executions started. A fault's events name the worker it hit and every
execution that worker ever ran (the attribution then asks which of them the
fault's window overlapped), so an anomaly of a paused worker's job is the
pause's.

Each execution's ops are its own events, with two bounds the harness proves:

* its ``claim`` is invoked when the job was enqueued: the library cannot have
  taken it before, and the task stamps the claim's completion when it starts;
* its ``commit`` completes ``ok`` at the first read that showed its result
  (the library stored it before that read's answer); never read, the commit
  stays open, which counts as ``info``: it may or may not have happened.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.queue_run.watcher import Read

#: the watcher's history process number (worker slots are below it)
READER = 999
#: the first execution's history process number
FIRST_EXECUTION = 1000


@dataclass(frozen=True, order=True)
class Entry:
    """One history event before it is written: CLOCK_MONOTONIC ns, then order of making (ties keep a process's order)."""

    t: int
    seq: int
    process: int | str
    type: str
    f: str
    node: str | None
    value: Any


def assemble(enqueued: dict[str, int], events: Iterable[dict[str, Any]], reads: Sequence[Read],
             nemesis: Sequence[tuple[int, str, dict[str, Any]]]) -> list[Entry]:
    """The history's events in time order (see the module's docstring)."""
    out: list[Entry] = []
    seq = iter(range(1 << 62))

    def emit(t: int, process: int | str, type_: str, f: str, node: str | None, value: Any) -> None:
        out.append(Entry(t, next(seq), process, type_, f, node, value))

    by_execution: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for ev in events:
        by_execution[ev["x"]].append(ev)
    executions = sorted(by_execution.items(), key=lambda kv: (min(e["t"] for e in kv[1]), kv[0]))
    process_of = {key: FIRST_EXECUTION + i for i, (key, _) in enumerate(executions)}
    of_slot: dict[int, list[int]] = defaultdict(list)
    lease_of: dict[str, tuple[dict[str, Any], str]] = {}  # execution (its result) -> (lease, owner)
    first_read = _first_reads(reads)

    for key, evs in executions:
        process = process_of[key]
        evs.sort(key=lambda e: e["t"])
        of_slot[int(evs[0]["slot"])].append(process)
        open_commit: dict[str, Any] | None = None
        for ev in evs:
            node, f, type_, value = ev["node"], ev["f"], ev["type"], ev["value"]
            if f == "claim" and type_ == "ok":
                owner = str(ev.get("owner", ""))
                emit(min(enqueued.get(node, ev["t"]), ev["t"]), process, "invoke", "claim", node, {"owner": owner})
                lease_of[key] = (dict(value), owner)
                emit(ev["t"], process, "ok", "claim", node, value)
                continue
            emit(ev["t"], process, type_, f, node, value)
            if f == "commit":
                open_commit = ev if type_ == "invoke" else None
        if open_commit is not None:
            seen = first_read.get((open_commit["node"], key))
            if seen is not None and seen.completed >= open_commit["t"]:
                emit(seen.completed, process, "ok", "commit", open_commit["node"], {})

    for read in reads:
        emit(read.invoked, READER, "invoke", "read", read.job, {})
        emit(read.completed, READER, "ok", "read", read.job, _read_value(read, lease_of))

    for t, f, value in nemesis:
        emit(t, "nemesis", "info", f, None, _name_executions(value, of_slot))
    return sorted(out)


def _first_reads(reads: Sequence[Read]) -> dict[tuple[str, str], Read]:
    """The first read that showed each (job, result)."""
    first: dict[tuple[str, str], Read] = {}
    for read in sorted(reads, key=lambda r: r.completed):
        if read.state.result is not None:
            first.setdefault((read.job, read.state.result), read)
    return first


def _read_value(read: Read, lease_of: dict[str, tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """A read's ok value: SUCCEEDED with the lease and owner of the execution whose result the library holds."""
    result = read.state.result
    lease, owner = lease_of.get(result or "", ({"epoch": None}, None))
    return {"status": "SUCCEEDED", **lease, "owner": owner, "result": result}


def _name_executions(value: dict[str, Any], of_slot: dict[int, list[int]]) -> dict[str, Any]:
    """A nemesis event's value with every execution of the workers it names added to its victims."""
    victims = value.get("victims")
    if not isinstance(victims, list):
        return value
    workers = [v for v in victims if type(v) is int]
    if not workers:
        return value
    runs = sorted({p for w in workers for p in of_slot.get(w, [])})
    return {**value, "victims": [*victims, *runs], "workers": workers}
