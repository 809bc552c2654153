"""Check a big history in flat memory and on every core: split it by node, check the parts, merge the verdicts.

Nodes are independent (docs/contracts/lease-model.md, P-compositionality): every anomaly, every
count and every coverage situation belongs to one node. So the file is read
once, every rule of the format checked, and each operation handed to one of
``K`` partitions by a stable hash of its node, spilled to a temporary folder
(always removed); then the partitions are checked one at a time per process,
each with the unchanged :func:`leasecheck.checker.in_memory.check_nodes`, on up to
``jobs`` processes (:mod:`leasecheck.checker.jobs`). Memory holds a partition
per process, never the whole history. When to split, and into how many parts,
is :mod:`leasecheck.checker.split`'s call.

The reading is split too when there are several jobs: each process reads a
byte range of whole lines (:class:`~leasecheck.histories.chunks.HistoryChunk`)
and spills its ops, and the caller stitches the ranges together in file order
(:class:`~leasecheck.histories.chunks.Stitch`: index and time carry on, each
completion meets its invoke, a process is idle when it invokes). Should a
range break a rule, or the ranges not join, the file is read again in one
pass by :class:`~leasecheck.histories.HistoryReader`, which names the line and
the rule exactly as it always does.

The merged verdict is the one a single :func:`check` of every op gives,
exactly: the anomalies sorted the same way (node, kind order, ops: each node's
findings come from one partition, in the order a single check finds them),
the counts summed, the unknown nodes in node order, ``anomalies_listed`` only
when fewer are listed than counted. Each partition's ops are in the reader's
order (completion order, then the ops never completed by invoke), so each node
is given exactly the list a single check builds for it. Coverage is summed the
same way: every situation is counted per node, and the fault windows come from
the nemesis events of the whole file.

The search budget stays one bound for the whole history: a single deadline is
set when the reading ends, and each partition gets what is left of it when its
check starts (``CLOCK_MONOTONIC`` is one clock for every process on a host).
"""

from __future__ import annotations

import itertools
import os
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from leasecheck.checker import in_memory
from leasecheck.checker.coverage import Coverage, node_coverage
from leasecheck.checker.findings import Engine
from leasecheck.checker.memory import no_gc
from leasecheck.checker.split import Split
from leasecheck.checker.verdict import Anomaly, Validity, Verdict
from leasecheck.checker.windows import Window, WindowsOf
from leasecheck.histories import Header, HistoryError, HistoryReader, Op
from leasecheck.histories.chunks import ChunksDisagree, ChunkSummary, HistoryChunk, Stitch
from leasecheck.histories.vocabulary import KINDS, SITUATIONS, Situation

if TYPE_CHECKING:
    from leasecheck.checker.jobs import Workers

#: ops held (encoded) before they are written out
FLUSH_OPS = 1 << 16

#: where in a spill file one frame is: (path, offset, length)
Frame = tuple[str, int, int]
#: (store-side, worker-clock) fault windows
Faults = tuple[Sequence[Window], Sequence[Window]]


def partition_of(node: str, partitions: int) -> int:
    """The partition of a node's ops: a stable hash (Python's own changes with every process)."""
    return zlib.crc32(node.encode()) % partitions


_encode = msgspec.json.Encoder().encode
_decode_ops = msgspec.json.Decoder(list[Op]).decode


class Spill:
    """Ops written to one file, a frame (a JSON list of one partition's ops) at a time, in the order given.

    Each op is encoded the moment the reader hands it over, while it is still
    in the CPU's cache, and dropped: encoding a partition's ops in a batch
    later walks memory in strides and is three times slower. JSON keeps every
    value a history may hold (epochs beyond 64 bits among them).
    """

    def __init__(self, path: Path, partitions: int) -> None:
        self.path = path
        self._name = str(path)
        #: each partition's frames, in order
        self.frames: list[list[Frame]] = [[] for _ in range(partitions)]
        self.counts = [0] * partitions
        self._buffers: list[list[bytes]] = [[] for _ in range(partitions)]
        self._offset = 0

    def add(self, ops: Iterable[Op]) -> None:
        """Route every op to its node's partition, writing them out every :data:`FLUSH_OPS` ops."""
        buffers = self._buffers
        k = len(buffers)
        crc = zlib.crc32
        encode = _encode
        held = 0
        for op in ops:
            buffers[crc(op.node.encode()) % k].append(encode(op))  # partition_of, inlined
            held += 1
            if held >= FLUSH_OPS:
                self.flush()
                held = 0

    def flush(self) -> None:
        """Write out every op held so far."""
        with open(self.path, "ab") as f:
            for k, buf in enumerate(self._buffers):
                if buf:
                    frame = b"[" + b",".join(buf) + b"]"
                    f.write(frame)
                    self.frames[k].append((self._name, self._offset, len(frame)))
                    self._offset += len(frame)
                    self.counts[k] += len(buf)
                    buf.clear()


