"""Following a page of docs/journeys/ from its own text: its marked blocks run, its marked outputs compared.

The marks, in the style of tests/local/test_docs.py:

- ``<!-- journey: NAME -->`` before a fenced block: a block a test uses. A ``bash``
  block is run as it is (one ``bash -e`` script, the journey's folder as its working
  directory); a ``python`` block is a file the test writes, or code it puts in place of
  a part of one.
- ``<!-- journey-output: NAME -->`` before a ``text`` block: what a command printed.
  Every line of it must have the shape of a line the real output has
  (:func:`shapes.shape`: numbers, paths, run ids and the names of kinds and faults may
  differ; ``...`` skips), or, for outputs whose explanations vary with the anomalies
  found, the first words of one (:func:`shapes.label`).

Shared by every journey (tests/runs/test_journey*.py): a page's runs shortened as the
pages say, its commands run with the journey's environment, its outputs held to the page.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from paths import REPO
from shapes import label, shape

JOURNEYS = REPO / "docs" / "journeys"
#: a command of a journey (a run, an audit, a pytest session of runs): generous, a loaded CI machine is slow
TIMEOUT_S = 600
#: seconds of workload per run, instead of the pages' 30 s (leasecheck run) and 10 s (the pytest plugin)
SHORT_RUN_S = 5
#: the most a shortened gate goes on until covered (4 x its time limit, as `leasecheck run --until-covered` has it)
GATE_CAP_S = 4 * SHORT_RUN_S
#: seconds a shortened `leasecheck run` may go on until every fault started (as the pytest plugin's runs do)
EVIDENCE_WAIT_S = 30
#: a folder to write every command's real output to (to take a page's samples again): LEASECHECK_JOURNEY_OUTPUTS=DIR
KEEP_OUTPUTS = "LEASECHECK_JOURNEY_OUTPUTS"
_MARKED = re.compile(r"<!-- journey(?P<output>-output)?: (?P<name>[\w.-]+) -->\n```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)


@dataclass
class Page:
    """A journey page's marked blocks, and which of them the test has used."""

    path: Path
    blocks: dict[str, tuple[str, str]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, name: str) -> Page:
        page = cls(JOURNEYS / name)
        for m in _MARKED.finditer(page.path.read_text(encoding="utf-8")):
            kind = page.outputs if m.group("output") else page.blocks
            assert m.group("name") not in kind, f"{page}: two blocks marked {m.group('name')!r}"
            if m.group("output"):
                assert m.group("lang") == "text", f"{page}: output {m.group('name')!r} is not a text block"
                page.outputs[m.group("name")] = m.group("body")
            else:
                page.blocks[m.group("name")] = (m.group("lang"), m.group("body"))
        return page

    def __str__(self) -> str:
        return str(self.path.relative_to(REPO)) if self.path.is_relative_to(REPO) else str(self.path)

    def block(self, name: str, lang: str) -> str:
        assert name in self.blocks, f"{self}: no block marked <!-- journey: {name} -->"
        found, body = self.blocks[name]
        assert found == lang, f"{self}: block {name!r} is {found or 'plain'}, not {lang}"
        self.used.add(name)
        return body

    def output(self, name: str) -> list[str]:
        assert name in self.outputs, f"{self}: no output marked <!-- journey-output: {name} -->"
        self.used.add(f"output {name}")
        return self.outputs[name].splitlines()

    @property
    def marked(self) -> set[str]:
        return set(self.blocks) | {f"output {n}" for n in self.outputs}

    def all_used(self, names: set[str] | None = None) -> None:
        """The test used ``names`` (default: every marked block), no more and no less."""
        expected = self.marked if names is None else names
        assert self.used == expected, (f"{self}: marked but not used: {sorted(expected - self.used)};"
                                       f" used but not expected: {sorted(self.used - expected)}")


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A newcomer's shell: ours without the outer pytest's variables, pytest sessions kept in ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS", "LEASECHECK_"))}
    addopts = f"-p no:cacheprovider --basetemp {shlex.quote(str(tmp_path / 'basetemp'))} --leasecheck-time-limit {SHORT_RUN_S} --leasecheck-max-time {GATE_CAP_S}"
    env.update(PYTEST_ADDOPTS=addopts, **extra)
    return env


def shortened(script: str) -> str:
    """The page's commands as the test runs them: runs of 5 s, audits of one seed."""
    lines = []
    for line in script.splitlines():
        if line.startswith("leasecheck run ") and "--time-limit" not in line:
            line += f" --time-limit {SHORT_RUN_S} --evidence-wait {EVIDENCE_WAIT_S}"
        if line.startswith("leasecheck audit ") and "--seeds" not in line:
            line += " --seeds 1"
        lines.append(line)
    return "\n".join(lines)


