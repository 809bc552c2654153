"""The files ``leasecheck new-target`` writes, as templates: the adapter (plain or on a lock library) and its test.

Apart from :mod:`leasecheck.kit.scaffold` (which fills them in and writes them)
because they are the user's first view of leasecheck, long and read as text.
"""

from __future__ import annotations

from string import Template

ADAPTER = Template('''"""$title: a leasecheck adapter (written by `leasecheck new-target $name`).

Fill in each method (the protocol: leasecheck.targets.base.Target; leasecheck's
docs/contracts/target-protocol.md), set `store` below to the store it runs on, then
run the test beside this file:

    python -m pytest -q test_$module.py

It runs against a throwaway server of that store, started as `leasecheck run`
starts it (or against LEASECHECK_URL when that is set). Then the backend
under faults:

    leasecheck run --target $module:$cls --nemesis pause,kill

read_resource lets leasecheck read the protected resource back (what your
effects wrote, and its fence): the proof of a zombie's write that landed after
a takeover. Read the log and the fence in one transaction, oldest entry first.

One instance per worker process. Raise Unavailable when an operation was
definitely not applied (the store was not reached), Indeterminate when its
outcome is unknown (a timeout after sending); anything else is recorded as
`info` with its message.
"""

from __future__ import annotations

from leasecheck.targets.base import (  # noqa: F401 (what the methods will need)
    Accepted,
    Indeterminate,
    Lease,
    NodeState,
    Outcome,
    Refused,
    ResourceState,
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
nothing of jobs, commits or fencing. LockLease (leasecheck.targets.locks.lockbase)
is how its users protect work with it, written once: take the lock without
waiting, check the job is not done, write under it, mark the job done, let go.
What is left to write here is the three calls into the library: acquire,
extend and unlock (and holds, if the library can say "is it still mine?" other
than by extending it). The jobs' records and their protected resource live in
the same Redis (RedisRecords, which the base class RedisLockLease makes with its
client), written plainly, trusting the lock, as the library's README does.

Fill in each method, then run the test beside this file (it starts a
throwaway Redis, as `leasecheck run` does, or uses LEASECHECK_URL when set):

    python -m pytest -q test_$module.py

and audit the library under faults with the plan below:

    leasecheck audit $module:$cls

Put each call into the library inside `with mapped_errors(self.client, "what"):`
so a Redis that cannot be reached is Unavailable and one that went silent after
a command was sent is Indeterminate (an `info` op), as in leasecheck's own
adapters (leasecheck/targets/locks/redis_py.py, python_redis_lock.py).
"""

from __future__ import annotations

from typing import ClassVar

from leasecheck.targets.audits import AuditPlan, FaultAudit
from leasecheck.targets.locks.lockbase import Held
from leasecheck.targets.locks.redis_records import RedisLockLease, mapped_errors  # noqa: F401

# import $import_name  # the library under audit (its import name may differ from its PyPI name)


class NotWritten(NotImplementedError):
    """A method of the adapter still to be written; the test names each one."""


class $cls(RedisLockLease):
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

    #: the key prefix of the records (use it for the locks' keys too): no other adapter reads these nodes. The base
    #: class makes self.client (decoded replies, no retries of its own) and the records; self.ttl_ms is the lock's length
    PREFIX: ClassVar[str] = "lc-$name"

$methods
''')

METHOD = Template('''    def $signature:
        raise NotWritten("$cls.$method is not written yet: $duty")
''')

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
    tried = _tried(spec).get(method)
    if tried is None:  # read_resource, removed from the adapter: leasecheck then runs it without resource reads
        pytest.skip(f"{TARGET} has no {method}")
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
    if result.facts.get("skipped"):
        pytest.skip(result.detail)
    assert result.held, f"{scenario}: {result.detail}"
''')
