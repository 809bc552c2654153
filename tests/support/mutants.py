"""Valid histories of the simulated store (tests/support/sim.py), mutated at random: the bad files every reader is fed.

At the byte level (flips, insertions, deletions, truncation) and at the JSON
level (keys deleted or retyped, lines swapped, duplicated or dropped, index /
time / process / type / f / node / values changed, header removed or broken).
The CLI's contract under them is tests/local/test_bad_input.py's; the reader's
fast loop is held to its reference under the same mutants
(tests/pure/histories/test_reader_reference.py).
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from hypothesis import note as _note
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from sim import PLANTERS, SimConfig, simulate

from leasecheck.histories import CLIENT_FUNCTIONS, FAIL_REASONS


def note(text: str) -> None:
    """hypothesis.note inside a @given test, nothing in a plain one."""
    if currently_in_test_context():
        _note(text)


# --------------------------------------------------------------------------------------
# the valid files the mutations start from


def _bases() -> list[bytes]:
    out: list[list[str]] = []
    rng = random.Random(20240611)
    for i in range(8):
        cfg = SimConfig(
            workers=3,
            nodes=1 + i % 3,
            ops=8 + 3 * i,
            ttl_ms=[20, 100, 1000][i % 3],
            clock_uncertainty_ms=i % 2,
            fenced=i % 4 != 3,
            crash_p=0.15,
            pause_p=0.2,
            final_reads=i % 2 == 0,
        )
        out.append(simulate(rng, cfg))
    # and some invalid ones, so that exit 1 and every citation path are reachable too
    for kind in ("stale-commit", "overlapping-lease", "non-linearizable", "lost-commit"):
        lines, _ = PLANTERS[kind](out[0], random.Random(1))
        out.append(lines)
    return ["".join(lines).encode() for lines in out]


BASES = _bases()


# --------------------------------------------------------------------------------------
# mutations


def _json_values() -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-5, 60)
        | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=6)
        | st.sampled_from(["", "READY", "RUNNING", "SUCCEEDED", "nemesis", "ok", "info", "claim", "n0", "tok-1-0000"])
    )
    return st.recursive(
        scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6
    )


#: plausible replacements for the fields the checker reads (deeper than "wrong type")
_FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "index": st.integers(-2, 80),
    "time": st.integers(-10, 2**63) | st.sampled_from([0, 1, 10**9]),
    "process": st.integers(-1, 300) | st.sampled_from(["nemesis", "0", "p1"]),
    "type": st.sampled_from(["invoke", "ok", "fail", "info", "OK", "", "invoke "]),
    "f": st.sampled_from(sorted(CLIENT_FUNCTIONS) + ["pause", "kill", "Claim", ""]),
    "node": st.sampled_from(["n0", "n1", "n2", "planted", ""]) | st.none() | st.integers(0, 3),
    "epoch": st.integers(-2, 12) | st.none() | st.sampled_from(["1", 1.0, True]),
    "token": st.sampled_from(["tok-1-0000", "tok-2-0001", "x"]) | st.none() | st.integers(0, 3) | st.lists(st.integers(0, 2), max_size=2) | st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2), max_size=2),
    "reason": st.sampled_from(sorted(FAIL_REASONS) + ["nope", ""]) | st.none(),
    "status": st.sampled_from(["READY", "RUNNING", "SUCCEEDED", "DONE"]) | st.none() | st.integers(0, 1),
    "owner": st.sampled_from(["w0", "w1", "w101"]) | st.none() | st.integers(0, 2),
    "result": st.sampled_from(["r0.1", "r1.2", ""]) | st.none() | st.integers(0, 2) | st.lists(st.integers(0, 2), max_size=2),
    "ttl_ms": st.sampled_from([0, 1, 100, -1, 1e308, 0.5, "100", None]),
    "clock_uncertainty_ms": st.sampled_from([0, 1, 1000, -1, 1e308, "0", None, 10**30]),
    "version": st.sampled_from([1, 2, 0, "1", 1.0, None]),
    "format": st.sampled_from(["leasecheck-history", "leasecheck", "", None]),
}


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a JSON object (dict keys and list indices)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append(prefix + (k,))
            out.extend(_paths(v, prefix + (k,)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append(prefix + (i,))
            out.extend(_paths(v, prefix + (i,)))
    return out


def _get_parent(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path[:-1]:
        obj = obj[k]
    return obj


@st.composite
def json_mutation(draw: Any, objs: list[Any]) -> str:
    """Mutate the parsed lines in place; returns a description (for note())."""
    n = len(objs)
    what = draw(
        st.sampled_from(
            # field-aware edits most often: they keep the file readable and so reach the checker
            ["set-field"] * 4 + ["retype"] * 2 + ["add-key"] * 2
            + ["delete-key", "swap", "duplicate", "drop-line", "remove-header", "move-line"]
        )
    )
    if what in ("swap", "move-line") and n >= 2:
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if what == "swap":
            objs[i], objs[j] = objs[j], objs[i]
        else:
            objs.insert(j, objs.pop(i))
        return f"{what} lines {i + 1} and {j + 1}"
    if what == "duplicate" and n >= 1:
        i = draw(st.integers(0, n - 1))
        objs.insert(i + 1, copy.deepcopy(objs[i]))
        return f"duplicate line {i + 1}"
    if what == "drop-line" and n >= 1:
        i = draw(st.integers(0, n - 1))
        del objs[i]
        return f"drop line {i + 1}"
    if what == "remove-header" and n >= 1:
        del objs[0]
        return "remove the header"
    if n == 0:
        return "nothing to mutate"
    i = draw(st.integers(0, n - 1))
    obj = objs[i]
    paths = _paths(obj)
    if what == "add-key" or not paths:
        target = obj.get("value") if isinstance(obj, dict) and isinstance(obj.get("value"), dict) else obj
        if not isinstance(target, dict):
            objs[i] = draw(_json_values())
            return f"replace line {i + 1}"
        key = draw(st.sampled_from(sorted(_FIELD_VALUES)) | st.text(max_size=4))
        target[key] = draw(_FIELD_VALUES.get(key, _json_values()))
        return f"add key {key!r} on line {i + 1}"
    path = draw(st.sampled_from(paths))
    parent = _get_parent(obj, path)
    if what == "delete-key":
        del parent[path[-1]]
        return f"delete {path} on line {i + 1}"
    key = path[-1]
    if what == "set-field" and key in _FIELD_VALUES:
        parent[key] = draw(_FIELD_VALUES[key])
    else:
        parent[key] = draw(_json_values())
    return f"{what} {path} on line {i + 1} to {parent[key]!r}"


class Mutant(tuple):
    """(original, mutant, what was done), shown briefly in Hypothesis' failure report."""

    def __new__(cls, base: int, mutant: bytes, done: list[str]) -> Mutant:
        return super().__new__(cls, (BASES[base], mutant, done))

    def __init__(self, base: int, mutant: bytes, done: list[str]) -> None:
        self.base = base

    def __repr__(self) -> str:
        return f"Mutant(base={self.base}, done={self[2]!r})"


