"""``leasecheck new-target NAME``: a ready-to-edit adapter and the test that holds it to the seed's table.

The quickest path for a team auditing its own backend: two files in the current
folder. The adapter's every method raises :class:`NotWritten` with what that
method must do, so the test file fails with one clear message per method still
to write (``test_method_is_written[renew]``: "AcmeLease.renew is not written
yet: ..."), and a method that raises anything else fails its test with that
exception. Once they are written, the same file runs every conformance scenario
(:mod:`leasecheck.kit.conformance`) against the adapter, on a throwaway store of the
adapter's ``store`` started as ``leasecheck run`` starts it
(:mod:`leasecheck.kit.testing`), and ``leasecheck run --target acme_lease:AcmeLease``
runs it under faults.

``leasecheck new-target --lock LIBRARY``: the same for a lock library under
audit, an adapter on :class:`~leasecheck.targets.thirdparty.lockbase.LockLease`
(only the library's acquire / extend / unlock to write, the jobs' records in
Redis) with its :class:`~leasecheck.targets.thirdparty.audit.AuditPlan`, so
that ``leasecheck audit acme_lock:AcmeLock`` audits it.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from leasecheck.kit.conformance import RESTARTING, SCENARIOS

#: what each method must do, as the adapter's NotWritten messages say it
DUTIES: dict[str, str] = {
    "setup": "create what the store needs (tables, scripts), idempotently",
    "add_node": "make the node exist, READY, if it does not yet",
    "try_claim": "take the node's lease atomically: return Lease(node, owner, epoch) with an epoch larger than any before, "
                 "or Refused('held') / Refused('terminal')",
    "renew": "extend the lease if it is still this epoch's and unexpired: return None, or Refused('stale' / 'expired' / ...)",
    "effect": "write to the protected resource only if no larger epoch has been seen: None, or Refused('stale')",
    "commit": "mark the node SUCCEEDED with the result if the lease is still this epoch's: None, or a Refused",
    "release": "give the lease back (node READY) if it is still this epoch's: None, or a Refused",
    "read": "return NodeState(status, epoch, owner, result): the store's durable record of the node",
}

#: what each library call of a lock adapter must do (LockLease writes the lease protocol on them)
LOCK_DUTIES: dict[str, str] = {
    "acquire": "take the node's lock without waiting, for self.ttl_ms where the library has a ttl: "
               "return Held(lock, token) (the library's lock object and a string naming this grant), or None if another holds it",
    "extend": "the library's heartbeat (extend / refresh / renew the lock for self.ttl_ms): True, or False if the lock is no longer ours",
    "unlock": "let the lock go with the library's release; a lock already lost or taken by another is no error",
}

#: the stores ``new-target --store-kind`` can name (``leasecheck run`` starts each of them itself)
STORE_KINDS = ("sqlite", "postgres", "redis")

ADAPTER = Template('''"""$title: a leasecheck adapter (written by `leasecheck new-target $name`).

Fill in each method (the protocol: leasecheck.targets.base.Target; leasecheck's
docs/contracts/target-protocol.md), set `store` below to the store it runs on, then
run the test beside this file:

    python -m pytest -q test_$module.py

It runs against a throwaway server of that store, started as `leasecheck run`
starts it (or against LEASECHECK_URL when that is set). Then the backend
under faults:

    leasecheck run --target $module:$cls --nemesis pause,kill

One instance per worker process. Raise Unavailable when an operation was
definitely not applied (the store was not reached), Indeterminate when its
outcome is unknown (a timeout after sending); anything else is recorded as
`info` with its message.
"""

from __future__ import annotations

from leasecheck.targets.base import (  # noqa: F401 (what the methods will need)
    Indeterminate,
    Lease,
    NodeState,
    Outcome,
    Refused,
    Target,
    TargetConfig,
    Unavailable,
)


class NotWritten(NotImplementedError):
    """A method of the adapter still to be written; the test names each one."""


class $cls(Target):
    """$title (one line for `leasecheck targets`)."""

    name = "$name"
    #: does a claim hand out an epoch (a fencing token)? False: a token names the lease (Lease.token)
    fenced = True
    #: the store leasecheck starts for it (and its test): "sqlite", "postgres", "redis"; None: a store of
    #: its own, whose address `leasecheck run` takes with --url and the test from LEASECHECK_URL
    store = $store

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)  # config.url: the store's address; config.ttl_ms: the lease's length

$methods
''')

LOCK_ADAPTER = Template('''"""$title (written by `leasecheck new-target --lock $library`).