def _load_frames(frames: Sequence[Frame]) -> list[Op]:
    ops: list[Op] = []
    handles: dict[str, Any] = {}
    try:
        for path, offset, length in frames:
            f = handles.get(path)
            if f is None:
                f = handles[path] = open(path, "rb")  # noqa: SIM115 (closed below, whichever path it was)
            f.seek(offset)
            ops.extend(_decode_ops(f.read(length)))
    finally:
        for f in handles.values():
            f.close()
    return ops


_completed_at = attrgetter("complete_index")


@dataclass(slots=True)
class Piece:
    """One byte range's share of a partition: its own ops' frames, and the ops completed in it but invoked earlier."""

    frames: list[Frame] = field(default_factory=list)
    spanning: list[Op] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PartTask:
    """One partition to check: everything a worker needs, nothing it would have to import the CLI for."""

    pieces: list[Piece]
    #: the partition's ops never completed, by invoke index (the reader hands them out last)
    tail: list[Op]
    header: Header
    engine: Engine
    #: ``time.monotonic()`` at which every search of the history gives up (None: never)
    deadline: float | None
    #: the fault windows of the whole history, when coverage is wanted
    faults: Faults | None

    @property
    def size(self) -> int:
        return sum(length for piece in self.pieces for _, _, length in piece.frames)


def load(task: PartTask) -> list[Op]:
    """A partition's ops in the order the reader hands them out: by completion, then the never completed."""
    ops: list[Op] = []
    for piece in task.pieces:
        mine = _load_frames(piece.frames)
        if piece.spanning:
            mine.extend(piece.spanning)
            mine.sort(key=_completed_at)
        ops.extend(mine)
    ops.extend(task.tail)
    return ops


@dataclass(frozen=True, slots=True)
class PartResult:
    """One partition's verdict, and its coverage counts when asked for."""

    verdict: Verdict
    coverage: dict[Situation, int] | None


def check_part(task: PartTask) -> PartResult:
    """Check one partition (in a worker, or in the caller) with the unchanged :func:`~leasecheck.checker.in_memory.check_nodes`."""
    with no_gc():
        by_node = in_memory.by_node_of(load(task))
        budget = None if task.deadline is None else max(0.0, task.deadline - time.monotonic())
        verdict = in_memory.check_nodes(task.header, by_node, budget=budget, engine=task.engine)
        counts = None if task.faults is None else dict(node_coverage(task.header, by_node.values(), *task.faults).counts)
        return PartResult(verdict, counts)


@dataclass(frozen=True, slots=True)
class ChunkTask:
    """One byte range of whole lines to read, and where to spill its ops."""

    path: str
    name: str
    start: int
    end: int
    spill: Path
    partitions: int


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """A range's frames per partition and what the stitching needs; ``summary`` None: a line broke a rule."""

    frames: list[list[Frame]]
    summary: ChunkSummary | None


def read_chunk(task: ChunkTask) -> ChunkResult:
    """Read and spill one byte range (in a worker, or in the caller)."""
    with no_gc():
        chunk = HistoryChunk(task.path, task.start, task.end, task.name)
        spill = Spill(task.spill, task.partitions)
        try:
            spill.add(chunk.ops())
        except HistoryError:
            return ChunkResult([], None)  # which line, and why, is for the one-pass reader to say
        spill.flush()
        return ChunkResult(spill.frames, chunk.summary())


