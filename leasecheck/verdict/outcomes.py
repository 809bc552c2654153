"""One run's outcome, judged against what was expected of it: the row that ``matrix``, ``summary`` and JUnit share.

A nightly matrix is read long after it ran, on another machine, often from a
CI artifact: so a row is built from the run folder alone (``results.json``,
``test.json``, and the ``expected.json`` the matrix leaves there), and a
folder that cannot be read is a row saying so, never a traceback. Whether a
row *matches* is decided here, once, so the terminal table, the Markdown, the
HTML, the JSON, JUnit and the exit code can never disagree.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from leasecheck.exits import VERDICTS, Exit, verdict_word, worst
from leasecheck.histories import HistoryError
from leasecheck.histories.reader import file_cut
from leasecheck.histories.vocabulary import KINDS
from leasecheck.lists import BadList, distinct
from leasecheck.rundir.runfolder import RunFolder

#: the verdicts a run can expect (docs/contracts/verdict.md's three)
EXPECTABLE = VERDICTS

Outcome = Literal["pass", "failure", "error", "skipped"]


@dataclass(frozen=True)
class Expectation:
    """What a run should come to: a verdict and, for ``invalid``, kinds that must all be found.

    ``source`` says where it came from: ``"spec"`` (a matrix spec), ``"expected.json"``
    (left in the run folder by the matrix), or ``"default"`` (nothing said: a run is
    expected to be valid, exactly as its own exit code assumes).
    """

    verdict: str = "valid"
    kinds: tuple[str, ...] = ()
    source: str = "default"

    def describe(self) -> str:
        """``invalid (stale-commit, stale-effect)``; ``valid``."""
        return f"{self.verdict} ({', '.join(self.kinds)})" if self.kinds else self.verdict

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "kinds": list(self.kinds)}

    @classmethod
    def parse(cls, verdict: object, kinds: object, source: str) -> Expectation:
        """From a spec entry or expected.json; raises ValueError with a one-line reason."""
        if verdict not in EXPECTABLE:
            raise ValueError(f"expect = {verdict!r}: must be one of {', '.join(EXPECTABLE)}")
        if kinds is None:
            kinds = []
        if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
            raise ValueError(f"kinds = {kinds!r}: must be a list of anomaly kinds")
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"kinds: {', '.join(map(repr, unknown))} is no anomaly kind (they are: {', '.join(KINDS)})")
        if kinds and verdict != "invalid":
            raise ValueError(f"kinds are what an invalid run must find: they need expect = \"invalid\", not {verdict!r}")
        try:
            return cls(str(verdict), distinct(kinds, "kinds =", repr(kinds)), source)
        except BadList as e:
            raise ValueError(str(e)) from None


DEFAULT = Expectation()


@dataclass(frozen=True)
class Judgement:
    """A row against its expectation: does it match, how it shows in JUnit, what it does to the exit code."""

    match: bool
    outcome: Outcome
    #: 0 when it matches, else the exit code this row alone would give (see :func:`exit_code`)
    code: int
    message: str


def nemesis_label(nemesis: tuple[str, ...]) -> str:
    return ",".join(nemesis) or "none"


@dataclass
class Row:
    """One run (or one checked history, or a matrix cell that never produced a run) and its expectation.

    ``verdict`` is ``valid``, ``invalid`` or ``unknown`` for a run that was
    judged; ``error`` for one that could not be (its environment failed, it
    crashed, its results.json is unreadable); ``missing`` for a spec cell no
    run folder was found for; ``skipped`` for a matrix cell an interrupt kept
    from starting.
    """

    target: str
    nemesis: tuple[str, ...]
    seed: int | None
    verdict: str
    expected: Expectation = DEFAULT
    #: every kind counted in the run (``stats.anomalies``), in the vocabulary's order
    kinds: tuple[str, ...] = ()
    #: the anomalies as results.json lists them (at most 100 per node and kind)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    #: how many anomalies were counted (may be more than listed)
    counted: int = 0
    reason: str | None = None
    seconds: float | None = None
    run_dir: Path | None = None
    interrupted: str | None = None
    #: the command that replays the run, when known
    command: str | None = None
    #: the exit code of a row that could not be judged (``error``): 4, or 3 for options the run refused
    error_code: int = Exit.ENVIRONMENT
    #: a name of its own (``check``: the history's path); by default target / nemesis / seed
    name: str | None = None

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
        seed = "?" if self.seed is None else str(self.seed)
        return f"{self.target} / {nemesis_label(self.nemesis)} / seed {seed}"

    @property
    def cell_key(self) -> tuple[str, frozenset[str], int | None]:
        """What a spec cell is matched by: target, the set of faults, seed."""
        return self.target, frozenset(self.nemesis), self.seed

    @property
    def sort_key(self) -> tuple[str, str, int, str]:
        """The matrix's canonical order (target, sorted fault set, seed), then the folder."""
        return self.target, ",".join(sorted(self.nemesis)), self.seed if self.seed is not None else -1, str(self.run_dir or "")

    @property
    def report(self) -> Path | None:
        """Where the run's report is (or will be, once ``leasecheck report`` rebuilds it)."""
        return RunFolder(self.run_dir).report if self.run_dir is not None else None

    @property
    def first_anomaly(self) -> dict[str, Any] | None:
        """The listed anomaly whose cited ops were all invoked earliest (smallest last op index): the first proven."""
        cited = [a for a in self.anomalies if isinstance(a, dict) and a.get("ops")]
        if not cited:
            return None
        first = min(cited, key=lambda a: (max(a["ops"]), a["ops"]))
        return {"kind": first.get("kind"), "node": first.get("node"), "ops": list(first["ops"])}

    def found(self) -> str:
        """``invalid: stale-commit, stale-effect (12 anomalies)``, ``unknown: <reason>``, ``valid``."""
        if self.verdict == "invalid":
            n = self.counted or len(self.anomalies)
            return f"invalid: {', '.join(self.kinds) or 'anomalies'} ({n:,} anomal{'y' if n == 1 else 'ies'})"
        if self.verdict in ("unknown", "error") and self.reason:
            return f"{self.verdict}: {self.reason}"
        if self.verdict == "missing":
            return "missing: no run folder was found for this cell"
        return self.verdict

    def judge(self) -> Judgement:
        """Does the row match its expectation? A mismatch is a JUnit failure (a wrong verdict) or error (none)."""
        exp = self.expected
        said = "" if exp.source == "default" else f"expected {exp.describe()}, got "
        if self.verdict == "skipped":
            return Judgement(False, "skipped", Exit.UNKNOWN, f"not run: {self.reason or 'the matrix was interrupted'}")
        if self.verdict in ("error", "missing"):
            return Judgement(False, "error", self.error_code, said + self.found())
        if self.interrupted and self.verdict != "invalid":  # an interrupted run proves nothing but anomalies
            expected = f" (expected {exp.describe()})" if exp.source != "default" else ""
            return Judgement(False, "error", Exit.UNKNOWN,
                             f"interrupted by {self.interrupted}: {self.verdict} so far, which proves nothing{expected}")
        if self.verdict == exp.verdict:
            missing = [k for k in exp.kinds if k not in self.kinds]
            if not missing:
                return Judgement(True, "pass", Exit.VALID, f"{self.found()}, as expected" if exp.source != "default" else self.found())
            return Judgement(False, "failure", Exit.INVALID, f"{said}{self.found()}; never found: {', '.join(missing)}")
        if self.verdict == "unknown":
            return Judgement(False, "error", Exit.UNKNOWN, said + self.found())
        if self.verdict == "valid":  # a broken variant expected invalid that comes out valid: its bug went uncaught
            return Judgement(False, "failure", Exit.INVALID, f"{said}valid: the expected anomalies were not found")
        return Judgement(False, "failure", Exit.INVALID, said + self.found())

    def to_json(self) -> dict[str, Any]:
        j = self.judge()
        return {
            "target": self.target, "nemesis": list(self.nemesis), "seed": self.seed, "verdict": self.verdict,
            "expected": {**self.expected.to_json(), "source": self.expected.source}, "match": j.match,
            "outcome": j.outcome, "message": j.message, "kinds": list(self.kinds), "anomalies_counted": self.counted,
            "first_anomaly": self.first_anomaly, "reason": self.reason, "seconds": self.seconds,
            "interrupted": self.interrupted, "run_dir": str(self.run_dir) if self.run_dir is not None else None,
            "report": str(self.report) if self.report is not None else None, "command": self.command,
            **({"name": self.name} if self.name is not None else {}),
        }

    @classmethod
    def from_verdict(cls, obj: dict[str, Any], *, target: str, nemesis: tuple[str, ...], seed: int | None,
                     expected: Expectation = DEFAULT, run_dir: Path | None = None, name: str | None = None) -> Row:
        """From a verdict JSON object (``check --json``'s, or results.json, which adds the run's fields)."""
        anomalies = [a for a in obj.get("anomalies") or [] if isinstance(a, dict)]
        counts = _dict(_dict(obj.get("stats")).get("anomalies"))
        listed = {str(a.get("kind")) for a in anomalies}
        kinds: list[str] = [k for k in KINDS if counts.get(k) or k in listed]
        kinds += sorted(str(k) for k in (set(counts) | listed) - set(KINDS) if k)
        counted = sum(int(v) for v in counts.values() if isinstance(v, int)) or len(anomalies)
        seconds = _dict(obj.get("run")).get("seconds")
        reason = obj.get("reason")
        return cls(
            target=target, nemesis=nemesis, seed=seed, verdict=verdict_word(obj.get("valid")), expected=expected,
            kinds=tuple(kinds), anomalies=anomalies, counted=counted, reason=reason if isinstance(reason, str) else None,
            seconds=float(seconds) if isinstance(seconds, int | float) else None, run_dir=run_dir,
            interrupted=obj.get("interrupted") if isinstance(obj.get("interrupted"), str) else None, name=name,
        )