A lock library grants a lock over a name and, at best, a deadline; it knows
nothing of jobs, commits or fencing. LockLease (leasecheck.targets.thirdparty.lockbase)
is how its users protect work with it, written once: take the lock without
waiting, check the job is not done, write under it, mark the job done, let go.
What is left to write here is the three calls into the library: acquire,
extend and unlock (and holds, if the library can say "is it still mine?" other
than by extending it). The jobs' records and their protected resource live in
the same Redis (RedisRecords), written plainly, trusting the lock, as the
library's README does.

Fill in each method, then run the test beside this file (it starts a
throwaway Redis, as `leasecheck run` does, or uses LEASECHECK_URL when set):

    python -m pytest -q test_$module.py

and audit the library under faults with the plan below:

    leasecheck audit $module:$cls

Put each call into the library inside `with mapped_errors(self.client, "what"):`
so a Redis that cannot be reached is Unavailable and one that went silent after
a command was sent is Indeterminate (an `info` op), as in leasecheck's own
adapters (leasecheck/targets/thirdparty/redis_py.py, python_redis_lock.py).
"""

from __future__ import annotations

from typing import ClassVar

from leasecheck.targets.base import TargetConfig
from leasecheck.targets.thirdparty.audit import AuditPlan, FaultAudit
from leasecheck.targets.thirdparty.lockbase import Held, LockLease, Records
from leasecheck.targets.thirdparty.redis_records import RedisRecords, mapped_errors, redis_client  # noqa: F401

# import $import_name  # the library under audit (its import name may differ from its PyPI name)


class NotWritten(NotImplementedError):
    """A method of the adapter still to be written; the test names each one."""


class $cls(LockLease):
    """$library's lock as its README uses it, unfenced (one line for `leasecheck targets` and `leasecheck audit`)."""

    name = "$name"
    #: the store leasecheck starts for it: the locks and the jobs' records are both in this Redis
    store = "redis"
    #: False: the library hands out no fencing token; each grant is named by its Held.token
    fenced = False

    #: what `leasecheck audit $module:$cls` runs: one run per fault and seed, judged by the checker.
    #: `expected` is the verdict you claim for the library: a run that finds otherwise is marked
    #: "NOT as published (valid)". Once audited, write down what it found
    #: (FaultAudit("pause", "invalid", ("stale-commit", ...)), and a `fix`); `leasecheck audit
    #: $module:$cls --as-published` then exits 0 while the library still behaves so.
    audit: ClassVar[AuditPlan | None] = AuditPlan(
        library="$library",  # its PyPI name: the audit reports its installed version
        mode="documented",
        faults=(
            FaultAudit("pause", "valid"),  # a holder SIGSTOPped past its lock's expiry (the GC pause), then woken
            FaultAudit("kill", "valid"),  # a holder SIGKILLed while it holds the lock
        ),
        seeds=(1, 2, 3),
        fix="",  # the advice a finding ends with
        time_limit=8.0,  # seconds per run
        # other `leasecheck run` options, as RunOptions fields: a fault every 2 s (±1); workers that never
        # stall on their own (so what a fault's victims did is what the fault published) and that always
        # write on when woken past their lock (the zombie the pause fault is there to show)
        options={"ttl_ms": 1000, "nemesis_interval": 2.0, "workload": {"stall_rate": 0.0, "zombie_rate": 1.0}},
    )

    #: the key prefix of the records (use it for the locks' keys too): no other adapter reads these nodes
    PREFIX: ClassVar[str] = "lc-$name"

    def __init__(self, config: TargetConfig) -> None:
        self.client = redis_client(config.url, config.timeout_s)  # decoded replies, no retries of its own
        super().__init__(config)  # self.ttl_ms: the lock's length

    def make_records(self) -> Records:
        return RedisRecords(self.client, self.PREFIX)

$methods
''')

METHOD = Template('''    def $signature:
        raise NotWritten("$cls.$method is not written yet: $duty")
