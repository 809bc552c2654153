"""The queue run's files in and out: the executions' event files read back, the assembled history written.

Each worker process appended its events, one ``write`` per line (:mod:`leasecheck.targets.queues.task`); a
worker killed in the middle of one leaves a cut last line, which is dropped (its op stays open: ``info``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from leasecheck.histories import Header, HistoryWriter
from leasecheck.queue_run.assemble import Entry

log = logging.getLogger("leasecheck.queue_run")


def read_events(folder: Path, warn: bool = True) -> list[dict[str, Any]]:
    """Every execution event of the run's event files, in file order (``warn``: log a cut line; a live check reads
    the files while workers write them, where a last line not yet whole is no news)."""
    events: list[dict[str, Any]] = []
    for path in sorted(folder.iterdir()):
        for line in path.read_bytes().splitlines():
            if line.strip():
                try:
                    events.append(json.loads(line))
                except ValueError:  # a worker killed in the middle of a write: its last line is cut
                    if warn:
                        log.warning("%s: a cut line dropped", path.name)
    return events


def write_history(path: Path, header: Header, entries: list[Entry], start_ns: int) -> Path:
    """``entries`` (:func:`~leasecheck.queue_run.assemble.assemble`'s, in time order) as a v1 history at ``path``."""
    writer = HistoryWriter(path, header, start_ns=start_ns)
    with writer.batch():
        for e in entries:
            at = max(0, e.t - start_ns)
            if e.process == "nemesis":
                writer.nemesis(e.f, e.value, at=at)
            elif e.type == "invoke":
                assert isinstance(e.process, int)
                writer.invoke(e.process, e.f, e.node or "", e.value, at=at)
            else:
                assert isinstance(e.process, int)
                writer.complete(e.process, e.type, e.value, at=at)
    writer.close()
    return path
