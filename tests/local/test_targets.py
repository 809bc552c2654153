"""The backend registry: names, module:Class plug-ins, and ``leasecheck targets``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from leasecheck.cli import main
from leasecheck.histories.vocabulary import KINDS
from leasecheck.nemesis.catalogue import FAULTS, Need
from leasecheck.run.options import RunOptions, check_store, validate
from leasecheck.targets.audits import AuditPlan
from leasecheck.targets.base import WORKLOAD_CONDITIONS, Lease, OffsetClock, Target, TargetConfig
from leasecheck.targets.registry import TargetNotFound, TargetSpec, available, load

REFERENCES = {"sqlite", "postgres", "redis", "redis-token"}
#: the reference backends without a fencing token (epoch null, an opaque token per lease)
UNFENCED = {"redis-token"}
BROKEN = {
    "sqlite-ttl-only", "sqlite-non-atomic-claim", "postgres-fence-in-memory",
    "postgres-client-clock", "redis-queue-as-authority", "redis-no-increment",
    "sqlite-swallowed-heartbeat", "sqlite-release-any-epoch", "sqlite-fence-at-commit", "sqlite-cached-read",
    "postgres-grace-after-failover", "sqlite-renew-worker-clock", "sqlite-check-then-write-effect",
    "sqlite-fence-follows-writes", "sqlite-write-behind-effects", "sqlite-stamped-by-node", "sqlite-live-lease-guard",
}
#: adapters of third-party lock libraries, each with its published audit (targets/locks, AUDITS.md)
AUDITED = {
    "redis-py-lock", "python-redis-lock", "portalocker-redis", "portalocker-redis-fenced", "kazoo-lock",
    "kazoo-lock-zxid", "etcd3-lock", "etcd3-lock-revision", "sqlalchemy-dlock", "filelock", "filelock-soft",
}
#: the audited adapters that use a fencing token (the advice a finding ends with)
FENCED_AUDITED = {"portalocker-redis-fenced", "kazoo-lock-zxid", "etcd3-lock-revision"}


def test_every_registered_backend_loads_and_declares_itself() -> None:
    names = set(available())
    assert names >= REFERENCES | BROKEN | AUDITED
    for name in names:
        cls = load(name)
        stores = {"sqlite", "postgres", "redis", "zookeeper", "etcd", "files"} if name in AUDITED else {"sqlite", "postgres", "redis"}
        assert issubclass(cls, Target) and cls.name == name and cls.store in stores, name
        assert cls.fenced is (name not in UNFENCED if name not in AUDITED else name in FENCED_AUDITED), name
        assert cls.effect_fence in ("lease", "token"), name
        assert isinstance(getattr(cls, "audit", None), AuditPlan) is (name in AUDITED), name
        if name in BROKEN:
            assert cls.bug and cls.expected and (cls.exposed_by or cls.exposed_by_workload), name
            assert set(cls.expected) <= set(KINDS), name
            assert cls.summary().startswith(("BROKEN", "Postgres lease")), name
        else:
            assert not cls.bug and not cls.expected


def test_leasecheck_targets_lists_references_and_variants() -> None:
    r = CliRunner().invoke(main, ["targets", "--json"], catch_exceptions=False)
    assert r.exit_code == 0
    rows = {row["name"]: row for row in map(json.loads, r.stdout.splitlines())}
    assert set(rows) >= REFERENCES | BROKEN
    assert rows["sqlite-ttl-only"]["expected"] == ["stale-commit", "stale-effect"]
    assert rows["sqlite-ttl-only"]["exposed_by"] == ["pause"]  # partition is refused on SQLite: never listed
    assert rows["postgres-client-clock"]["exposed_by"] == ["clock-bump"]  # a fault; "clock-skew" is only an event name
    assert rows["redis-queue-as-authority"]["exposed_by_workload"] == ["duplicate-delivery"]
    for row in rows.values():
        assert set(row["exposed_by"]) <= set(FAULTS), row["name"]
    human = CliRunner().invoke(main, ["targets"], catch_exceptions=False)
    assert human.exit_code == 0 and "sqlite-non-atomic-claim" in human.stdout


def test_third_party_backend_by_module_and_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "acme_lock.py").write_text(textwrap.dedent(
        '''
        from leasecheck.targets.sqlite_lease import SqliteLease

        class AcmeLock(SqliteLease):
            """Acme's lock, adapted to leasecheck."""
            name = "acme"
        '''
    ))
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = load("acme_lock:AcmeLock")
    assert cls.summary() == "Acme's lock, adapted to leasecheck."
    t = cls(TargetConfig(url=str(tmp_path / "acme.db"), ttl_ms=1000))
    t.setup()
    t.add_node("n")
    assert isinstance(t.try_claim("n", "w"), Lease)
    t.close()


def test_target_spec_travels_to_another_process_and_builds_a_client(tmp_path: Path) -> None:
    """Workers are spawned: the spec pickles (a name, not a class) and each process builds its own client."""
    spec = TargetSpec("sqlite", TargetConfig(url=str(tmp_path / "spec.db"), ttl_ms=1000))
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec
    t = again.make(clock=OffsetClock(5.0))
    try:
        assert t.config.clock == OffsetClock(5.0) and t.config.url == spec.config.url
        t.setup()
        t.add_node("n")
        assert isinstance(t.try_claim("n", "w"), Lease)
    finally:
        t.close()


@pytest.mark.parametrize(
    "spec, words",
    [
        ("nope", "unknown target 'nope'"),
        ("no_such_module:X", "cannot import no_such_module"),
        ("leasecheck.targets.sqlite_lease:Nope", "has no Nope"),
        ("leasecheck.targets.base:Lease", "not a targets.Target subclass"),
        ("leasecheck.targets.sqlite_lease:", "expected module:Class"),
        ("leasecheck.targets.base:Target", "Target is abstract"),
    ],
)
def test_bad_target_names_say_why(spec: str, words: str) -> None:
    with pytest.raises(TargetNotFound) as e:
        load(spec)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_every_exposed_by_is_a_fault_that_the_variants_store_accepts(name: str) -> None:
    """``exposed_by`` names faults of ``leasecheck nemeses``, each one ``run --nemesis`` takes for this backend;
    conditions of the workload (duplicate delivery) live in ``exposed_by_workload``."""
    listed = CliRunner().invoke(main, ["nemeses"], catch_exceptions=False).stdout.split()
    cls = load(name)
    assert cls.exposed_by or cls.exposed_by_workload
    for fault in cls.exposed_by:
        assert fault in FAULTS and fault in listed, f"{name}: {fault!r} is no fault of the catalogue"
        env = "docker" if Need.DOCKER in FAULTS[fault].needs else "local"
        opts = RunOptions(target=name, nemesis=(fault,), env=env)
        check_store(opts, validate(opts), cls.store)  # raises BadOptions if refused
    assert set(cls.exposed_by_workload) <= set(WORKLOAD_CONDITIONS), name


ADAPTER = textwrap.dedent(
    '''
    from leasecheck.targets.sqlite_lease import SqliteLease

    class AcmeLock(SqliteLease):
        """Acme's lock, adapted to leasecheck."""
        name = "acme"

    class AcmeOwnStore(SqliteLease):
        """A backend that brings its own store (docs/backends.md's template)."""
        name, store = "acme-own", None
    '''
)


def test_module_class_is_imported_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on main: ``--target acme_adapter:AcmeLock`` from the adapter's folder failed without PYTHONPATH=."""
    (tmp_path / "acme_cwd_adapter.py").write_text(ADAPTER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load("acme_cwd_adapter:AcmeLock").summary() == "Acme's lock, adapted to leasecheck."


def test_an_adapter_in_the_current_directory_runs_end_to_end(tmp_path: Path) -> None:
    """The spawned workers import it too (a subprocess, as a user runs it, with no PYTHONPATH)."""
    (tmp_path / "acme_adapter.py").write_text(ADAPTER)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [sys.executable, "-m", "leasecheck", "run", "--target", "acme_adapter:AcmeLock", "--time-limit", "0.5",
         "--nemesis", "none", "--concurrency", "2", "--ttl", "100", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode in (0, 2), r.stderr
    assert json.loads(r.stdout)["stats"]["ops"] > 0 and "Traceback" not in r.stderr


def test_a_backend_with_its_own_store_and_no_url_is_told_to_pass_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen on main: ``store = None`` demanded --url without saying so; now exit 3 naming --url."""
    (tmp_path / "acme_own_adapter.py").write_text(ADAPTER)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["run", "--target", "acme_own_adapter:AcmeOwnStore", "--time-limit", "1", "--store", "st"])
    assert r.exit_code == 3 and "--url" in r.stderr and "store = None" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert not (tmp_path / "st").exists()  # refused before anything was made