def _dict(obj: object) -> dict[str, Any]:
    """``obj`` if it is a JSON object, else an empty one: a hand-edited or truncated file must not raise."""
    return obj if isinstance(obj, dict) else {}


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def read_expected(run_dir: Path) -> Expectation | None:
    """The expectation a matrix left in ``run_dir``, or None (none there, or unreadable: then judged as default)."""
    try:
        obj = _read_json(RunFolder(run_dir).expected)
        return Expectation.parse(obj.get("verdict"), obj.get("kinds"), RunFolder.EXPECTED)
    except (OSError, ValueError, AttributeError):
        return None


def write_expected(run_dir: Path, expected: Expectation, **about: Any) -> None:
    """Leave ``expected`` in the run folder so ``summary`` can judge the run later without the spec."""
    RunFolder(run_dir).expected.write_text(json.dumps({**expected.to_json(), **about}, indent=2) + "\n", encoding="utf-8")


def replay_args(argv: object) -> list[str] | None:
    """test.json's ``argv`` without its program and without what only says where the verdict goes (``--json``,
    ``--junit FILE``); None when it is not a command line."""
    if not isinstance(argv, list) or len(argv) < 2 or not all(isinstance(a, str) for a in argv):
        return None
    args: list[str] = []
    skip = False
    for a in argv[1:]:
        if skip:
            skip = False
        elif a == "--junit":  # where this run's report went is no part of replaying it
            skip = True
        elif a != "--json" and not a.startswith("--junit="):
            args.append(a)
    return args