def json_lines(objs: list[Any]) -> bytes:
    return "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objs).encode()


@st.composite
def json_mutants(draw: Any) -> Mutant:
    """(original, mutant, what was done): 1-3 JSON-level mutations of one base file."""
    b = draw(st.integers(0, len(BASES) - 1))
    objs = [json.loads(ln) for ln in BASES[b].decode().splitlines()]
    done = [draw(json_mutation(objs)) for _ in range(draw(st.integers(1, 3)))]
    return Mutant(b, json_lines(objs), done)


@st.composite
def byte_mutants(draw: Any) -> Mutant:
    """(original, mutant, what was done): 1-3 byte-level mutations of one base file."""
    b = draw(st.integers(0, len(BASES) - 1))
    data = bytearray(BASES[b])
    done = []
    for _ in range(draw(st.integers(1, 3))):
        what = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "newline", "set-byte"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if what == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif what == "set-byte" and data:
            data[pos] = draw(st.sampled_from(b'{}[]":,\\ \n\r\t0123456789-.eE\x00\xff\xc3'))
        elif what == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8) | st.sampled_from([b"\n", b"\r\n", b"{}", b'"', b"\xe2\x82"]))
        elif what == "delete":
            del data[pos : pos + draw(st.integers(1, 40))]
        elif what == "newline":
            data[pos:pos] = b"\n"
        else:
            del data[pos:]
        done.append(f"{what} at byte {pos}")
    return Mutant(b, bytes(data), done)
