"""The backend registry: names, module:Class plug-ins, and ``leasecheck targets``."""

from __future__ import annotations

import json
import pickle
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from leasecheck.cli import main
from leasecheck.histories.vocabulary import KINDS
from leasecheck.targets.base import Lease, OffsetClock, Target, TargetConfig
from leasecheck.targets.registry import TargetNotFound, TargetSpec, available, load

REFERENCES = {"sqlite", "postgres", "redis"}
BROKEN = {
    "sqlite-ttl-only", "sqlite-non-atomic-claim", "postgres-fence-in-memory",
    "postgres-client-clock", "redis-queue-as-authority", "redis-no-increment",
}


def test_every_registered_backend_loads_and_declares_itself() -> None:
    names = set(available())
    assert names >= REFERENCES | BROKEN
    for name in names:
        cls = load(name)
        assert issubclass(cls, Target) and cls.name == name and cls.store in {"sqlite", "postgres", "redis"}
        assert cls.fenced is True
        if name in BROKEN:
            assert cls.bug and cls.expected and cls.exposed_by, name
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
    ],
)
def test_bad_target_names_say_why(spec: str, words: str) -> None:
    with pytest.raises(TargetNotFound) as e:
        load(spec)
    assert words in str(e.value) and "\n" not in str(e.value)
