"""The format's own spec holds: histories/FORMAT.md and its JSON Schemas against the corpus.

People who record histories in other languages read ``histories/FORMAT.md`` and validate
their lines with ``histories/schema/history-v1.json``; nothing else tells them the format.
So every history we ship or produce must validate, the schema's words must be the
vocabulary's, the bad examples the schema *can* see (one line at a time) must fail it,
and every place where the schema and the reader knowingly disagree is pinned here, so
that a change to either one forces FORMAT.md's list of differences to be revisited.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")

from paths import REPO  # noqa: E402

from leasecheck.checker import check_source  # noqa: E402
from leasecheck.checker.verdict import Verdict  # noqa: E402
from leasecheck.cli import main  # noqa: E402
from leasecheck.histories import HistoryError, read_history  # noqa: E402
from leasecheck.histories.vocabulary import (  # noqa: E402
    CLIENT_FUNCTIONS,
    EVENT_TYPES,
    FAIL_REASONS,
    KINDS,
    READ_STATUSES,
)

HISTORIES = REPO / "histories"
EXAMPLES = HISTORIES / "examples"
FORMAT_MD = HISTORIES / "FORMAT.md"
HISTORY_SCHEMA = json.loads((HISTORIES / "schema" / "history-v1.json").read_text())
VERDICT_SCHEMA = json.loads((HISTORIES / "schema" / "verdict-v1.json").read_text())
EXPECTED: dict[str, dict[str, Any]] = json.loads((EXAMPLES / "expected.json").read_text())
BAD_INPUT = "bad-input"

#: anomaly kinds docs/contracts/anomaly-kinds.md defines that this checker does not report yet (FORMAT.md says "reserved"):
#: none since premature-expiry is reported; a kind the contract adds goes here until it is checked
RESERVED_KINDS: set[str] = set()

V = jsonschema.Draft202012Validator
_registry = referencing.Registry().with_resources(
    [(s["$id"], referencing.Resource.from_contents(s)) for s in (HISTORY_SCHEMA, VERDICT_SCHEMA)]
)


def _validator(ref: str) -> Any:
    return V({"$ref": ref}, registry=_registry, format_checker=V.FORMAT_CHECKER)


HEADER = _validator(HISTORY_SCHEMA["$id"] + "#/$defs/header")
EVENT = _validator(HISTORY_SCHEMA["$id"] + "#/$defs/event")
LINE = _validator(HISTORY_SCHEMA["$id"])
VERDICT = _validator(VERDICT_SCHEMA["$id"])


def schema_errors(lineno: int, obj: Any) -> list[str]:
    """What the schema says about line ``lineno`` (1 is the header), one message per error."""
    v = HEADER if lineno == 1 else EVENT
    return [f"{'/'.join(map(str, e.absolute_path)) or '<line>'}: {e.message}" for e in v.iter_errors(obj)]


def history_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of a file, blank lines left out like the reader does."""
    for n, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1):
        if raw.strip():
            yield n, raw


def assert_history_validates(path: Path, *, truncated_tail: bool = False) -> int:
    """Every line of ``path`` validates (header for line 1, event for the rest); returns the line count."""
    lines = list(history_lines(path))
    if truncated_tail:
        n, raw = lines.pop()
        assert not raw.endswith(b"\n"), f"{path.name}:{n}: the truncated line should lack its newline"
        with pytest.raises(json.JSONDecodeError):
            json.loads(raw)
    assert lines and lines[0][0] == 1
    for n, raw in lines:
        errors = schema_errors(n, json.loads(raw))
        assert errors == [], f"{path.name}:{n}: {errors}"
    return len(lines)


# ------------------------------------------------------------------ the schemas themselves


