"""``read_resource``: every backend reads its protected resource back, fence and log in one snapshot.

Each reference backend and each deliberately broken variant runs the same
script against a real store (SQLite file, the suite's Postgres and Redis
servers): w1 claims (e1) and writes ``p1``; w2 takes the node over when the
lease expires (e2) and writes ``p2``; w1, now a zombie, writes ``zombie``,
refused or accepted as the variant does; then the resource is read. The read
must show what the storage really holds: exactly the accepted payloads in the
order they were accepted, each with its epoch (or token), and the fence the
resource refuses below, a broken one's too. Then the same through the exec
protocol, the lock adapters' records, the queue audits' resource, a store
reused from before resource reads, and the kit (scaffold, scenario, simulated
store).
"""

from __future__ import annotations

import json
import random
import shlex
import sqlite3
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stores import Store, claim, new_node, takeover
from variants import broken_variants

from leasecheck.kit.conformance import SCENARIOS
from leasecheck.kit.scaffold import DUTIES, Names, render
from leasecheck.kit.simstore import SimStore
from leasecheck.targets.base import Accepted, Indeterminate, Lease, ResourceState, Target, TargetConfig, reads_resource
from leasecheck.targets.exec_target import Hello, exec_target
from leasecheck.targets.locks.lockbase import Held, LockLease, Record
from leasecheck.targets.queues.resource import Resource
from leasecheck.targets.registry import TargetSpec, available, load
from leasecheck.targets.sqlite_lease import SqliteLease

TTL_MS = 300
Make = Callable[[str], Target]


@pytest.fixture
def make(store_for: Callable[[str], Store]) -> Iterator[Callable[[str], Target]]:
    """``make(target)``: a client of the named backend on its real store (schema set up), closed after the test."""
    made: list[Target] = []

    def factory(name: str) -> Target:
        store = store_for(name)
        target = load(name)(TargetConfig(url=store.url, ttl_ms=TTL_MS, timeout_s=5.0))
        made.append(target)
        target.setup()
        return target

    yield factory
    for target in made:
        target.close()


def scripted(make: Make, name: str) -> tuple[ResourceState, Lease, Lease, bool]:
    """The script of the module docstring: (the read, w1's lease, w2's lease, was the zombie's write accepted)."""
    w1, w2 = make(name), make(name)
    node = new_node(w1)
    first = claim(w1, node, "w1")
    assert w1.effect(first, "p1") is None
    second = takeover(w2, node, "w2")
    assert w2.effect(second, "p2") is None
    zombie = w1.effect(first, "zombie")
    return w2.read_resource(node), first, second, zombie is None


#: backend -> (is the zombie's write accepted, the fence after the script: "e2" for the new lease's epoch, or a number)
SCRIPT: dict[str, tuple[bool, str | int | None]] = {
    # the references: the claim lifted the fence to e2, the zombie's e1 is refused
    "sqlite": (False, "e2"), "postgres": (False, "e2"), "redis": (False, "e2"),
    # unfenced: the zombie's token no longer holds the lease; the resource keeps no fence of its own
    "redis-token": (False, None),
    # broken, but not in the resource: each reads like its reference
    "sqlite-non-atomic-claim": (False, "e2"), "sqlite-swallowed-heartbeat": (False, "e2"),
    "sqlite-release-any-epoch": (False, "e2"), "sqlite-cached-read": (False, "e2"),
    "sqlite-renew-worker-clock": (False, "e2"), "postgres-client-clock": (False, "e2"),
    "postgres-grace-after-failover": (False, "e2"),
    # effects written without a fence check: the zombie's write lands after the newer one, below the fence
    "sqlite-ttl-only": (True, "e2"), "postgres-fence-in-memory": (True, "e2"), "redis-queue-as-authority": (True, "e2"),
    # the fence is raised by commits only: none yet, so the fence it has is 0, below what it lists
    "sqlite-fence-at-commit": (True, 0),
    # the takeover reused epoch 1: the zombie's e1 is not below the fence
    "redis-no-increment": (True, "e2"),
}


#: the modules whose variants break the lease, not the resource: the script above reads each truthfully.
#: (broken_resource's variants get the resource itself wrong, each in its own way: their own tests say how.)
LEASE_BUGS = ("leasecheck.targets.broken_sqlite", "leasecheck.targets.broken_postgres", "leasecheck.targets.broken_redis")


def test_the_script_covers_every_reference_and_every_broken_lease_variant() -> None:
    references = {name for name in available() if not load(name).bug and getattr(load(name), "audit", None) is None}
    variants = {cls.name for cls in broken_variants() if cls.__module__ in LEASE_BUGS}
    assert references | variants <= set(SCRIPT)