''')

SIGNATURES = {
    "setup": "setup(self) -> None",
    "add_node": "add_node(self, node: str) -> None",
    "try_claim": "try_claim(self, node: str, owner: str) -> Lease | Refused",
    "renew": "renew(self, lease: Lease) -> Outcome",
    "effect": "effect(self, lease: Lease, payload: str) -> Outcome",
    "commit": "commit(self, lease: Lease, result: str) -> Outcome",
    "release": "release(self, lease: Lease) -> Outcome",
    "read": "read(self, node: str) -> NodeState",
    "acquire": "acquire(self, node: str, owner: str) -> Held | None",
    "extend": "extend(self, held: Held) -> bool",
    "unlock": "unlock(self, held: Held) -> None",
}

TEST = Template('''"""$about

`test_method_is_written` fails once per method still to write, with what it
must do, and with the exception of a method that raises. Then `test_scenario`
runs $scenarios against the adapter, with real clients in separate processes.

The store: the adapter's `store`, started as `leasecheck run` starts it (a
fresh SQLite file per test; one throwaway Postgres or Redis server for the
whole session, stopped at its end), or LEASECHECK_URL when it is set (then
no server is started, and pytest's header says so).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leasecheck.kit.conformance import SCENARIOS
from leasecheck.errors import EnvironmentFailure
from leasecheck.targets.base import TargetConfig
from leasecheck.targets.registry import TargetSpec
from leasecheck.kit.testing import Stores, Tried, try_methods

HERE = Path(__file__).resolve().parent
TARGET = "$module:$cls"
METHODS = $methods
#: $scenario_note
SCENARIO_NAMES = $scenario_names


@pytest.fixture(autouse=True)
def _in_this_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients in other processes load $module from the current folder: make it this one."""
    monkeypatch.chdir(HERE)
    monkeypatch.syspath_prepend(str(HERE))


@pytest.fixture
def spec(leasecheck_stores: Stores, tmp_path: Path) -> TargetSpec:
    """The adapter on its store (leasecheck_stores: the leasecheck pytest plugin's throwaway servers)."""
    try:
        url = leasecheck_stores.url(TARGET, tmp_path)
    except EnvironmentFailure as e:
        pytest.fail(f"no store for {TARGET}: {e}", pytrace=False)
    return TargetSpec(TARGET, TargetConfig(url=url, ttl_ms=int(os.environ.get("LEASECHECK_TTL_MS", "1000"))))


def _tried(spec: TargetSpec) -> dict[str, Tried]:
    """What each method did when called once on a fresh node."""
    from $module import NotWritten

    return try_methods(spec, NotWritten)


@pytest.mark.parametrize("method", METHODS)
def test_method_is_written(spec: TargetSpec, method: str) -> None:
    tried = _tried(spec)[method]
    if tried.not_written is not None:
        pytest.fail(tried.not_written, pytrace=False)
    if tried.untried is not None:
        pytest.fail(tried.untried, pytrace=False)
    if tried.error is not None:
        raise tried.error  # what the method raised (its traceback is below)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_scenario(spec: TargetSpec, scenario: str) -> None:
    tried = _tried(spec).values()
    missing = [t.method for t in tried if t.not_written is not None]
    if missing:
        pytest.fail(f"write {', '.join(missing)} first (see test_method_is_written)", pytrace=False)
    broken = [t.method for t in tried if t.error is not None]
    if broken:
        pytest.fail(f"fix {', '.join(broken)} first (see test_method_is_written)", pytrace=False)
    client = spec.make()
    client.setup()
    client.close()
    result = SCENARIOS[scenario](spec)
    assert result.held, f"{scenario}: {result.detail}"
