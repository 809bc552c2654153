"""``leasecheck audit``: the list of published plans, one audit run end to end, and every bad option exit 3.

Each library's published verdicts are asserted by its own test module
(``test_audit_*.py``); this one holds the command to its contract.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from paths import REPO

from leasecheck.auditing.audit import audits, select
from leasecheck.targets.audits import AuditPlan

CLI = [sys.executable, "-m", "leasecheck"]

#: the libraries AUDITS.md publishes, by their PyPI names
LIBRARIES = {"redis", "python-redis-lock", "portalocker", "kazoo", "etcd3", "sqlalchemy-dlock", "filelock",
             # job queues and durable execution (leasecheck audit queues)
             "rq", "huey", "celery", "dramatiq", "arq", "saq", "procrastinate", "pgqueuer", "dbos", "chancy",
             "temporalio"}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_every_audited_library_has_a_plan_with_seeds_faults_and_advice() -> None:
    found, broken = audits()
    assert not broken, broken
    assert {a.plan.library for a in found} == LIBRARIES
    for a in found:
        plan = a.plan
        assert isinstance(plan, AuditPlan) and plan.seeds and plan.faults and plan.fix, a.target
        assert a.version != "not installed", a.target
        for fault in plan.faults:
            assert fault.expected in ("valid", "invalid", "unknown"), a.target
            assert bool(fault.kinds) is (fault.expected == "invalid"), (a.target, fault)
            assert bool(fault.reason) is (fault.expected == "unknown"), (a.target, fault)
    assert len({(a.plan.library, a.plan.mode) for a in found}) == len(found)  # a mode names one adapter


def test_list_shows_each_library_mode_and_published_verdict() -> None:
    done = _cli("audit", "--list")
    assert done.returncode == 0, done.stderr
    for a in audits()[0]:
        assert a.target in done.stdout and a.plan.mode in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (("audit",), "name a library to audit, or --list"),
    (("audit", "no-such-lib"), "no audit of 'no-such-lib'"),
    (("audit", "filelock", "--mode", "telepathy"), "has no mode telepathy"),
    (("audit", "filelock", "--fault", "clock-bump"), "not in the plan of filelock"),
    (("audit", "filelock", "--seeds", "one,two"), "comma-separated integers"),
    (("audit", "filelock", "--time-limit", "0"), "--time-limit"),
    (("audit", "no_such_module:Lock"), "cannot import no_such_module"),
    (("audit", "leasecheck.targets.sqlite_lease:SqliteLease"), "has no audit plan: give the class one"),
    (("audit", "leasecheck.targets.locks.redis_py:RedisPyLock", "--mode", "telepathy"), "has no mode telepathy"),
])
def test_bad_audit_options_exit_3_in_one_line(args: tuple[str, ...], message: str) -> None:
    done = _cli(*args)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_adapter_of_ones_own_is_audited_by_module_class_with_the_plan_its_class_carries() -> None:
    """Seen on main: `audit sherlock_lease:SherlockRedisLock` was refused, "no audit of" (exit 3)."""
    spec = "leasecheck.targets.locks.redis_py:RedisPyLock"  # by its class, not its registered name
    (audited,) = select(spec)
    assert audited.target == spec and audited.plan.library == "redis"
    assert select(spec, (audited.plan.mode,)) == [audited]


def test_one_audit_run_end_to_end_reports_verdict_proof_and_whether_it_is_as_published(tmp_path: Path) -> None:
    """The cheapest published finding (filelock's documented use), through the command a reader of AUDITS.md runs."""
    audited = select("filelock", ("documented",))[0]
    fault = next(f for f in audited.plan.faults if f.expected == "invalid") if any(
        f.expected == "invalid" for f in audited.plan.faults) else audited.plan.faults[0]
    seed = audited.plan.seeds[0]
    done = _cli("audit", "filelock", "--mode", "documented", "--fault", fault.key, "--seeds", str(seed),
                "--store", str(tmp_path / "store"), "--json", "--markdown", "--as-published", timeout=300)
    assert done.returncode == 0, done.stderr  # as published
    row = json.loads(done.stdout.splitlines()[0])
    assert row["matches"] is True and row["verdict"] == fault.expected and row["seed"] == seed
    assert row["command"] == f"leasecheck audit filelock --mode documented --fault {fault.key} --seeds {seed}"
    assert Path(row["run_dir"], "history.jsonl").is_file()
    if fault.expected == "invalid":
        assert row["proof"]["ops"] and row["first_anomaly_s"] > 0 and set(row["kinds"]) <= set(fault.kinds)
    assert "| filelock |" in done.stderr  # the markdown table goes to stderr beside --json


def _pins() -> dict[str, str]:
    """Every ``name==version`` requirement of pyproject.toml's extras, by its PyPI name (lower case, extras dropped)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins: dict[str, str] = {}
    for requirements in extras.values():
        for req in requirements:
            name, sep, version = req.partition("==")
            if sep:
                pins[name.split("[")[0].strip().lower()] = version.strip()
    return pins


def test_every_audited_library_is_pinned_exactly_to_the_version_audits_md_publishes() -> None:
    """Found when redis-py 8.2.0 and filelock 4.3.2 came out: a fresh clone installed them, and the audits' published
    versions no longer matched what ran. An audit is a verdict on one version: the extras pin it exactly, so a release
    on PyPI changes nothing a fresh install audits, and AUDITS.md names the version pinned."""
    text = (REPO / "AUDITS.md").read_text()
    pins = _pins()
    found, _ = audits()
    for library in sorted({a.plan.library for a in found}):
        assert library in pins, f"pyproject.toml's extras do not pin {library} exactly (name==version)"
        assert re.search(rf"\b{re.escape(pins[library])}\b", text), f"AUDITS.md does not name {library} {pins[library]}"
    ci = (REPO / ".ci" / "run").read_text()
    assert f"arq=={pins['arq']}" in ci  # installed apart (--no-deps), at the same pin


def test_audits_md_has_a_section_per_library_with_its_installed_version_and_a_command_per_finding() -> None:
    text = (REPO / "AUDITS.md").read_text()
    found, _ = audits()
    for a in found:
        assert f"{a.version}" in text, f"AUDITS.md does not name {a.plan.library} {a.version} (the installed version)"
        assert f"| {a.plan.mode} |" in text, f"AUDITS.md's table has no row for {a.target} ({a.plan.mode})"
        for fault in a.plan.faults:
            if fault.expected == "invalid":  # a finding: reproducible by one command
                assert f"leasecheck audit {a.plan.library} --mode {a.plan.mode} --fault {fault.key}" in text or \
                    f"leasecheck audit {a.plan.library} --fault {fault.key}" in text, (a.target, fault.key)


def test_listing_the_audits_loads_no_library_that_breaks_another() -> None:
    """Found by a helper: every etcd3 audit failed from the command line (``Descriptors cannot be created directly``).

    Selecting an audit listed every queue's too, which imported temporalio, whose protobuf runtime python-etcd3's
    generated modules cannot load in; the queue registry now finds a library without importing it.
    """
    probe = ("import sys; from leasecheck.auditing.audit import select; select('etcd3');"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('temporalio', 'google')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def test_an_adapter_written_before_the_rename_still_imports_with_a_warning() -> None:
    """``new-target --lock`` once wrote ``from leasecheck.targets.thirdparty.audit import AuditPlan`` (and lockbase,
    redis_records): the old names are the new modules themselves, in a fresh interpreter, and say where they went."""
    probe = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
             "try:\n    import leasecheck.targets.thirdparty\nexcept DeprecationWarning as w:\n    print('warned:', w)\n"
             "warnings.simplefilter('ignore')\n"
             "from leasecheck.targets.thirdparty.audit import AuditPlan, FaultAudit\n"
             "from leasecheck.targets.thirdparty.lockbase import LockLease\n"
             "from leasecheck.targets.thirdparty.redis_records import RedisRecords\n"
             "from leasecheck.targets.thirdparty.files import FileLockLease\n"
             "import leasecheck.targets.audits as a, leasecheck.targets.locks.lockbase as l\n"
             "import leasecheck.targets.locks.redis_records as r, leasecheck.targets.locks.files as f\n"
             "print(AuditPlan is a.AuditPlan and FaultAudit is a.FaultAudit and LockLease is l.LockLease\n"
             "      and RedisRecords is r.RedisRecords and FileLockLease is f.FileLockLease)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=REPO).stdout.splitlines()
    assert out[0].startswith("warned: leasecheck.targets.thirdparty is now leasecheck.targets.locks") and out[1] == "True"