@pytest.mark.parametrize("name", list(SCRIPT))
def test_a_backend_reads_back_exactly_what_its_resource_holds(make: Make, name: str) -> None:
    state, first, second, zombie_accepted = scripted(make, name)
    expected_zombie, fence = SCRIPT[name]
    assert zombie_accepted is expected_zombie
    wrote = [(first, "p1"), (second, "p2")] + ([(first, "zombie")] if zombie_accepted else [])
    if load(name).fenced:
        assert state.accepted == tuple(Accepted(lease.epoch, payload) for lease, payload in wrote), state
        assert state.fence == (second.epoch if fence == "e2" else fence), state
        assert second.epoch == (1 if name == "redis-no-increment" else 2) and first.epoch == 1
    else:
        assert state.accepted == tuple(Accepted(None, payload, lease.token) for lease, payload in wrote), state
        assert state.fence is None
    assert reads_resource(load(name)) and reads_resource(make(name))


def test_a_node_nothing_touched_reads_empty_with_fence_zero(make: Make) -> None:
    for name in ("sqlite", "postgres", "redis"):
        assert make(name).read_resource("run-nobody/node-0") == ResourceState((), 0)
    assert make("redis-token").read_resource("run-nobody/node-0") == ResourceState((), None)


def test_the_read_as_the_history_records_it() -> None:
    state = ResourceState((Accepted(3, "w1:n:0a"), Accepted(None, "w2:n:1b", "tok")), 7)
    assert state.to_json() == {"fence": 7, "accepted": [
        {"epoch": 3, "payload": "w1:n:0a"}, {"epoch": None, "payload": "w2:n:1b", "token": "tok"}]}


def test_an_adapter_written_before_resource_reads_keeps_working_without_them(tmp_path: Path) -> None:
    class Old(SqliteLease):
        read_resource = Target.read_resource  # as if written before it existed

    target = Old(TargetConfig(url=str(tmp_path / "old.sqlite3")))
    try:
        assert not reads_resource(Old) and not reads_resource(target)
        with pytest.raises(NotImplementedError):
            target.read_resource("n")
    finally:
        target.close()
    assert reads_resource(SqliteLease)


# ---------------------------------------------------------------- a store made before resource reads


OLD_SQLITE_SCHEMA = """
CREATE TABLE nodes (node TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'READY', epoch INTEGER NOT NULL DEFAULT 0,
                    owner TEXT, attempt INTEGER NOT NULL DEFAULT 0, expires_ns INTEGER, result TEXT);
CREATE TABLE fences (node TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE effects (node TEXT NOT NULL, epoch INTEGER NOT NULL, payload TEXT NOT NULL);
"""


def test_a_sqlite_store_from_before_resource_reads_is_reused_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SQLITE_SCHEMA)
        db.execute("INSERT INTO fences VALUES ('n', 4)")
        db.executemany("INSERT INTO effects VALUES (?, ?, ?)", [("n", 3, "a"), ("other", 9, "x"), ("n", 4, "b")])
    target = SqliteLease(TargetConfig(url=str(path), ttl_ms=TTL_MS))
    try:
        target.setup()
        target.setup()  # idempotent
        assert target.read_resource("n") == ResourceState((Accepted(3, "a"), Accepted(4, "b")), 4)
        lease = target.try_claim("n", "w1")  # not in nodes yet: refused, the resource untouched
        assert not isinstance(lease, Lease)
        target.add_node("n")
        lease = target.try_claim("n", "w1")
        assert isinstance(lease, Lease) and lease.epoch == 1
        assert target.effect(lease, "c") is not None  # below the old fence 4
        assert target.read_resource("n").fence == 4
    finally:
        target.close()


def test_postgres_setup_twice_keeps_the_log_and_its_index(make: Make) -> None:
    target = make("postgres")
    target.setup()
    rows = target._run("SELECT indexname FROM pg_indexes WHERE tablename = 'lease_effects'")  # type: ignore[attr-defined]
    assert ("lease_effects_by_node",) in [tuple(r) for r in rows]


# ---------------------------------------------------------------- exec children