def replay_command(argv: object) -> str | None:
    """The command line that replays a run, from test.json's ``argv`` (argv[0] becomes ``leasecheck``; ``--json`` and ``--junit FILE`` go)."""
    args = replay_args(argv)
    return None if args is None else shlex.join(["leasecheck", *args])


def read_run(run_dir: Path, expected: Expectation | None = None) -> Row:
    """The row of one run folder; never raises on a bad folder: an unreadable results.json is an ``error`` row.

    ``expected`` wins over the folder's expected.json (``summary --spec``);
    target, nemesis and seed come from results.json, else from test.json (a run
    that failed before its verdict wrote only its reason).
    """
    test: dict[str, Any] = {}
    try:
        test = _dict(_read_json(RunFolder(run_dir).test))
    except (OSError, ValueError):
        pass
    options = _dict(test.get("options"))
    exp = expected or read_expected(run_dir) or DEFAULT
    try:
        results = _read_json(RunFolder(run_dir).results)
        if not isinstance(results, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        results = {"status": "error", "reason": f"{RunFolder.RESULTS} is unreadable: {_one_line(e)}"}
    target = results.get("target", options.get("target"))
    nemesis = results.get("nemesis", options.get("nemesis"))
    seed = results.get("seed", test.get("seed"))
    name = str(target) if target is not None else "?"
    faults = tuple(str(n) for n in nemesis) if isinstance(nemesis, list) else ()
    number = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
    recorded = test.get("replay")  # the pytest plugin's own line (its cd and PYTHONPATH), as the report shows it
    command = recorded if isinstance(recorded, str) and recorded.strip() else replay_command(test.get("argv"))
    if results.get("status") == "error" or "valid" not in results:
        reason = results.get("reason") or "results.json holds no verdict"
        return Row(name, faults, number, "error", expected=exp, reason=_one_line(reason), run_dir=run_dir, command=command)
    if results.get("valid") is True:  # a history cut since its run was judged is never valid either
        try:
            cut = file_cut(RunFolder(run_dir).history)
        except (OSError, HistoryError):
            cut = None  # no history here (a results.json alone): the verdict stands as written
        if cut is not None:
            results = {**results, "valid": "unknown", "reason": cut}
    row = Row.from_verdict(results, target=name, nemesis=faults, seed=number, expected=exp, run_dir=run_dir)
    row.command = command
    return row


def exit_code(rows: list[Row]) -> int:
    """0 iff every row matched its expectation; else the worst non-matching row's code (4, 3, 1, then 2: :data:`~leasecheck.exits.SEVERITY`)."""
    return worst(j.code for j in (r.judge() for r in rows) if not j.match)


def tally(rows: list[Row]) -> str:
    """``12 runs: 10 as expected, 1 mismatched, 1 error``."""
    outcomes = [r.judge() for r in rows]
    n = len(rows)
    parts = [f"{sum(j.match for j in outcomes)} as expected"]
    for outcome, word in (("failure", "mismatched"), ("error", "error"), ("skipped", "not run")):
        k = sum(1 for j in outcomes if not j.match and j.outcome == outcome)
        if k:
            parts.append(f"{k} {word}{'s' if outcome == 'error' and k > 1 else ''}")
    return f"{n} run{'s' if n != 1 else ''}: " + ", ".join(parts)
