"""What the executions, the watcher and the nemesis recorded, put together as one history (a pure function).

Process numbers: the library's workers keep their slot numbers (0, 1, …: what
the nemesis names), the watcher's reads are process :data:`READER`, and every
execution is a process of its own from :data:`FIRST_EXECUTION` on (and the rest of an execution that went on past an
op ended ``info``, one more after them all), in the order
the executions started. A fault's events name the worker it hit and every
execution that worker ever ran (the attribution then asks which of them the
fault's window overlapped), so an anomaly of a paused worker's job is the
pause's.

After every worker stopped, the harness reads each job's protected resource once
(:class:`ResourceRead`, process :data:`RESOURCE_READER`): its fence and the effects it
accepted, in order, as a ``read-resource`` op, the lasting damage of an execution that
wrote after another had taken the job over.

Each execution's ops are its own events, with two bounds the harness proves:

* its ``claim`` is invoked when the job was enqueued: the library cannot have
  taken it before, and the task stamps the claim's completion when it starts;
* its ``commit`` completes ``ok`` at the first read that showed its result
  (the library stored it before that read's answer); never read, the commit
  stays open, which counts as ``info``: it may or may not have happened. A
  library that stores no result (procrastinate, pgqueuer) shows only that the
  job succeeded: the read is then the completion of the one execution that had
  returned by its answer, and names it (``"inferred"``); with none or several,
  the read shows the status alone and their commits stay open.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.queue_run.watcher import Read

#: the watcher's history process number (worker slots are below it)
READER = 999
#: the process number of the harness's reads of each job's protected resource, after the run
RESOURCE_READER = 998
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


@dataclass(frozen=True)
class ResourceRead:
    """One read of a job's protected resource: when it was asked and answered (CLOCK_MONOTONIC ns), what it showed."""

    job: str
    invoked: int
    completed: int
    value: dict[str, Any]


def assemble(enqueued: dict[str, int], events: Iterable[dict[str, Any]], reads: Sequence[Read],
             nemesis: Sequence[tuple[int, str, dict[str, Any]]], resources: Sequence[ResourceRead] = ()) -> list[Entry]:
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
    #: the process numbers of executions that went on after an op of theirs ended ``info`` (see below)
    continuations = iter(range(FIRST_EXECUTION + len(executions), 1 << 62))
    of_slot: dict[int, list[int]] = defaultdict(list)
    lease_of: dict[str, tuple[dict[str, Any], str]] = {}  # execution (its result) -> (lease, owner)
    #: per job, the executions whose commit was invoked and not refused: (invoke time, execution, process)
    returned: dict[str, list[tuple[int, str, int]]] = defaultdict(list)

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
            if type_ == "info" and ev is not evs[-1]:
                # the execution went on after an op whose outcome nobody knows (a heartbeat the broker's restart cut
                # off): in the history a process ends at an info, so the rest of the execution is a process of its
                # own, of the same worker (its faults name it) and with the same lease (its ops carry it)
                process = next(continuations)
                of_slot[int(evs[0]["slot"])].append(process)
        if open_commit is not None:
            returned[open_commit["node"]].append((open_commit["t"], key, process))

    done: set[str] = set()
    for read in sorted(reads, key=lambda r: r.completed):
        value = _read_value(read, lease_of)
        who = _who(read, returned[read.job], lease_of)
        if who is not None and read.state.result is None:  # a library that stores no result: the one that returned
            lease, owner = lease_of[who]
            value = {"status": "SUCCEEDED", **lease, "owner": owner, "inferred": who}  # no result to compare
        if who is not None and who not in done:
            done.add(who)
            at, process = next((t, p) for t, k, p in returned[read.job] if k == who)
            if read.completed >= at:
                emit(read.completed, process, "ok", "commit", read.job, {})
        emit(read.invoked, READER, "invoke", "read", read.job, {})
        emit(read.completed, READER, "ok", "read", read.job, value)

    for r in resources:
        emit(r.invoked, RESOURCE_READER, "invoke", "read-resource", r.job, {})
        emit(r.completed, RESOURCE_READER, "ok", "read-resource", r.job, r.value)
    for t, f, value in nemesis:
        emit(t, "nemesis", "info", f, None, _name_executions(value, of_slot))
    return sorted(out)


def _who(read: Read, returned: list[tuple[int, str, int]], lease_of: dict[str, tuple[dict[str, Any], str]]) -> str | None:
    """The execution whose completion a SUCCEEDED read shows: the one whose result it holds, or, from a library
    that stores none, the only execution that had returned by the time the read was answered (none, or several:
    nobody can tell, and None leaves their commits open)."""
    if read.state.status != "SUCCEEDED":
        return None
    if read.state.result is not None:
        return read.state.result if read.state.result in lease_of and any(k == read.state.result for _, k, _ in returned) else None
    before = {k for t, k, _ in returned if t <= read.completed}
    return before.pop() if len(before) == 1 else None


def _read_value(read: Read, lease_of: dict[str, tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """A read's ok value: SUCCEEDED with the lease and owner of the execution whose result the library holds.

    A job the library reports in another state after it had succeeded (the watcher keeps only such reads) is
    read ``RUNNING`` if the library says it runs, else ``READY`` (failed, queued again), with what the library
    said under ``reported``; it names no lease, owner or result, so only its status is compared: any of them
    after an ok commit is a ``lost-commit``."""
    if read.state.status != "SUCCEEDED":
        status = "RUNNING" if read.state.status == "RUNNING" else "READY"
        return {"status": status, "reported": read.state.status}
    result = read.state.result
    if result is None:  # who completed it is not said: the status alone is compared
        return {"status": "SUCCEEDED"}
    if result not in lease_of:  # a result no execution of this run returned: compared, it proves that much
        return {"status": "SUCCEEDED", "result": result}
    lease, owner = lease_of[result]
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
