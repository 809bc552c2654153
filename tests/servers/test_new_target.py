"""``leasecheck new-target``: the files it writes fail their own test once per method still to write, then pass.

The test file is run as a user runs it, by pytest in a subprocess in the
folder the files were written to; the finished adapter is a reference backend
(SQLite, Postgres, Redis) under a new name, so "pass" means every conformance
scenario held, against a store the generated test started itself (the
adapter's ``store``) or the one LEASECHECK_URL names. A method that raises
fails its "is written" test with that exception. ``new-target --lock sherlock``
is held through a newcomer's whole journey: the adapter filled in, its test
green, and ``leasecheck audit sherlock_lock:SherlockLock`` to a verdict.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from inner_pytest import failed_tests, passed_count

from leasecheck.kit.scaffold import DUTIES, LOCK_DUTIES, LOCK_SCENARIOS
from leasecheck.servers.base import LocalServer

CLI = [sys.executable, "-m", "leasecheck"]


def _new_target(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "new-target", *args, "--dir", str(folder)], capture_output=True, text=True, timeout=60)


def _pytest(folder: Path, test: str = "test_acme_lease.py", url: str | None = None) -> tuple[int, str]:
    """The generated test, as its user runs it; LEASECHECK_URL only when ``url`` is given."""
    env = {k: v for k, v in os.environ.items() if k != "LEASECHECK_URL"}
    if url is not None:
        env["LEASECHECK_URL"] = url
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--basetemp", str(folder / "basetemp"), test],
                          cwd=folder, capture_output=True, text=True, timeout=300, env=env)
    return done.returncode, done.stdout + done.stderr


def _on_reference(adapter: Path, base: str, module: str, extra: str = "") -> None:
    """Make the scaffold's AcmeLease a reference backend: its base class, its own name and store lines kept."""
    text = re.sub(r"\n    def (?!__init__)\w+\(self.*?\n        raise NotWritten\(.*?\)\n", "\n", adapter.read_text(), flags=re.DOTALL)
    text = text.replace("class AcmeLease(Target):", f"from leasecheck.targets.{module} import {base}\n\n\nclass AcmeLease({base}):")
    adapter.write_text(text.rstrip("\n") + "\n" + extra)


def test_the_new_files_fail_once_per_method_to_write_then_pass_when_written(tmp_path: Path) -> None:
    made = _new_target(tmp_path, "acme", "--store-kind", "sqlite")
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "acme_lease.py").is_file() and (tmp_path / "test_acme_lease.py").is_file()

    code, out = _pytest(tmp_path)
    assert code == 1, out
    failed = failed_tests(out)
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
    failed = failed_tests(out)
    assert code == 1
    assert {f for f in failed if f.startswith("test_method_is_written")} == {"test_method_is_written[renew]"}, out
    assert "write renew first (see test_method_is_written)" in out

    adapter.write_text(adapter.read_text().replace('''    def renew(self, lease: Lease) -> Outcome:
        raise NotWritten("AcmeLease.renew is not written yet")
''', ""))
    code, out = _pytest(tmp_path)
    assert code == 0, out
    assert re.search(r"\b(\d+) passed\b", out) and not failed_tests(out)


def test_bad_names_and_existing_files_are_refused_with_exit_3(tmp_path: Path) -> None:
    bad = _new_target(tmp_path, "9lives")
    assert bad.returncode == 3 and "starts with a letter" in bad.stderr and "Traceback" not in bad.stderr
    assert _new_target(tmp_path, "acme").returncode == 0
    again = _new_target(tmp_path, "acme")
    assert again.returncode == 3 and "exists already" in again.stderr
    assert _new_target(tmp_path, "acme", "--force").returncode == 0