def run_script(page: Page, name: str, script: str, cwd: Path, env: dict[str, str], expect: int | None = 0) -> tuple[str, int]:
    """Run ``script``, the page's bash block ``name`` as the test made it (one ``bash -e``): its stdout and stderr,
    and its exit code, which must be ``expect`` (None: any). With LEASECHECK_JOURNEY_OUTPUTS=DIR, its output is kept."""
    done = subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    out = done.stdout + done.stderr
    if keep := os.environ.get(KEEP_OUTPUTS):  # re-taking the pages' samples: every command's real output
        Path(keep).mkdir(parents=True, exist_ok=True)
        with (Path(keep) / f"{page.path.stem}.{name}.txt").open("a") as f:
            f.write(f"$ {script}\n{out}\n")
    assert expect is None or done.returncode == expect, (
        f"{page}: block {name!r} exited {done.returncode}, not {expect}:\n{script}\n{out}")
    return out, done.returncode


def run(page: Page, name: str, cwd: Path, env: dict[str, str], expect: int = 0, extra: str = "") -> str:
    """Run the page's bash block ``name`` (shortened; ``extra`` appended to its last line); its stdout and stderr."""
    return run_script(page, name, shortened(page.block(name, "bash")).rstrip("\n") + extra, cwd, env, expect)[0]

#: the seeds an audit step that must prove a finding may take: an invalid verdict is a proof, a valid one only says
#: that this seed's pauses missed the window (a paused holder that wakes after its successor is done writes nothing
#: stale; on a loaded machine about one pause run in three), so the step goes on to the next seed, never the other way
PROOF_SEEDS = (1, 2, 3)


def run_until_proven(page: Page, name: str, cwd: Path, env: dict[str, str], proven: Callable[[str], bool],
                     expect: int, extra: str = "") -> tuple[str, int]:
    """:func:`run` of an audit block with seed 1, then 2, then 3, until ``proven(output)``; (output, seed)."""
    outs = []
    for seed in PROOF_SEEDS:
        script = shortened(page.block(name, "bash")).rstrip("\n") + extra + f" --seeds {seed}"
        done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        out = done.stdout + done.stderr
        if proven(out):
            assert done.returncode == expect, f"{page}: block {name!r} exited {done.returncode}, not {expect}:\n{script}\n{out}"
            return out, seed
        outs.append(f"$ {script} (exit {done.returncode})\n{out}")
    raise AssertionError(f"{page}: block {name!r} proved nothing with seeds {PROOF_SEEDS}:\n" + "\n".join(outs))

#: parts of a line that one seed's run prints and another's does not: an audit's "invalid without the fault"
#: clause, a table cell's list of kinds (any length), pytest's wall clock after a minute, the situations a
#: short run's coverage line says it never reached (a page shows a whole run, the test runs a short one)
_WITHOUT_FAULT = re.compile(r"; invalid without the fault \([^)]*\)(?:: [^(]*\([^)]*\))?|; never: .*$")
_CODE_LIST = re.compile(r"`[\w-]+`(?:, `[\w-]+`)*")
_WALL_CLOCK = re.compile(r" \(\d+:\d\d:\d\d\)$")
#: an anomaly's attribution line: a fault hit its processes, or none did; which one depends on the run's timing
_ATTRIBUTION = re.compile(r"^(\s*)(?:Fault: .*|No fault touched .*)$")


def normalised(line: str) -> str:
    """``line`` without what varies between seeds of one command (so a page may show seeds the test does not run)."""
    line = _ATTRIBUTION.sub(r"\1(attribution)", line.rstrip())
    return _WALL_CLOCK.sub("", _CODE_LIST.sub("`KINDS`", _WITHOUT_FAULT.sub("", line)))


def same_shape(page: Page, name: str, real: str, loose: bool = False) -> None:
    """Every line of the page's output ``name`` has the shape of a line of ``real`` (or its first words, if loose)."""
    lines = [normalised(line) for line in real.splitlines()]
    shapes, labels = {shape(line) for line in lines}, {label(line) for line in lines}
    for line in map(normalised, page.output(name)):
        if not line.strip() or line.strip() == "...":
            continue
        ok = shape(line) in shapes or (loose and label(line) in labels) or truncated_from(line, lines)
        assert ok, f"{page}: output {name!r} shows a line the command did not print:\n  {line}\nshaped: {shape(line)}\nthe real output:\n{real}"


def truncated_from(line: str, lines: list[str]) -> bool:
    """``line`` ends in ``...`` and a real line begins with the rest: pytest cuts its summary lines to the terminal's width,
    except where the environment says it runs on CI (``CI``, ``BUILD_NUMBER``), so a page's line may be cut where
    the real one is not, or the other way round."""
    if not line.endswith("..."):
        return False
    head = " ".join(line[:-3].split())
    return any(" ".join(real.split()).startswith(head) for real in lines)


def run_folders(store: Path) -> list[Path]:
    return sorted(p.parent for p in store.glob("*/*/test.json"))


def ops_of(run_dir: Path) -> dict[int, dict]:
    """The run's history: its ops by index (the header line has none)."""
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    return {op["index"]: op for op in map(json.loads, lines[1:]) if "index" in op}


def nodes_of(run_dir: Path) -> set[str]:
    return {op["node"] for op in ops_of(run_dir).values() if op.get("node")}
