"""``leasecheck new-target NAME``: a ready-to-edit adapter and the test that holds it to the seed's table.

The quickest path for a team auditing its own backend: two files in the current
folder. The adapter's every method raises :class:`NotWritten` with what that
method must do, so the test file fails with one clear message per method still
to write (``test_method_is_written[renew]``: "AcmeLease.renew is not written
yet: ..."). Once they are written, the same file runs every conformance scenario
(:mod:`leasecheck.conformance`) against the adapter, and ``leasecheck run
--target acme_lease:AcmeLease`` runs it under faults.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from leasecheck.conformance import RESTARTING, SCENARIOS

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

ADAPTER = Template('''"""$title: a leasecheck adapter (written by `leasecheck new-target $name`).

Fill in each method (the protocol: leasecheck.targets.base.Target; leasecheck's
docs/contracts/target-protocol.md), then run the test beside this file:

    python -m pytest -q test_$module.py

and the backend under faults:

    leasecheck run --target $module:$cls --url YOUR_STORE --nemesis pause,kill

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
    #: the store leasecheck starts for it: "sqlite", "postgres", "redis", or None (pass --url)
    store = None

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)  # config.url: the store's address; config.ttl_ms: the lease's length

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
}

TEST = Template('''"""The seed's verification table against $cls (written by `leasecheck new-target $name`).

`test_method_is_written` fails once per method still to write, with what it must
do; then every conformance scenario runs against the adapter, with real
clients in separate processes. The store: LEASECHECK_URL if set, else a fresh
file per test (for a file store such as SQLite).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leasecheck.conformance import SCENARIOS
from leasecheck.targets.base import Lease, TargetConfig
from leasecheck.targets.registry import TargetSpec

HERE = Path(__file__).resolve().parent
TARGET = "$module:$cls"
METHODS = $methods
#: scenarios that restart the store need a restart function of your own: add them when you have one
SCENARIO_NAMES = $scenarios


@pytest.fixture(autouse=True)
def _in_this_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients in other processes load $module from the current folder: make it this one."""
    monkeypatch.chdir(HERE)
    monkeypatch.syspath_prepend(str(HERE))


@pytest.fixture
def spec(tmp_path: Path) -> TargetSpec:
    url = os.environ.get("LEASECHECK_URL") or str(tmp_path / "lease.sqlite3")
    return TargetSpec(TARGET, TargetConfig(url=url, ttl_ms=int(os.environ.get("LEASECHECK_TTL_MS", "1000"))))


def _unwritten(spec: TargetSpec) -> dict[str, str]:
    """Each method that still raises NotWritten, with its message."""
    from $module import NotWritten

    target = spec.make()
    lease = Lease("new-target/node-0", "w1", 1, "token")
    calls = {
        "setup": lambda: target.setup(),
        "add_node": lambda: target.add_node(lease.node),
        "try_claim": lambda: target.try_claim(lease.node, lease.owner),
        "renew": lambda: target.renew(lease),
        "effect": lambda: target.effect(lease, "payload"),
        "commit": lambda: target.commit(lease, "result"),
        "release": lambda: target.release(lease),
        "read": lambda: target.read(lease.node),
    }
    missing: dict[str, str] = {}
    for method, call in calls.items():
        try:
            call()
        except NotWritten as e:
            missing[method] = str(e)
        except Exception:
            pass  # written; whether it is right is what the scenarios below judge
    return missing


@pytest.mark.parametrize("method", METHODS)
def test_method_is_written(spec: TargetSpec, method: str) -> None:
    message = _unwritten(spec).get(method)
    if message is not None:
        pytest.fail(message, pytrace=False)


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_scenario(spec: TargetSpec, scenario: str) -> None:
    missing = _unwritten(spec)
    if missing:
        pytest.fail(f"write {', '.join(missing)} first (see test_method_is_written)", pytrace=False)
    spec.make().setup()
    result = SCENARIOS[scenario](spec)
    assert result.held, f"{scenario}: {result.detail}"
''')


class ScaffoldError(ValueError):
    """The files cannot be written (a bad name, a file already there); ``str()`` says why in one line."""


@dataclass(frozen=True)
class Names:
    """What NAME becomes: the target's name, the module and the class."""

    name: str
    module: str
    cls: str

    @classmethod
    def of(cls, name: str) -> Names:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
            raise ScaffoldError(f"{name!r}: a name starts with a letter and has only letters, digits, - and _")
        module = name.lower().replace("-", "_") + "_lease"
        if keyword.iskeyword(module):
            raise ScaffoldError(f"{name!r} makes the module name {module!r}, a Python keyword")
        camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_]", name) if part) + "Lease"
        return cls(name.lower(), module, camel)


def render(names: Names) -> dict[str, str]:
    """The two files, by file name."""
    methods = "\n".join(
        METHOD.substitute(signature=SIGNATURES[m], cls=names.cls, method=m, duty=DUTIES[m].replace('"', "'"))
        for m in DUTIES
    )
    title = f"The {names.name} lease backend"
    adapter = ADAPTER.substitute(title=title, name=names.name, module=names.module, cls=names.cls, methods=methods.rstrip("\n"))
    scenarios = sorted(set(SCENARIOS) - RESTARTING)
    test = TEST.substitute(name=names.name, module=names.module, cls=names.cls,
                           methods=repr(list(DUTIES)), scenarios=repr(scenarios))
    return {f"{names.module}.py": adapter, f"test_{names.module}.py": test}


def write(name: str, directory: Path, force: bool = False) -> list[Path]:
    """Write the adapter and its test into ``directory``; refuse to overwrite unless ``force``."""
    names = Names.of(name)
    files = render(names)
    paths = [directory / file for file in files]
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        raise ScaffoldError(f"{existing[0]} exists already (--force overwrites it)")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in zip(paths, files.values(), strict=True):
        path.write_text(text)
    return paths