def _bounds(path: str, start: int, end: int, chunks: int) -> list[int]:
    """``chunks`` byte ranges of whole lines between ``start`` and ``end``, as their starts and the end."""
    cuts = [start]
    with open(path, "rb") as f:
        for i in range(1, chunks):
            f.seek(start + (end - start) * i // chunks)
            f.readline()  # to the start of the next line
            at = f.tell()
            if cuts[-1] < at < end:
                cuts.append(at)
    return [*cuts, end]


#: what the reading leaves: each partition's pieces and never-completed ops, and the reader's facts
_Read = tuple[list[list[Piece]], list[list[Op]], "HistoryReader | Stitch"]


def _read_alone(reader: HistoryReader, folder: Path, partitions: int) -> _Read:
    """Read the whole file in this process (raises the reader's ``HistoryError`` on bad input)."""
    spill = Spill(folder / "ops.spill", partitions)
    spill.add(reader.ops())
    spill.flush()
    return [[Piece(frames)] if frames else [] for frames in spill.frames], [[] for _ in range(partitions)], reader


def _read_shared(workers: Workers[Any, Any], reader: HistoryReader, path: str, folder: Path, split: Split) -> _Read | None:
    """Read the file's byte ranges on every process and stitch them; None when they do not make a valid history."""
    cuts = _bounds(path, reader.header_bytes, os.path.getsize(path), split.chunks)
    tasks = [
        ChunkTask(path, reader.name, a, b, folder / f"chunk-{i:04d}.spill", split.partitions)
        for i, (a, b) in enumerate(itertools.pairwise(cuts))
    ]
    results: list[ChunkResult] = workers.map(read_chunk, tasks)
    stitch = Stitch(reader.name, promised=reader.header.end_marker)
    pieces: list[list[Piece]] = [[] for _ in range(split.partitions)]
    try:
        for r in results:
            if r.summary is None:
                return None
            mine = [Piece(frames) for frames in r.frames]
            for op in stitch.add(r.summary):
                mine[partition_of(op.node, split.partitions)].spanning.append(op)
            for k, piece in enumerate(mine):
                if piece.frames or piece.spanning:
                    pieces[k].append(piece)
    except ChunksDisagree:
        return None
    tails: list[list[Op]] = [[] for _ in range(split.partitions)]
    for op in stitch.finish():
        tails[partition_of(op.node, split.partitions)].append(op)
    return pieces, tails, stitch


def check_split(
    reader: HistoryReader,
    source: str | os.PathLike[str],
    split: Split,
    *,
    budget: float | None,
    engine: Engine,
    windows: WindowsOf | None = None,
) -> tuple[Verdict, HistoryReader | Stitch]:
    """Check the history ``reader`` has opened (``source``) split by node: the verdict, and what the reading found.

    The second value has the reader's ``warnings``, ``events`` and
    ``nemesis``. Raises the reader's ``HistoryError`` on bad input, as the
    in-memory path does; the temporary folder is removed either way. With
    ``windows`` the verdict carries the history's coverage.
    """
    import shutil
    import tempfile

    from leasecheck.checker.jobs import Workers, sigterm_exits

    with sigterm_exits():
        folder = Path(tempfile.mkdtemp(prefix="leasecheck-partitions-"))
        try:
            with Workers[Any, Any](split.jobs) as workers:  # started now: their start-up overlaps the reading
                read = None
                if split.chunks > 1:
                    read = _read_shared(workers, reader, os.fspath(source), folder, split)
                    if read is None:  # a rule is broken somewhere: the one-pass reader says where
                        for spilled in folder.iterdir():
                            spilled.unlink()
                if read is None:
                    read = _read_alone(reader, folder, split.partitions)
                pieces, tails, facts = read
                faults = None if windows is None else tuple(windows(facts.nemesis))
                deadline = None if budget is None else time.monotonic() + budget
                tasks = [
                    PartTask(pieces[k], tails[k], reader.header, engine, deadline, faults)  # type: ignore[arg-type]
                    for k in range(split.partitions)
                    if pieces[k] or tails[k]
                ]
                tasks.sort(key=lambda t: -t.size)  # the biggest first: no long partition left for last
                if not tasks:  # no client op at all: the verdict of nothing, as the in-memory path gives it
                    tasks = [PartTask([], [], reader.header, engine, deadline, faults)]  # type: ignore[arg-type]
                results: list[PartResult] = workers.map(check_part, tasks)
        finally:
            reader.close()
            shutil.rmtree(folder, ignore_errors=True)
    verdict = merge([r.verdict for r in results])
    if windows is not None:
        verdict.coverage = merge_coverage(r.coverage or {} for r in results)
    return verdict, facts


def merge(parts: Sequence[Verdict]) -> Verdict:
    """The verdict of all ``parts`` (checks of disjoint sets of nodes) as one check of all their ops gives it."""
    order_of: dict[str, int] = {k: i for i, k in enumerate(KINDS)}
    anomalies: list[Anomaly] = sorted(
        (a for v in parts for a in v.anomalies), key=lambda a: (a.node, order_of[a.kind], a.ops)
    )
    unknown_nodes = sorted(n for v in parts for n in v.unknown_nodes)
    counts: Counter[str] = Counter()
    stats: dict[str, Any] = {}
    for v in parts:
        for key, value in v.stats.items():
            if key == "anomalies":
                counts.update(value)
                stats.setdefault(key, {})
            elif key == "anomalies_listed":
                continue  # recounted below, on the merged list
            elif type(value) is int:
                stats[key] = stats.get(key, 0) + value
            else:
                raise ValueError(f"cannot merge the verdicts' stats {key!r}: {value!r}")
    stats["anomalies"] = {k: counts[k] for k in KINDS if counts[k]}
    if sum(counts.values()) > len(anomalies):
        stats["anomalies_listed"] = len(anomalies)
    cited: dict[int, Any] = {}
    for v in parts:
        cited.update(v.cited)
    valid: Validity = False if anomalies else ("unknown" if unknown_nodes else True)
    return Verdict(valid, anomalies, stats, unknown_nodes=unknown_nodes, cited=cited)


def merge_coverage(parts: Iterable[dict[Situation, int]]) -> Coverage:
    """Coverage counts of disjoint sets of nodes, summed (every situation is counted per node)."""
    total: Counter[Situation] = Counter()
    for counts in parts:
        total.update(counts)
    return Coverage({s: total[s] for s in SITUATIONS})
