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
audit, an adapter on :class:`~leasecheck.targets.locks.lockbase.LockLease`
(only the library's acquire / extend / unlock to write, the jobs' records in
Redis) with its :class:`~leasecheck.targets.audits.AuditPlan`, so
that ``leasecheck audit acme_lock:AcmeLock`` audits it. ``--queue LIBRARY``: a job queue's
adapter and its test of the queue conformance (:mod:`leasecheck.kit.scaffold_queue`).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from leasecheck.errors import BadInput
from leasecheck.kit.conformance import RESTARTING, SCENARIOS
from leasecheck.kit.scaffold_queue import render_queue
from leasecheck.kit.scaffold_templates import ADAPTER, LOCK_ADAPTER, METHOD, TEST

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
    "read_resource": "return ResourceState(accepted, fence): every effect the resource accepted for the node, oldest first, "
                     "as Accepted(epoch, payload) (unfenced: Accepted(None, payload, token)), and the epoch below which "
                     "it refuses effects now (None if it keeps none), both read in ONE transaction",
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

SIGNATURES = {
    "setup": "setup(self) -> None",
    "add_node": "add_node(self, node: str) -> None",
    "try_claim": "try_claim(self, node: str, owner: str) -> Lease | Refused",
    "renew": "renew(self, lease: Lease) -> Outcome",
    "effect": "effect(self, lease: Lease, payload: str) -> Outcome",
    "commit": "commit(self, lease: Lease, result: str) -> Outcome",
    "release": "release(self, lease: Lease) -> Outcome",
    "read": "read(self, node: str) -> NodeState",
    "read_resource": "read_resource(self, node: str) -> ResourceState",
    "acquire": "acquire(self, node: str, owner: str) -> Held | None",
    "extend": "extend(self, held: Held) -> bool",
    "unlock": "unlock(self, held: Held) -> None",
}

#: the scenarios a lock adapter's test runs: what every lock keeps when its adapter calls the library
#: right (one holder at a time, a heartbeat keeps it, a crashed holder's lock is taken over, claims
#: and releases cycle); whether it fences off a zombie, and when its lock expires, is what the audit judges
LOCK_SCENARIOS = ("crash-takeover", "duplicate-delivery", "epochs-increase", "heartbeat", "race")


class ScaffoldError(BadInput):
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


def names_for(name: str | None, lock: str | None, queue: str | None = None) -> Names:
    """The names ``new-target [NAME] [--lock LIBRARY | --queue LIBRARY]`` writes: a library's adapter is named after
    the library by default."""
    if queue is not None:
        return Names.of(name if name is not None else re.sub(r"[.]", "-", queue), "queue")
    if name is None and lock is None:
        raise ScaffoldError("name the backend (new-target NAME), or the lock library to audit (new-target --lock LIBRARY), "
                            "or the job queue (new-target --queue LIBRARY)")
    if lock is None:
        assert name is not None
        return Names.of(name)
    return Names.of(name if name is not None else re.sub(r"[.]", "-", lock), "lock")


def write(name: str | None, directory: Path, force: bool = False, store: str | None = None,
          lock: str | None = None, queue: str | None = None) -> list[Path]:
    """Write the adapter and its test into ``directory``; refuse to overwrite unless ``force``.

    ``lock``: a lock library's adapter (on LockLease, records in Redis) instead of a plain backend's; ``queue``: a job
    queue's (:mod:`leasecheck.kit.scaffold_queue`).
    """
    if lock is not None and queue is not None:
        raise ScaffoldError("--lock and --queue: one library at a time")
    names = names_for(name, lock, queue)
    if queue is not None:
        if store is not None:
            raise ScaffoldError("a --queue adapter names its broker in the class (broker = ...), not with --store-kind")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", queue):
            raise ScaffoldError(f"{queue!r}: give the library's name on PyPI (letters, digits, ., - and _)")
        files = render_queue(names.module, names.cls, names.name, queue)
    elif lock is not None:
        if store not in (None, "redis"):
            raise ScaffoldError(f"a --lock adapter keeps its locks' records in Redis (RedisRecords), not {store}: "
                                "for another store, write a Records of your own (see leasecheck/targets/locks/lockbase.py)")
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