@pytest.mark.parametrize("schema", [HISTORY_SCHEMA, VERDICT_SCHEMA], ids=["history", "verdict"])
def test_schemas_are_valid_draft_2020_12(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    V.check_schema(schema)


def test_schema_words_are_the_vocabulary() -> None:
    """One vocabulary (histories/vocabulary.py): the schema must not drift from it."""
    defs = HISTORY_SCHEMA["$defs"]
    assert set(defs["op-name"]["enum"]) == CLIENT_FUNCTIONS
    assert set(defs["event-type"]["enum"]) == EVENT_TYPES
    assert set(defs["fail-reason"]["enum"]) == FAIL_REASONS
    assert set(defs["status"]["enum"]) == READ_STATUSES
    kinds = VERDICT_SCHEMA["$defs"]["kind"]["enum"]
    assert set(KINDS) <= set(kinds), "a kind the checker reports is missing from verdict-v1.json"
    assert set(kinds) - set(KINDS) <= RESERVED_KINDS, "verdict-v1.json names a kind nobody defined"


def test_root_schema_accepts_either_kind_of_line() -> None:
    path = EXAMPLES / "nemesis-pause-resume.jsonl"
    for _, raw in history_lines(path):
        LINE.validate(json.loads(raw))


# ----------------------------------------------------------------------- the example corpus


VALID_FORMAT = sorted(name for name, exp in EXPECTED.items() if exp["valid"] != BAD_INPUT)


@pytest.mark.parametrize("name", VALID_FORMAT)
def test_every_line_of_every_example_validates(name: str) -> None:
    truncated = EXPECTED[name].get("cut", {}).get("by") == "cut-line"
    assert_history_validates(EXAMPLES / name, truncated_tail=truncated)


#: bad-input examples whose broken line breaks the schema by itself: why, per file
PER_LINE: dict[str, str] = {
    "bad-input-bad-json-in-middle.jsonl": "the line is not JSON at all (and not the last line)",
    "bad-input-missing-header.jsonl": "line 1 is an event: the header schema requires format, version, ttl_ms, ...",
    "bad-input-unknown-effect-fence.jsonl": "effect_fence 'resource' is not in the header's enum",
    "bad-input-unknown-f.jsonl": "f 'steal' is not in the op-name enum",
    "bad-input-unknown-type.jsonl": "type 'timeout' is not in the event-type enum",
    "bad-input-end-marker-not-boolean.jsonl": "end_marker 'yes' is not a boolean",
}
#: bad-input examples every line of which is fine alone: only the reader's cross-line rules catch them
CROSS_LINE: dict[str, str] = {
    "bad-input-completion-without-invoke.jsonl": "a completion needs an outstanding invoke of its process",
    "bad-input-index-gap.jsonl": "index must follow the previous event's",
    "bad-input-reused-retired-process.jsonl": "a process is never used again after an info completion",
    "bad-input-time-backwards.jsonl": "time must not go below the previous event's",
    "bad-input-two-outstanding-ops.jsonl": "one outstanding op per process",
    "bad-input-line-after-history-end.jsonl": "the history-end event is the last line",
}


def test_every_bad_input_example_is_classified() -> None:
    """A new bad-input example must say whether a per-line schema can see it."""
    bad = {name for name, exp in EXPECTED.items() if exp["valid"] == BAD_INPUT}
    assert set(PER_LINE) | set(CROSS_LINE) == bad
    assert not set(PER_LINE) & set(CROSS_LINE)


@pytest.mark.parametrize("name", sorted(PER_LINE))
def test_per_line_bad_input_is_rejected_by_the_schema_on_the_readers_line(name: str) -> None:
    path = EXAMPLES / name
    line = EXPECTED[name]["line"]
    with pytest.raises(HistoryError) as e:
        read_history(path)
    assert e.value.line == line
    first_bad = None
    for n, raw in history_lines(path):
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            first_bad = first_bad or n
            continue
        if schema_errors(n, obj):
            first_bad = first_bad or n
    assert first_bad == line, f"{name}: the schema's first bad line is {first_bad}, the reader's {line}"


@pytest.mark.parametrize("name", sorted(CROSS_LINE))
def test_cross_line_bad_input_is_invisible_to_a_per_line_schema(name: str) -> None:
    """Every line passes the schema; the reader rejects the file at the expected line."""
    path = EXAMPLES / name
    assert_history_validates(path)
    with pytest.raises(HistoryError) as e:
        read_history(path)
    assert e.value.line == EXPECTED[name]["line"]


# ------------------------------------------------------- where the schema and the reader meet

H = {"format": "leasecheck-history", "version": 1, "ttl_ms": 1000, "clock_uncertainty_ms": 50}
N = "run-7/deploy-prod"


def ev(i: int, process: Any, type_: str, f: str, value: Any = None, node: Any = N, **extra: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"index": i, "time": i * 1000, "process": process, "type": type_, "f": f}
    if node is not None:
        e["node"] = node
    if value is not None:
        e["value"] = value
    e.update(extra)
    return e


def invoke(f: str, value: Any, p: int = 0) -> dict[str, Any]:
    return ev(0, p, "invoke", f, value)


CLAIM = invoke("claim", {"owner": "w0"})
RENEW = invoke("renew", {"epoch": 1})
READ = invoke("read", {})

#: (case, lines; the LAST line is the one judged, schema says, reader says)
#: Rows where the two disagree are the list in FORMAT.md "Accepted, but do not write",
#: plus the one thing JSON Schema cannot say (12.0 is an integer to it).
CASES: list[tuple[str, list[Any], bool, bool]] = [
    # ---- header
    ("header, minimal", [H], True, True),
    ("header with metadata and effect_fence token", [{**H, "effect_fence": "token", "seed": 3, "x": [1]}], True, True),
    ("header, float ttl", [{**H, "ttl_ms": 12.5}], True, True),
    ("header without ttl_ms", [{k: v for k, v in H.items() if k != "ttl_ms"}], False, False),
    ("header without clock_uncertainty_ms", [{k: v for k, v in H.items() if k != "clock_uncertainty_ms"}], False, False),
    ("header, negative ttl", [{**H, "ttl_ms": -1}], False, False),
    ("header, ttl as string", [{**H, "ttl_ms": "1000"}], False, False),
    ("header, ttl true", [{**H, "ttl_ms": True}], False, False),
    ("header, version 2", [{**H, "version": 2}], False, False),
    ("header, wrong format", [{**H, "format": "jepsen"}], False, False),
    ("header is an array", [[H]], False, False),
    ("header with effect_fence lease", [{**H, "effect_fence": "lease"}], True, True),
    ("header, effect_fence bogus", [{**H, "effect_fence": "bogus"}], False, False),
    ("header, effect_fence null", [{**H, "effect_fence": None}], False, False),
    ("header, effect_fence upper case", [{**H, "effect_fence": "LEASE"}], False, False),
    ("header, version true [reader tolerates]", [{**H, "version": True}], False, True),
    # ---- events, shape
    ("claim invoke", [H, CLAIM], True, True),
    ("claim invoke without value", [H, ev(0, 0, "invoke", "claim")], True, True),
    ("claim invoke, value null", [H, ev(0, 0, "invoke", "claim", node=N) | {"value": None}], True, True),
    ("read invoke", [H, READ], True, True),
    ("extra event keys are ignored", [H, CLAIM | {"worker": "w0", "latency_ms": 2}], True, True),
    ("index negative", [H, CLAIM | {"index": -1}], False, False),
    ("index missing", [H, {k: v for k, v in CLAIM.items() if k != "index"}], False, False),
    ("time as string", [H, CLAIM | {"time": "0"}], False, False),
    ("time negative", [H, CLAIM | {"time": -5}], False, False),
    ("process bool", [H, CLAIM | {"process": True}], False, False),
    ("process other string", [H, CLAIM | {"process": "worker-1"}], False, False),
    ("process negative [reader tolerates]", [H, CLAIM | {"process": -1}], False, True),
    ("type unknown", [H, CLAIM | {"type": "timeout"}], False, False),
    ("f unknown", [H, CLAIM | {"f": "steal"}], False, False),
    ("f not a string", [H, CLAIM | {"f": 3}], False, False),
    ("invoke without node", [H, {k: v for k, v in CLAIM.items() if k != "node"}], False, False),
    ("invoke with empty node", [H, CLAIM | {"node": ""}], False, False),
    ("node not a string", [H, CLAIM | {"node": 7}], False, False),
    ("event is an array", [H, [CLAIM]], False, False),
    ("index written 0.0 [JSON Schema cannot tell]", [H, CLAIM | {"index": 0.0}], True, False),
    # ---- invoke values
    ("renew invoke", [H, RENEW], True, True),
    ("renew invoke without value", [H, ev(0, 0, "invoke", "renew")], False, False),
    ("renew invoke without epoch", [H, invoke("renew", {})], False, False),
    ("renew invoke, epoch string", [H, invoke("renew", {"epoch": "1"})], False, False),
    ("renew invoke, epoch true", [H, invoke("renew", {"epoch": True})], False, False),
    ("renew invoke, value a list", [H, invoke("renew", [1])], False, False),
    ("claim invoke, value a string", [H, invoke("claim", "w0")], False, False),
    ("effect invoke", [H, invoke("effect", {"epoch": 1, "payload": "a-1"})], True, True),
    ("commit invoke", [H, invoke("commit", {"epoch": 1, "result": "r"})], True, True),
    ("release invoke", [H, invoke("release", {"epoch": 1})], True, True),
    ("unfenced commit invoke", [H, invoke("commit", {"epoch": None, "token": "t", "result": "r"})], True, True),
    ("unfenced renew without token [reader tolerates]", [H, invoke("renew", {"epoch": None})], False, True),
    ("renew epoch written 1.0 [JSON Schema cannot tell]", [H, invoke("renew", {"epoch": 1.0})], True, False),
    # ---- completions
    ("ok claim", [H, CLAIM, ev(1, 0, "ok", "claim", {"epoch": 1})], True, True),
    ("ok claim without node", [H, CLAIM, ev(1, 0, "ok", "claim", {"epoch": 1}, node=None)], True, True),
    ("ok claim, node null", [H, CLAIM, ev(1, 0, "ok", "claim", {"epoch": 1}, node=None) | {"node": None}], True, True),
    ("ok claim, unfenced", [H, CLAIM, ev(1, 0, "ok", "claim", {"epoch": None, "token": {"id": 9}})], True, True),
    ("ok claim without epoch", [H, CLAIM, ev(1, 0, "ok", "claim", {})], False, False),
    ("ok claim without value", [H, CLAIM, ev(1, 0, "ok", "claim")], False, False),
    ("ok claim, epoch float", [H, CLAIM, ev(1, 0, "ok", "claim", {"epoch": 1.5})], False, False),
    ("ok claim, unfenced without token [reader tolerates]", [H, CLAIM, ev(1, 0, "ok", "claim", {"epoch": None})], False, True),
    ("ok renew", [H, RENEW, ev(1, 0, "ok", "renew", {})], True, True),
    ("ok renew without value", [H, RENEW, ev(1, 0, "ok", "renew")], True, True),
    ("ok renew, value a list", [H, RENEW, ev(1, 0, "ok", "renew", [1])], False, False),
    ("ok read", [H, READ, ev(1, 0, "ok", "read", {"status": "RUNNING", "epoch": 1, "owner": "w0"})], True, True),
    ("ok read, status only", [H, READ, ev(1, 0, "ok", "read", {"status": "READY"})], True, True),
    ("ok read without status", [H, READ, ev(1, 0, "ok", "read", {"epoch": 1})], False, False),
    ("ok read, status lowercase", [H, READ, ev(1, 0, "ok", "read", {"status": "ready"})], False, False),
    ("ok read, epoch string", [H, READ, ev(1, 0, "ok", "read", {"status": "RUNNING", "epoch": "1"})], False, False),
    ("fail held", [H, CLAIM, ev(1, 0, "fail", "claim", {"reason": "held"})], True, True),
    ("fail error with message", [H, RENEW, ev(1, 0, "fail", "renew", {"reason": "error", "message": "boom"})], True, True),
    ("fail without reason", [H, RENEW, ev(1, 0, "fail", "renew", {})], False, False),
    ("fail without value", [H, RENEW, ev(1, 0, "fail", "renew")], False, False),
    ("fail, unknown reason", [H, RENEW, ev(1, 0, "fail", "renew", {"reason": "timeout"})], False, False),
    ("fail error without message [reader tolerates]", [H, RENEW, ev(1, 0, "fail", "renew", {"reason": "error"})], False, True),
    ("info with a message", [H, RENEW, ev(1, 0, "info", "renew", {"message": "timeout"})], True, True),
    ("info without value", [H, RENEW, ev(1, 0, "info", "renew")], True, True),
    ("info, value a string", [H, RENEW, ev(1, 0, "info", "renew", "timeout")], True, True),
    # ---- nemesis
    ("nemesis info", [H, ev(0, "nemesis", "info", "pause", {"victims": [0]}, node=None)], True, True),
    ("nemesis, free f", [H, ev(0, "nemesis", "info", "flood-the-datacenter", node=None)], True, True),
    ("nemesis, type unknown", [H, ev(0, "nemesis", "start", "pause", node=None)], False, False),
    ("nemesis, f not a string", [H, ev(0, "nemesis", "info", 5, node=None)], False, False),
    ("nemesis, type invoke [reader tolerates]", [H, ev(0, "nemesis", "invoke", "pause", node=None)], False, True),
]


def reader_accepts(lines: list[Any]) -> bool:
    try:
        read_history([json.dumps(x) for x in lines])
    except HistoryError:
        return False
    return True


@pytest.mark.parametrize(("lines", "schema_ok", "reader_ok"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_schema_and_reader_on_one_line(lines: list[Any], schema_ok: bool, reader_ok: bool) -> None:
    """The last line judged alone by the schema, and in its small history by the reader."""
    errors = schema_errors(len(lines), lines[-1])
    assert (errors == []) is schema_ok, errors or "the schema accepts it"
    assert reader_accepts(lines) is reader_ok


def test_every_tolerance_is_listed_in_format_md() -> None:
    """FORMAT.md's "Accepted, but do not write" names each case the reader lets through."""
    text = FORMAT_MD.read_text()
    section = text.split("**Accepted, but do not write**", 1)[1].split("\n## ", 1)[0]
    words = {
        "process negative": "negative client `process`",
        "version true": "`version` of `true`",
        "without token": '`"epoch": null` without a `"token"`',
        "error without message": "reason `error` and no",
        "nemesis, type invoke": "nemesis event whose `type` is not `info`",
    }
    tolerated = [c[0] for c in CASES if not c[2] and c[3]]
    for case in tolerated:
        hits = [phrase for key, phrase in words.items() if key in case]
        assert hits, f"case {case!r} has no phrase to look for"
        for phrase in hits:
            assert phrase in section, f"FORMAT.md does not list: {phrase}"
    assert "12.0" in text  # the integer caveat


# ------------------------------------------------------------------------ FORMAT.md itself


def format_md_example() -> list[str]:
    blocks = re.findall(r"```jsonl\n(.*?)```", FORMAT_MD.read_text(), flags=re.S)
    assert len(blocks) == 1, "FORMAT.md has exactly one complete example (a ```jsonl block)"
    return blocks[0].strip().splitlines()


def test_format_md_example_validates_and_is_valid(tmp_path: Path) -> None:
    lines = format_md_example()
    path = tmp_path / "example.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert assert_history_validates(path) == len(lines)
    verdict = check_source(path)
    assert verdict.warnings == []
    assert verdict.valid is True, verdict.to_json()
    VERDICT.validate(verdict.to_json())
    kinds_of_line = {(json.loads(x).get("process") == "nemesis", json.loads(x).get("type")) for x in lines[1:]}
    assert {(False, t) for t in ("invoke", "ok", "fail", "info")} | {(True, "info")} <= kinds_of_line


def test_format_md_json_snippets_validate() -> None:
    """Every one-line ```json snippet in FORMAT.md is a header, an event or a verdict, and valid."""
    snippets = re.findall(r"```json\n(.*?)```", FORMAT_MD.read_text(), flags=re.S)
    assert snippets
    for snippet in snippets:
        for line in snippet.strip().splitlines():
            obj = json.loads(line)
            if "format" in obj:
                HEADER.validate(obj)
            elif "index" in obj:
                EVENT.validate(obj)
            else:
                VERDICT.validate(obj)


def _table_rows(section_title: str) -> list[str]:
    text = FORMAT_MD.read_text()
    section = text.split(section_title, 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        m = re.match(r"\| `([a-z-]+)` \|", line)
        if m:
            rows.append(m.group(1))
    return rows


def test_format_md_lists_every_kind_and_marks_the_reserved_ones() -> None:
    rows = _table_rows("## Anomaly kinds")
    assert set(KINDS) <= set(rows), "a kind the checker reports is missing from FORMAT.md"
    text = FORMAT_MD.read_text()
    for kind in set(rows) - set(KINDS):
        assert kind in RESERVED_KINDS
        assert re.search(rf"\| `{kind}` \| \*\*reserved", text), f"{kind} is not reported yet: FORMAT.md must say so"
    for kind in set(KINDS) & RESERVED_KINDS:  # once it is implemented, the doc must stop calling it reserved
        assert not re.search(rf"\| `{kind}` \| \*\*reserved", text), f"{kind} is reported now: drop 'reserved'"


def test_format_md_lists_every_fail_reason() -> None:
    assert set(_table_rows("### Fail reasons")) == FAIL_REASONS


def test_format_md_is_packaged() -> None:
    """FORMAT.md and the schemas ship in the wheel (pyproject's package-data)."""
    text = (REPO / "pyproject.toml").read_text()
    data = re.search(r'"leasecheck\.histories" = \[(.*?)\]', text)
    assert data is not None
    assert '"*.md"' in data.group(1) and '"schema/*.json"' in data.group(1)


# ------------------------------------------------------------------------- the verdict JSON


def check_json(*paths: Path) -> tuple[int, list[dict[str, Any]]]:
    r = CliRunner().invoke(main, ["check", "--json", *map(str, paths)], catch_exceptions=False)
    return r.exit_code, [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("name", VALID_FORMAT)
def test_check_json_of_every_example_validates(name: str) -> None:
    code, out = check_json(EXAMPLES / name)
    assert len(out) == 1
    VERDICT.validate(out[0])
    assert code == {True: 0, False: 1, "unknown": 2}[out[0]["valid"]]
    assert out[0]["valid"] == EXPECTED[name]["valid"]


def test_check_json_of_several_paths_validates() -> None:
    names = ["stale-commit-after-takeover.jsonl", "claim-fails-held-while-held.jsonl", "truncated-last-line.jsonl"]
    code, out = check_json(*(EXAMPLES / n for n in names))
    assert code == 1
    assert [Path(o["history"]).name for o in out] == names
    for o in out:
        VERDICT.validate(o)
    assert out[2]["warnings"]


def test_unknown_verdict_shape_validates() -> None:
    """An 'unknown' verdict (a search out of budget) as to_json() writes it, and its violations."""
    real = check_source(EXAMPLES / "unfenced-clean-grant-order.jsonl")
    unknown = Verdict("unknown", [], real.stats, unknown_nodes=["run-7/deploy-prod"]).to_json()
    VERDICT.validate(unknown)
    assert not VERDICT.is_valid({k: v for k, v in unknown.items() if k != "unknown_nodes"})
    bad = check_json(EXAMPLES / "stale-commit-after-takeover.jsonl")[1][0]
    assert not VERDICT.is_valid({**bad, "valid": True}), "valid true with anomalies listed"
    assert not VERDICT.is_valid({**bad, "anomalies": []}), "valid false with no anomaly"
    assert not VERDICT.is_valid({**bad, "anomalies": [{**bad["anomalies"][0], "kind": "stale-lunch"}]})
    assert not VERDICT.is_valid({**bad, "anomalies": [{**bad["anomalies"][0], "ops": []}]})


# ------------------------------------------------------------ histories from real runs


#: (name, extra options): short SQLite runs, one with faults, one hot (few nodes, many
#: workers: held refusals), one broken variant (anomalies in the verdict)
RUNS: list[tuple[str, list[str]]] = [
    ("faults", ["--target", "sqlite", "--nemesis", "pause,kill", "--nemesis-interval", "0.5"]),
    ("hot", ["--target", "sqlite", "--nemesis", "none", "--nodes", "2", "--concurrency", "6"]),
    ("broken", ["--target", "sqlite-non-atomic-claim", "--nemesis", "pause", "--nemesis-interval", "0.5"]),
]


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, Path, str]]:
    """Start every run at once (they are independent), then wait: (exit code, run folder, stderr)."""
    base = tmp_path_factory.mktemp("runs")
    procs = {}
    for name, opts in RUNS:
        store = base / name
        cmd = [sys.executable, "-m", "leasecheck", "run", "--time-limit", "3", "--seed", "11", "--store", str(store), *opts]
        procs[name] = (store, subprocess.Popen(cmd, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = {}
    for name, (store, proc) in procs.items():
        try:
            _, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        histories = sorted(store.glob("*/*/history.jsonl"))
        out[name] = (proc.returncode, histories[-1].parent if histories else store, err)
    return out


@pytest.mark.parametrize("name", [r[0] for r in RUNS])
def test_histories_of_real_runs_validate(name: str, real_runs: dict[str, tuple[int, Path, str]]) -> None:
    code, run_dir, err = real_runs[name]
    assert code in (0, 1, 2), f"leasecheck run exited {code}: {err[-2000:]}"
    history = run_dir / "history.jsonl"
    assert history.is_file(), f"no history in {run_dir}: {err[-2000:]}"
    assert assert_history_validates(history) > 10
    code, out = check_json(run_dir)
    assert code in (0, 1, 2)
    VERDICT.validate(out[0])
    if name == "faults":
        events = [json.loads(raw) for _, raw in history_lines(history)][1:]
        assert any(e["process"] == "nemesis" for e in events), "the faulted run recorded no nemesis event"


def test_format_md_python_snippet_runs(tmp_path: Path) -> None:
    """The validation recipe FORMAT.md gives works as printed (on a good and a bad history)."""
    blocks = re.findall(r"```python\n(.*?)```", FORMAT_MD.read_text(), flags=re.S)
    assert len(blocks) == 1
    script = tmp_path / "validate.py"
    for history, ok in [(EXAMPLES / "clean-run-three-nodes-four-workers.jsonl", True), (EXAMPLES / "bad-input-unknown-f.jsonl", False)]:
        script.write_text(blocks[0].replace('"history.jsonl"', repr(str(history))))
        done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert (done.returncode == 0) is ok, done.stderr[-2000:]
        if not ok:
            assert "'steal' is not one of" in done.stderr