RESOURCE_CHILD = textwrap.dedent('''
    """The SQLite reference over the exec protocol, declaring "resource" (argv[1]: good | bad | none)."""
    import json, os, sys
    from leasecheck.targets.base import Lease, Refused, TargetConfig
    from leasecheck.targets.sqlite_lease import SqliteLease

    mode = sys.argv[1]
    store = SqliteLease(TargetConfig(url=os.environ["LEASECHECK_URL"], ttl_ms=int(os.environ["LEASECHECK_TTL_MS"])))
    hello = {"leasecheck": 1, "name": "sqlite-child", "fenced": True}
    if mode != "none":
        hello["resource"] = True
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        op, answer = req["op"], {"id": req["id"], "ok": True}
        if op == "setup":
            store.setup()
        elif op == "add_nodes":
            store.add_nodes(req["nodes"])
        elif op == "claim":
            out = store.try_claim(req["node"], req["owner"])
            answer.update({"epoch": out.epoch, "token": None} if isinstance(out, Lease) else {"ok": False, "reason": out.reason})
        elif op == "read_resource":
            answer.update(store.read_resource(req["node"]).to_json())
            if mode == "bad":
                answer["accepted"] = [{"payload": 7}]
        else:
            out = getattr(store, op)(Lease(req["node"], "", req["epoch"], req["token"]), *[req[k] for k in ("payload",) if k in req])
            if isinstance(out, Refused):
                answer.update({"ok": False, "reason": out.reason})
        print(json.dumps(answer), flush=True)
''')


def exec_client(tmp_path: Path, mode: str) -> Any:
    child = tmp_path / "resource_child.py"
    child.write_text(RESOURCE_CHILD)
    cls = exec_target(shlex.join([sys.executable, str(child), mode]))
    return cls(TargetConfig(url=str(tmp_path / "lease.sqlite3"), ttl_ms=60_000, timeout_s=30.0, options={"log_dir": str(tmp_path)}))


def test_an_exec_child_that_declares_resource_is_read_and_its_answer_checked(tmp_path: Path) -> None:
    assert Hello.parse(b'{"leasecheck": 1, "name": "a", "fenced": true}').resource is False
    assert Hello.parse(b'{"leasecheck": 1, "name": "a", "fenced": true, "resource": true}').resource is True
    good = exec_client(tmp_path, "good")
    try:
        assert not reads_resource(type(good)) and reads_resource(good)  # the class has no child: only a hello declares it
        good.setup()
        good.add_nodes(["n"])
        lease = good.try_claim("n", "w1")
        assert isinstance(lease, Lease)
        assert good.effect(lease, "p1") is None and good.effect(lease, "p2") is None
        assert good.read_resource("n") == ResourceState((Accepted(1, "p1"), Accepted(1, "p2")), 1)
    finally:
        good.close()
    bad = exec_client(tmp_path, "bad")
    try:
        pid = bad._child.pid
        with pytest.raises(Indeterminate, match=r"bad answer to request 1 \(read_resource\).*string \"payload\""):
            bad.read_resource("n")
        bad.setup()  # a fresh child answers the next op
        assert bad._child.pid != pid
    finally:
        bad.close()


def test_an_exec_child_without_resource_in_its_hello_is_never_asked(tmp_path: Path) -> None:
    silent = exec_client(tmp_path, "none")
    try:
        assert not reads_resource(silent)
        with pytest.raises(NotImplementedError, match='"resource": true'):
            silent.read_resource("n")
    finally:
        silent.close()


# ---------------------------------------------------------------- lock adapters, queues, the kit


class MemoryRecords:
    """Records in a dict, for LockLease's own logic (the real stores keep tests/support/records_contract.py)."""

    def __init__(self, snapshot: bool) -> None:
        self.fence: int | None = None
        self.log: list[dict[str, Any]] = []
        if snapshot:
            self.resource = lambda node: (self.fence, list(self.log))

    def effects(self, node: str) -> list[dict[str, Any]]:
        return list(self.log)


class MemoryLock(LockLease):
    name = "test-memory-lock"

    def make_records(self) -> Any:
        return MemoryRecords(self.config.options.get("snapshot", True))

    def acquire(self, node: str, owner: str) -> Held | None:
        return Held(None, "t")

    def extend(self, held: Held) -> bool:
        return True

    def unlock(self, held: Held) -> None:
        pass


@pytest.mark.parametrize(("fenced", "snapshot", "expected"), [
    (True, True, ResourceState((Accepted(2, "a"), Accepted(3, "b")), 3)),
    (True, False, ResourceState((Accepted(2, "a"), Accepted(3, "b")), None)),  # no snapshot: no fence read
    (False, True, ResourceState((Accepted(None, "a", "t2"), Accepted(None, "b", "t3")), None)),
])
def test_a_lock_adapter_reads_its_records_resource(fenced: bool, snapshot: bool, expected: ResourceState) -> None:
    cls = type("Lock", (MemoryLock,), {"fenced": fenced})
    target = cls(TargetConfig(url="", options={"snapshot": snapshot}))
    target.records.fence = 3
    target.records.log = [{"token": "t2", "payload": "a", "fence": 2}, {"token": "t3", "payload": "b", "fence": 3}]
    assert reads_resource(target) and target.read_resource("n") == expected
    assert Record("READY").fence is None


