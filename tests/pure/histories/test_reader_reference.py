"""The reader's fast loop against the reference: the plain one-event-at-a-time reading it replaced.

``HistoryReader`` decodes most lines with a typed msgspec struct and checks the
values inline; a line the struct rejects takes the general path. Speed must not
change a single answer: here the reference (the reader's loop before it was made
fast, kept verbatim but for names) reads every mutated and generated file too,
and both must give the same ops, nemesis events, warnings, event count and cut,
or the same one-line error.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from combined import combine, many_runs
from hypothesis import given
from hypothesis import strategies as st
from mutants import byte_mutants, json_mutants, note
from paths import EXAMPLES

from leasecheck.histories import HistoryError, HistoryReader, Op
from leasecheck.histories.format import HISTORY_END, NEMESIS
from leasecheck.histories.reader import _decode_event
from leasecheck.histories.rules import check_completion_value, check_invoke_value, describe
from leasecheck.histories.vocabulary import CLIENT_FUNCTIONS, EVENT_TYPES


class ReferenceReader(HistoryReader):
    """The reader with its loop as it was: every line decoded as a plain ``Event``, every rule in turn."""

    def ops(self) -> Iterator[Op]:
        open_ops: dict[int, Any] = {}
        retired: set[int] = set()
        expected = 0
        last_time = 0
        lineno = 1
        error = self._error
        try:
            for raw in self._lines:
                lineno += 1
                try:
                    ev = _decode_event(raw)
                except msgspec.MsgspecError as e:
                    if not raw.strip():
                        continue
                    if not raw.endswith(b"\n") and not isinstance(e, msgspec.ValidationError):
                        self.cut_line = lineno
                        break
                    raise error(lineno, describe(e)) from None
                if ev.index != expected:
                    if ev.index < expected:
                        raise error(lineno, f"index {ev.index} repeats or goes back (expected {expected})")
                    raise error(lineno, f"index gap: {ev.index} after {expected - 1} (expected {expected})")
                expected += 1
                t = ev.time
                if t < last_time:
                    raise error(lineno, f"time goes backwards: {t} ns after {last_time} ns")
                last_time = t
                p = ev.process
                if isinstance(p, str):
                    if p != NEMESIS:
                        raise error(lineno, f'process must be an integer or "nemesis", not {p!r}')
                    if ev.type not in EVENT_TYPES:
                        raise error(lineno, f"unknown type {ev.type!r} (invoke, ok, fail or info)")
                    if ev.f == HISTORY_END:
                        self.end_line = end = lineno
                        for rest in self._lines:
                            lineno += 1
                            if rest.strip():
                                raise error(lineno, f"a line after the history-end event of line {end} "
                                                    "(that event ends a history: it is its last line)")
                        break
                    self.nemesis.append(ev)
                    continue
                typ = ev.type
                if typ == "invoke":
                    if ev.f not in CLIENT_FUNCTIONS:
                        raise error(lineno, f"unknown f {ev.f!r} (one of {', '.join(sorted(CLIENT_FUNCTIONS))})")
                    if not ev.node or ev.node.__class__ is not str:
                        raise error(lineno, f'{ev.f} invoke lacks "node"')
                    if p in open_ops:
                        raise error(lineno, f"process {p} invokes while op {open_ops[p].index} is still outstanding (one op per process at a time)")
                    if p in retired:
                        raise error(lineno, f"process {p} is reused after an info completion (a restarted worker must take a new process number)")
                    problem = check_invoke_value(ev)
                    if problem:
                        raise error(lineno, problem)
                    open_ops[p] = ev
                elif typ == "ok" or typ == "fail" or typ == "info":
                    inv = open_ops.pop(p, None)
                    if inv is None:
                        if p in retired:
                            raise error(lineno, f"process {p} completes an op after its info completion")
                        raise error(lineno, f"{typ} completion with no invoke: process {p} has no op outstanding")
                    if ev.f != inv.f:
                        raise error(lineno, f"completion f {ev.f!r} does not match its invoke's {inv.f!r} (op {inv.index})")
                    if ev.node is not None and ev.node != inv.node:
                        raise error(lineno, f"completion node {ev.node!r} does not match its invoke's {inv.node!r} (op {inv.index})")
                    problem = check_completion_value(ev, inv.f)
                    if problem:
                        raise error(lineno, problem)
                    if typ == "info":
                        retired.add(p)
                        done = None
                    else:
                        done = t
                    f = inv.f
                    if f == "read-resource":  # names no epoch of its own (its entries do)
                        epoch = None
                    elif f == "claim" or f == "read":
                        epoch = ev.value.get("epoch") if typ == "ok" else None
                    else:
                        epoch = inv.value.get("epoch")
                    yield Op(inv.index, p, f, inv.node, inv.value, typ, ev.value, inv.time, done, ev.index, epoch)
                else:
                    raise error(lineno, f"unknown type {typ!r} (invoke, ok, fail or info)")
        except OSError as e:
            raise error(lineno, f"cannot read: {e}") from None
        finally:
            self.events = expected
            self.last_time = last_time
            self.lines = lineno
            self.close()
        if open_ops:
            self.warnings.append(f"{self.name}: {len(open_ops)} op(s) never completed (the run may have been cut short); they count as info")
        for p, inv in sorted(open_ops.items(), key=lambda pe: pe[1].index):
            yield Op(inv.index, p, inv.f, inv.node, inv.value, "info", {}, inv.time, None, None,
                     None if inv.f in ("claim", "read", "read-resource") else inv.value.get("epoch"))


def read(cls: type[HistoryReader], path: Path) -> Any:
    """Everything a reader gives for a file, as plain data, or its one-line error."""
    try:
        r = cls(path)
        ops = list(r.ops())
    except HistoryError as e:
        return str(e)
    return (
        [msgspec.structs.astuple(op) for op in ops],
        [msgspec.structs.astuple(e) for e in r.nemesis],
        r.warnings, r.events, r.last_time, r.cut,
    )


def same_as_reference(path: Path) -> None:
    assert read(HistoryReader, path) == read(ReferenceReader, path)


@given(case=st.one_of(json_mutants(), byte_mutants()))
def test_mutated_files_read_as_the_reference_reads_them(tmp_path_factory: Any, case: tuple[bytes, bytes, list[str]]) -> None:
    _, mutant, done = case
    note("; ".join(done))
    path = tmp_path_factory.getbasetemp() / "reference-mutant.jsonl"
    path.write_bytes(mutant)
    same_as_reference(path)


@given(history=many_runs())
def test_generated_histories_read_as_the_reference_reads_them(tmp_path_factory: Any, history: bytes) -> None:
    path = tmp_path_factory.getbasetemp() / "reference-runs.jsonl"
    path.write_bytes(history)
    same_as_reference(path)


def test_the_examples_read_as_the_reference_reads_them() -> None:
    for path in sorted(EXAMPLES.glob("*.jsonl")):
        same_as_reference(path)


#: values to put on every line: of every JSON type, and each rule on a value met or broken
SHAPES = (
    b"null", b"[1]", b"7", b'"x"', b"{}", b'{"epoch":1}', b'{"epoch":"1"}', b'{"epoch":null}', b'{"epoch":true}',
    b'{"status":"DONE"}', b'{"status":"READY","epoch":"1"}', b'{"status":"RUNNING","epoch":2}', b'{"status":["READY"]}',
    b'{"reason":"held"}', b'{"reason":"nope"}', b'{"reason":["held"]}', b'{"reason":null}',
)


def test_a_history_of_every_value_shape_reads_as_the_reference_reads_it(tmp_path: Path) -> None:
    """Values of every JSON type on every line of a many-run history (info values are kept, the rest refused)."""
    rng = random.Random(11)
    from sim import SimConfig, simulate

    base = combine([simulate(rng, SimConfig(nodes=2, ops=20, crash_p=0.2)) for _ in range(3)], rng, nemesis=2).split(b"\n")
    for i in range(1, len(base) - 1):
        for shape in SHAPES:
            lines = list(base)
            head, sep, _ = lines[i].rpartition(b',"value":')
            if not sep:
                continue
            lines[i] = head + b',"value":' + shape + b"}"
            path = tmp_path / "shapes.jsonl"
            path.write_bytes(b"\n".join(lines))
            same_as_reference(path)
