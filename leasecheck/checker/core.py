"""History → verdict: the checker's entry point for a history to read, small or big.

A small history is read into memory and checked there
(:mod:`leasecheck.checker.in_memory`: every row of the table of checks, node by
node); a big one is split by node and checked a part at a time, side by side
(:mod:`leasecheck.checker.partitioned`), by the very same functions. This module
only reads the source, chooses between the two, and adds what the caller asked
for: the coverage, and which fault hit each anomaly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from leasecheck.checker import split as splitting
from leasecheck.checker.attribution import FaultsOf, attribute
from leasecheck.checker.coverage import node_coverage
from leasecheck.checker.findings import Engine
from leasecheck.checker.in_memory import DEFAULT_BUDGET, by_node_of, check, check_nodes
from leasecheck.checker.memory import no_gc
from leasecheck.checker.partitioned import check_split
from leasecheck.checker.verdict import Verdict, add_reading
from leasecheck.checker.windows import WindowsOf
from leasecheck.histories import HistoryReader
from leasecheck.histories.chunks import Stitch


def check_source(
    source: str | os.PathLike[str] | Iterable[bytes | str],
    *,
    budget: float | None = DEFAULT_BUDGET,
    engine: Engine = "auto",
    name: str | None = None,
    windows: WindowsOf | None = None,
    faults: FaultsOf | None = None,
    jobs: int | None = None,
    partitions: int | None = None,
    chunks: int | None = None,
) -> Verdict:
    """Read and check one history (a path, or lines). Raises ``HistoryError`` on bad input.

    With ``windows`` (what makes the fault windows of its nemesis events: the
    catalogue's business, so the caller's), the verdict also carries the
    history's coverage, counted on the same ops: one read of the file, not two.
    With ``faults`` (what makes the fault windows with their victims: the
    catalogue's business too), every anomaly also says which fault hit the
    processes that prove it, or that none did (:mod:`leasecheck.checker.attribution`).

    A big file is split by node and checked a part at a time on up to ``jobs``
    processes (None: every core), in flat memory
    (:mod:`leasecheck.checker.partitioned`); a small one is checked in memory.
    The verdict is the same either way. ``partitions`` (and ``chunks``, the
    byte ranges read side by side) force a split: tests hold the two to each other.

    A cut history (its last line cut, or its promised ``history-end`` event
    missing) is never valid: ``"unknown"`` with ``cut`` naming the line, or
    invalid if the part that was read proves an anomaly (:func:`add_reading`).
    """
    if jobs is None:
        jobs = splitting.available_cores()
    with no_gc():
        reader = HistoryReader(source, name)
        split = splitting.plan(source, jobs, partitions, chunks)
        read: HistoryReader | Stitch = reader
        if split is not None:
            assert isinstance(source, (str, os.PathLike))  # only a file is split
            verdict, read = check_split(reader, source, split, budget=budget, engine=engine, windows=windows)
        elif windows is None and faults is None:
            verdict = check(reader.header, reader.ops(), budget=budget, engine=engine)
        else:
            by_node = by_node_of(reader.ops())
            verdict = check_nodes(reader.header, by_node, budget=budget, engine=engine)
            if windows is not None:
                store, skewed = windows(reader.nemesis)
                verdict.coverage = node_coverage(reader.header, by_node.values(), store, skewed)
            if faults is not None:
                attribute(verdict, (op for nops in by_node.values() for op in nops), faults(reader.nemesis))
        if split is not None and faults is not None and verdict.anomalies:  # the ops were spilled: read them again
            with HistoryReader(source, name) as again:
                attribute(verdict, again.ops(), faults(read.nemesis))
    return add_reading(verdict, reader.header, read)