def test_a_lock_adapter_on_redis_reads_its_resource_back(store_for: Callable[[str], Store]) -> None:
    pytest.importorskip("redis")
    url = store_for("redis").url
    cls = load("redis-py-lock")
    a = cls(TargetConfig(url=url, ttl_ms=60_000))
    try:
        a.setup()
        node = new_node(a)
        lease = claim(a, node, "w1")
        assert a.effect(lease, "p1") is None and a.effect(lease, "p2") is None
        assert a.read_resource(node) == ResourceState((Accepted(None, "p1", lease.token), Accepted(None, "p2", lease.token)), None)
    finally:
        a.close()


def test_the_queue_resource_reads_one_jobs_effects_and_fence(tmp_path: Path) -> None:
    resource = Resource(tmp_path / "resource.sqlite3")
    resource.create()
    assert resource.append("j1", "x1", 1, "1", fenced=True)
    assert resource.append("j1", "x2", 2, "1", fenced=True)
    assert not resource.append("j1", "x1", 1, "2", fenced=True)
    assert resource.append("j2", "y1", None, "1", fenced=False, token="exec-a")
    assert resource.read("j1") == ResourceState((Accepted(1, "1"), Accepted(2, "1")), 2)
    assert resource.read("j2") == ResourceState((Accepted(None, "1", "exec-a"),), None)
    assert resource.read("nobody") == ResourceState((), None)


def test_the_simulated_store_reads_its_resource_as_a_correct_store_must() -> None:
    fenced = SimStore(10, nodes=["n"])
    fenced.apply(0, "claim", "n", {"owner": "a"})
    fenced.apply(1, "effect", "n", {"epoch": 1, "payload": "p1"})
    fenced.apply(20, "claim", "n", {"owner": "b"})
    assert fenced.apply(21, "effect", "n", {"epoch": 1, "payload": "late"}) == ("fail", {"reason": "stale"})
    assert fenced.apply(22, "read-resource", "n", {}) == ("ok", {"fence": 2, "accepted": [{"epoch": 1, "payload": "p1"}]})
    unfenced = SimStore(10, nodes=["n"], fenced=False, rng=random.Random(1))
    token = unfenced.apply(0, "claim", "n", {"owner": "a"})[1]["token"]
    unfenced.apply(1, "effect", "n", {"epoch": None, "token": token, "payload": "p1"})
    assert unfenced.apply(2, "read-resource", "n", {}) == (
        "ok", {"fence": None, "accepted": [{"epoch": None, "token": token, "payload": "p1"}]})


def test_the_scaffolds_adapter_has_a_read_resource_to_write() -> None:
    files = render(Names.of("acme"))
    adapter = files["acme_lease.py"]
    assert "def read_resource(self, node: str) -> ResourceState:" in adapter
    assert 'raise NotWritten("AcmeLease.read_resource is not written yet: return ResourceState(' in adapter
    assert "read_resource" in DUTIES and "'read_resource'" in files["test_acme_lease.py"]
    assert "resource" in SCENARIOS


@pytest.mark.parametrize(("name", "held", "evidence"), [
    ("sqlite-ttl-only", True, "zombie's effect was ok"),  # accepted, and read back truthfully
    ("sqlite-fence-at-commit", False, "the fence 0 is below epoch 1"),
])
def test_the_resource_scenario_judges_the_read_not_the_write(store_for: Callable[[str], Store], name: str, held: bool,
                                                               evidence: str) -> None:
    store = store_for(name)
    r = SCENARIOS["resource"](store.spec(name))
    assert r.held is held and evidence in r.detail, r.detail
    assert json.dumps(r.facts)  # what the scenario saw travels as JSON


def test_the_resource_scenario_skips_an_adapter_that_cannot_read(tmp_path: Path) -> None:
    spec = TargetSpec(f"{__name__}:OldSqlite", TargetConfig(url=str(tmp_path / "old.sqlite3"), ttl_ms=TTL_MS))
    t = spec.make()
    t.setup()
    t.close()
    r = SCENARIOS["resource"](spec)
    assert r.held and r.facts == {"skipped": True}, r.detail


class OldSqlite(SqliteLease):
    """The SQLite reference, as an adapter written before read_resource."""

    read_resource = Target.read_resource
