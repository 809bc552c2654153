"""One run's folder: the name of every file a run leaves, declared here once, and how its JSON files are written.

Why one owner: the folder is the product's record and CI's interface (``leasecheck check``, the report, the
summary, the matrix and the pytest plugin all read it), and its names were spelled in twenty modules, some as
constants of their own (two modules each declared ``anomalies.jsonl``). Every module that reads or writes a run
folder names its files through :class:`RunFolder` (held by tests/local/test_architecture.py, which reads every
module's literals); a file added to the folder is added here. Modelled on etcd's
robustness report (``report.go``: each file's name kept with its writer and reader).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import msgspec


def write_json(path: Path, obj: Any) -> None:
    """A JSON file of the folder, indented, as every reader of it expects (a person reads them too)."""
    path.write_bytes(msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")


@dataclass(frozen=True)
class RunFolder:
    """The files of the run folder at ``path`` (docs/contracts: the history, results.json; the rest leasecheck's)."""

    path: Path

    #: the history (docs/contracts/history-format.md), written as the run goes
    HISTORY: ClassVar[str] = "history.jsonl"
    #: the verdict (docs/contracts/run-verdict.md); ``{"status": "error"}`` when the run died before judging
    RESULTS: ClassVar[str] = "results.json"
    #: the run's options, seed and run id, written when the folder is made
    TEST: ClassVar[str] = "test.json"
    #: the faults active now, for ``leasecheck heal`` after a killed harness
    FAULTS: ClassVar[str] = "faults.json"
    #: the self-contained report
    REPORT: ClassVar[str] = "report.html"
    #: every anomaly proven, one JSON line each, as the online checker proves it
    ANOMALIES: ClassVar[str] = "anomalies.jsonl"
    #: the harness' log
    LOG: ClassVar[str] = "leasecheck.log"
    #: what a matrix cell expected of the run, for ``leasecheck summary`` to compare with later
    EXPECTED: ClassVar[str] = "expected.json"

    @property
    def history(self) -> Path:
        return self.path / self.HISTORY

    @property
    def results(self) -> Path:
        return self.path / self.RESULTS

    @property
    def test(self) -> Path:
        return self.path / self.TEST

    @property
    def faults(self) -> Path:
        return self.path / self.FAULTS

    @property
    def report(self) -> Path:
        return self.path / self.REPORT

    @property
    def anomalies(self) -> Path:
        return self.path / self.ANOMALIES

    @property
    def log(self) -> Path:
        return self.path / self.LOG

    @property
    def expected(self) -> Path:
        return self.path / self.EXPECTED

    def write_results(self, obj: dict[str, Any]) -> None:
        write_json(self.results, obj)

    def write_test(self, obj: dict[str, Any]) -> None:
        write_json(self.test, obj)

    def read_results(self) -> Any:
        """results.json as JSON (what it holds is the caller's to judge); OSError or msgspec.DecodeError if unreadable."""
        return msgspec.json.decode(self.results.read_bytes())

    def read_test(self) -> Any:
        """test.json as JSON; OSError or msgspec.DecodeError if unreadable."""
        return msgspec.json.decode(self.test.read_bytes())


__all__ = ["RunFolder", "write_json"]
