"""``leasecheck new-target``: the files it writes fail their own test once per method still to write, then pass.

The test file is run as a user runs it, by pytest in a subprocess in the
folder the files were written to; the finished adapter is the SQLite
reference under a new name, so "pass" means every conformance scenario held.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from leasecheck.scaffold import DUTIES

CLI = [sys.executable, "-m", "leasecheck"]


def _new_target(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "new-target", *args, "--dir", str(folder)], capture_output=True, text=True, timeout=60)


def _pytest(folder: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_acme_lease.py"],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def _failed(output: str) -> set[str]:
    return set(re.findall(r"^FAILED test_acme_lease\.py::(\S+)", output, re.MULTILINE))


def test_the_new_files_fail_once_per_method_to_write_then_pass_when_written(tmp_path: Path) -> None:
    made = _new_target(tmp_path, "acme")
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "acme_lease.py").is_file() and (tmp_path / "test_acme_lease.py").is_file()

    code, out = _pytest(tmp_path)
    assert code == 1, out
    failed = _failed(out)
    assert {f"test_method_is_written[{m}]" for m in DUTIES} <= failed, out
    for method, duty in DUTIES.items():  # one clear message per method: what it must do
        assert f"AcmeLease.{method} is not written yet: {duty.replace(chr(34), chr(39))}" in out

    # all but renew written (the reference's), renew still as new-target wrote it
    adapter = tmp_path / "acme_lease.py"
    adapter.write_text(adapter.read_text().replace("class AcmeLease(Target):", "class _Unused(Target):") + '''

from leasecheck.targets.sqlite_lease import SqliteLease


class AcmeLease(SqliteLease):
    """The acme lease backend."""

    name = "acme"

    def renew(self, lease: Lease) -> Outcome:
        raise NotWritten("AcmeLease.renew is not written yet")
''')
    code, out = _pytest(tmp_path)
    failed = _failed(out)
    assert code == 1
    assert {f for f in failed if f.startswith("test_method_is_written")} == {"test_method_is_written[renew]"}, out
    assert "write renew first (see test_method_is_written)" in out

    adapter.write_text(adapter.read_text().replace('''    def renew(self, lease: Lease) -> Outcome:
        raise NotWritten("AcmeLease.renew is not written yet")
''', ""))
    code, out = _pytest(tmp_path)
    assert code == 0, out
    assert re.search(r"\b(\d+) passed\b", out) and not _failed(out)


def test_bad_names_and_existing_files_are_refused_with_exit_3(tmp_path: Path) -> None:
    bad = _new_target(tmp_path, "9lives")
    assert bad.returncode == 3 and "starts with a letter" in bad.stderr and "Traceback" not in bad.stderr
    assert _new_target(tmp_path, "acme").returncode == 0
    again = _new_target(tmp_path, "acme")
    assert again.returncode == 3 and "exists already" in again.stderr
    assert _new_target(tmp_path, "acme", "--force").returncode == 0