''')

#: the scenarios a lock adapter's test runs: what every lock keeps when its adapter calls the library
#: right (one holder at a time, a heartbeat keeps it, a crashed holder's lock is taken over, claims
#: and releases cycle); whether it fences off a zombie, and when its lock expires, is what the audit judges
LOCK_SCENARIOS = ("crash-takeover", "duplicate-delivery", "epochs-increase", "heartbeat", "race")


class ScaffoldError(ValueError):
    """The files cannot be written (a bad name, a file already there); ``str()`` says why in one line."""


@dataclass(frozen=True)
class Names:
    """What NAME becomes: the target's name, the module and the class."""

    name: str
    module: str
    cls: str

    @classmethod
    def of(cls, name: str, suffix: str = "lease") -> Names:
        """``acme`` -> ``acme``, ``acme_lease``, ``AcmeLease`` (``suffix="lock"``: ``acme_lock``, ``AcmeLock``)."""
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
            raise ScaffoldError(f"{name!r}: a name starts with a letter and has only letters, digits, - and _")
        module = name.lower().replace("-", "_") + "_" + suffix
        if keyword.iskeyword(module):
            raise ScaffoldError(f"{name!r} makes the module name {module!r}, a Python keyword")
        camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_]", name) if part) + suffix.capitalize()
        return cls(name.lower(), module, camel)


def _methods(names: Names, duties: dict[str, str]) -> str:
    return "\n".join(
        METHOD.substitute(signature=SIGNATURES[m], cls=names.cls, method=m, duty=duty.replace('"', "'"))
        for m, duty in duties.items()
    ).rstrip("\n")


def render(names: Names, store: str | None = None) -> dict[str, str]:
    """The two files, by file name; ``store``: the adapter's store kind (None: a store of its own)."""
    if store is not None and store not in STORE_KINDS:
        raise ScaffoldError(f"{store!r}: the stores leasecheck starts are {', '.join(STORE_KINDS)}")
    title = f"The {names.name} lease backend"
    adapter = ADAPTER.substitute(title=title, name=names.name, module=names.module, cls=names.cls,
                                 store=f'"{store}"' if store else "None", methods=_methods(names, DUTIES))
    test = TEST.substitute(
        about=f"The seed's verification table against {names.cls} (written by `leasecheck new-target {names.name}`).",
        scenarios="every conformance scenario", module=names.module, cls=names.cls,
        methods=repr(list(DUTIES)), scenario_names=repr(sorted(set(SCENARIOS) - RESTARTING)),
        scenario_note="scenarios that restart the store need a restart function of your own: add them when you have one",
    )
    return {f"{names.module}.py": adapter, f"test_{names.module}.py": test}


def render_lock(names: Names, library: str) -> dict[str, str]:
    """A lock library's adapter on LockLease (with its AuditPlan) and its test, by file name."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", library):
        raise ScaffoldError(f"{library!r}: give the library's name on PyPI (letters, digits, ., - and _)")
    adapter = LOCK_ADAPTER.substitute(
        title=f"{library}'s lock, audited as a lease: a leasecheck adapter", library=library, name=names.name,
        module=names.module, cls=names.cls, import_name=re.sub(r"[-.]", "_", library).lower(),
        methods=_methods(names, LOCK_DUTIES),
    )
    test = TEST.substitute(
        about=f"{names.cls} (the lock of {library}) held to what every lock keeps "
              f"(written by `leasecheck new-target --lock {library}`).",
        scenarios="the conformance scenarios every lock passes", module=names.module, cls=names.cls,
        methods=repr(["setup", *LOCK_DUTIES]), scenario_names=repr(list(LOCK_SCENARIOS)),
        scenario_note="what every lock keeps; a zombie's writes and the lock's expiry are judged by `leasecheck audit`",
    )
    return {f"{names.module}.py": adapter, f"test_{names.module}.py": test}


def names_for(name: str | None, lock: str | None) -> Names:
    """The names ``new-target [NAME] [--lock LIBRARY]`` writes: a lock adapter is named after its library by default."""
    if name is None and lock is None:
        raise ScaffoldError("name the backend (new-target NAME), or the lock library to audit (new-target --lock LIBRARY)")
    if lock is None:
        assert name is not None
        return Names.of(name)
    return Names.of(name if name is not None else re.sub(r"[.]", "-", lock), "lock")


def write(name: str | None, directory: Path, force: bool = False, store: str | None = None,
          lock: str | None = None) -> list[Path]:
    """Write the adapter and its test into ``directory``; refuse to overwrite unless ``force``.

    ``lock``: a lock library's adapter (on LockLease, records in Redis) instead of a plain backend's.
    """
    names = names_for(name, lock)
    if lock is not None:
        if store not in (None, "redis"):
            raise ScaffoldError(f"a --lock adapter keeps its locks' records in Redis (RedisRecords), not {store}: "
                                "for another store, write a Records of your own (see leasecheck/targets/thirdparty/lockbase.py)")
        files = render_lock(names, lock)
    else:
        files = render(names, store)
    paths = [directory / file for file in files]
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        raise ScaffoldError(f"{existing[0]} exists already (--force overwrites it)")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in zip(paths, files.values(), strict=True):
        path.write_text(text)
    return paths
