"""Bad input is one family (``leasecheck.errors.BadInput``): every refusal of what a user gave, exit 3, in one line.

The front maps the family once (``ExitCodeGroup``), so a refusal a command does not word itself still exits 3 in one
line, never 4 with "the environment failed"; and a new refusal joins the family by being what it is (no exception class
of leasecheck derives from ``ValueError`` but through ``BadInput``), so no ``except`` clause has to learn its name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

from leasecheck.ci.spec import SpecError
from leasecheck.cli import ExitCodeGroup
from leasecheck.errors import BadInput
from leasecheck.hosts.address import BadAddress
from leasecheck.hosts.deployment import DeploymentError
from leasecheck.kit.scaffold import ScaffoldError
from leasecheck.lists import BadList
from leasecheck.nemesis.catalogue import UnknownFault
from leasecheck.run.options import BadOptions
from leasecheck.rundir.storedir import BadFaultsFile
from leasecheck.targets.durability import UnknownProfile
from leasecheck.targets.exec_target import BadCommand
from leasecheck.targets.queues.registry import QueueNotFound
from leasecheck.targets.registry import TargetNotFound

PACKAGE = REPO / "leasecheck"


@pytest.mark.parametrize("refusal", [BadOptions, DeploymentError, BadAddress, BadList, UnknownFault, UnknownProfile,
                                     ScaffoldError, SpecError, BadCommand, BadFaultsFile, TargetNotFound, QueueNotFound])
def test_every_refusal_of_the_users_input_is_bad_input(refusal: type[Exception]) -> None:
    assert issubclass(refusal, BadInput)


def test_no_exception_of_ours_is_a_value_error_but_through_bad_input() -> None:
    """A ValueError of ours that is not BadInput would reach the front as a crash (exit 4)."""
    stray = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name != "BadInput" and any(
                    isinstance(b, ast.Name) and b.id == "ValueError" for b in node.bases):
                stray.append(f"{path.relative_to(PACKAGE.parent)}: {node.name}")
    assert not stray, stray


def test_a_refusal_no_command_words_itself_still_exits_3_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    group = ExitCodeGroup(name="leasecheck")

    @group.command()
    def profile() -> None:
        raise UnknownProfile("unknown store config 'safe' (one of durable, default, fast)")

    with pytest.raises(SystemExit) as ended:
        group.main(["profile"])
    assert ended.value.code == 3
    assert capsys.readouterr().err.splitlines() == ["leasecheck: unknown store config 'safe' (one of durable, default, fast)"]


def test_a_queue_run_refuses_its_options_as_bad_input(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "leasecheck.queue_run", "rq", "--mode", "fenced", "--store",
                           str(tmp_path / "store")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and done.stderr.strip().splitlines() == [
        "python -m leasecheck.queue_run: rq hands its executions no attempt number: it has no fenced mode"], done.stderr
    assert not (tmp_path / "store").exists()