@pytest.mark.parametrize(("store", "base", "module"), [
    ("postgres", "PostgresLease", "postgres_lease"),
    ("redis", "RedisLease", "redis_lease"),
])
def test_a_server_store_adapters_test_starts_its_server_and_a_raising_method_fails_with_its_exception(
        tmp_path: Path, store: str, base: str, module: str) -> None:
    """Seen on main: the test handed a Postgres adapter a SQLite path, and passed "is written" though setup() raised."""
    made = _new_target(tmp_path, "acme", "--store-kind", store)
    assert made.returncode == 0, made.stderr
    adapter = tmp_path / "acme_lease.py"
    assert f'store = "{store}"' in adapter.read_text()
    _on_reference(adapter, base, module)
    code, out = _pytest(tmp_path)
    assert code == 0 and not failed_tests(out), out
    assert passed_count(out) == len(DUTIES) + 12, out  # 9 methods (read_resource too), 12 scenarios (resource, zombie-after-lapse too)
    assert list((tmp_path / "basetemp").glob(f"leasecheck-stores*/{store}-server")), "no server of the store was started"
    assert re.search(rf"leasecheck: adapter tests used a {store} server of their own \({store}\w*://[^)]*127\.0\.0\.1:\d+", out), out

    _on_reference(adapter, base, module, extra='''
    def setup(self) -> None:
        raise RuntimeError("acme: the schema migration failed")
''')
    code, out = _pytest(tmp_path)
    assert code == 1, out
    assert "test_method_is_written[setup]" in failed_tests(out), out
    assert "RuntimeError: acme: the schema migration failed" in out
    assert f"{adapter.name}:" in out  # the traceback reaches the adapter's own line
    assert "fix setup first (see test_method_is_written)" in out
    # a method tried on a store setup never made ready is not blamed for what it raised then
    assert not re.search(r"could not be tried: setup raised (?!RuntimeError first)", out)


def test_the_adapters_store_decides_and_a_wrong_one_fails_is_written_with_the_clients_error(tmp_path: Path) -> None:
    """The issue's case: a Postgres adapter whose store says sqlite gets a file path, and setup() says so."""
    assert _new_target(tmp_path, "acme", "--store-kind", "sqlite").returncode == 0
    adapter = tmp_path / "acme_lease.py"
    _on_reference(adapter, "PostgresLease", "postgres_lease", extra='''
    store = "sqlite"
''')
    code, out = _pytest(tmp_path)
    assert code == 1
    assert "test_method_is_written[setup]" in failed_tests(out), out
    assert "psycopg" in out and "lease.sqlite3" in out, out


def test_without_a_store_the_test_asks_for_one_and_leasecheck_url_is_used_when_set(
        tmp_path: Path, postgres_server: LocalServer) -> None:
    made = _new_target(tmp_path, "acme")
    assert made.returncode == 0, made.stderr
    assert "LEASECHECK_URL=YOUR_STORE python -m pytest" in made.stdout
    adapter = tmp_path / "acme_lease.py"
    assert "store = None" in adapter.read_text()
    _on_reference(adapter, "PostgresLease", "postgres_lease", extra='''
    store = None
''')
    code, out = _pytest(tmp_path)
    assert code == 1
    assert "no store for acme_lease:AcmeLease: AcmeLease has store = None" in out and "LEASECHECK_URL" in out, out

    code, out = _pytest(tmp_path, url=postgres_server.url)
    assert code == 0 and not failed_tests(out), out
    assert f"leasecheck: adapter tests used LEASECHECK_URL ({postgres_server.url}; no server started)" in out  # also with -q
    assert not list((tmp_path / "basetemp").glob("leasecheck-stores*/*-server"))


def test_a_lock_adapter_is_scaffolded_with_one_failure_per_library_call_to_write(tmp_path: Path) -> None:
    """``new-target --lock sherlock``: each library call to write fails its test with what it must do. The rest of the
    auditor's journey (filled in, tested, audited by module:Class) runs from its page: tests/runs/test_journeys.py."""
    made = _new_target(tmp_path, "--lock", "sherlock")
    assert made.returncode == 0, made.stderr
    assert "leasecheck audit sherlock_lock:SherlockLock" in made.stdout
    test = "test_sherlock_lock.py"
    assert (tmp_path / "sherlock_lock.py").is_file() and (tmp_path / test).is_file()
    code, out = _pytest(tmp_path, test)
    assert code == 1, out
    assert failed_tests(out, test) == {f"test_method_is_written[{m}]" for m in LOCK_DUTIES} | {
        f"test_scenario[{s}]" for s in LOCK_SCENARIOS}, out
    for method, duty in LOCK_DUTIES.items():
        assert f"SherlockLock.{method} is not written yet: {duty}" in out
