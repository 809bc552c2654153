"""Helpers for a team's own adapter tests: a throwaway store as ``leasecheck run`` starts it, and a method probe.

The test file that ``leasecheck new-target`` writes uses both, through the
pytest plugin's ``leasecheck_stores`` fixture (a :class:`Stores` for the session)::

    def test_my_adapter(leasecheck_stores, tmp_path):
        url = leasecheck_stores.url("acme_lease:AcmeLease", tmp_path)

``url`` gives the adapter's store (its class attribute ``store``) exactly as
``leasecheck run`` would without ``--url`` (:func:`leasecheck.run.environment.prepare`):
a fresh file in ``directory`` for SQLite, a local Postgres or Redis server of
its own (started on first use, once per session, stopped at its end). When the
environment variable ``LEASECHECK_URL`` is set, that store is used instead and
no server is started (the plugin's report header says so).

:func:`try_methods` calls each method of an adapter once on a fresh node of a
real store and says, per method, whether it is still to be written (it raised
the scaffold's ``NotWritten``), raised something else, or answered with
something that is no outcome of the protocol.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from leasecheck.errors import EnvironmentFailure
from leasecheck.run.environment import Environment, prepare
from leasecheck.rundir.files import remove_leftovers
from leasecheck.targets.base import Lease, NodeState, Refused, ResourceState, Target, reads_resource
from leasecheck.targets.locks.lockbase import Held, LockLease
from leasecheck.targets.registry import TargetSpec, load, server_not_installed

#: the store to use instead of starting one (also what ``--target exec:`` children are given)
URL_VARIABLE = "LEASECHECK_URL"
#: stores that are a path in the test's own folder: a fresh one per test, no server
FILE_STORES = frozenset({"sqlite", "files"})


def given_url() -> str | None:
    """``LEASECHECK_URL`` if it is set (and not empty)."""
    return os.environ.get(URL_VARIABLE) or None


@dataclass
class Stores:
    """The stores of one test session: a server per store kind, started on first use as ``leasecheck run`` starts it.

    ``directory`` holds the servers' data and logs. Use it as a context
    manager, or call :meth:`close`: it stops every server it started.
    """

    directory: Path
    _servers: dict[str, Environment] = field(default_factory=dict)
    #: a server that would not start is not tried again by every test: each gets the same failure
    _failed: dict[str, EnvironmentFailure] = field(default_factory=dict)
    #: the stores handed out so far, in words (kept after :meth:`close`, for the session's last line)
    used: dict[str, str] = field(default_factory=dict)

    def url(self, target: str | type[Target], directory: Path) -> str:
        """The address of a store for ``target`` (``module:Class``, a registered name, or the class).

        ``LEASECHECK_URL`` if set; else, by ``target.store``, a fresh file in
        ``directory`` (sqlite, files) or this session's server of that kind.
        Raises :class:`EnvironmentFailure` when the server cannot start or the
        target names no store leasecheck can start (``store = None``).
        """
        given = given_url()
        if given is not None:
            self.used[URL_VARIABLE] = f"{URL_VARIABLE} ({given}; no server started)"
            return given
        cls = load(target) if isinstance(target, str) else target
        kind = cls.store
        if kind is None:
            raise EnvironmentFailure(
                f"{cls.__name__} has store = None (a store of its own): set LEASECHECK_URL to its address, "
                f"or store = \"sqlite\", \"postgres\" or \"redis\" in the class for leasecheck to start one")
        if kind in FILE_STORES:
            directory.mkdir(parents=True, exist_ok=True)
            self.used[kind] = f"a fresh {kind} store per test"
            return prepare(cls, directory, None).url
        if kind in self._failed:
            raise self._failed[kind]
        if (lacking := server_not_installed(kind)) is not None:
            raise EnvironmentFailure(lacking)
        if kind not in self._servers:
            home = self.directory / f"{kind}-server"
            home.mkdir(parents=True, exist_ok=True)
            try:
                self._servers[kind] = prepare(cls, home, None)
            except EnvironmentFailure as e:
                self._failed[kind] = e
                raise
            self.used[kind] = f"a {kind} server of their own ({self._servers[kind].url}, its log under {home})"
        return self._servers[kind].url

    def said(self) -> str | None:
        """What the tests ran against, in one line (None if no test asked for a store)."""
        return "; ".join(self.used.values()) or None

    @property
    def started(self) -> dict[str, str]:
        """The servers started so far: kind -> url."""
        return {kind: env.url for kind, env in self._servers.items()}

    def close(self) -> None:
        """Stop every server this session started (their logs stay in :attr:`directory`)."""
        for kind, env in list(self._servers.items()):
            env.stop()
            remove_leftovers(self.directory / f"{kind}-server")
        self._servers.clear()

    def __enter__(self) -> Stores:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@dataclass
class Tried:
    """What one method did when :func:`try_methods` called it: written, still to write, or it raised."""

    method: str
    #: the message of the ``NotWritten`` it raised: the method is still to be written
    not_written: str | None = None
    #: anything else it raised, or a TypeError for an answer that is no outcome of the protocol
    error: BaseException | None = None
    #: for a lock adapter's method that could only be tried on a lock acquire() granted: why it was not
    untried: str | None = None

    @property
    def ok(self) -> bool:
        return self.not_written is None and self.error is None and self.untried is None


class _Calls:
    """Each method's first failure (a later success does not hide it)."""

    def __init__(self, not_written: type[BaseException]) -> None:
        self.not_written = not_written
        self.tried: dict[str, Tried] = {}

    def call(self, method: str, fn: Callable[[], Any], answers: tuple[type, ...] | None = None, what: str = "") -> Any:
        tried = self.tried.setdefault(method, Tried(method))
        setup = self.tried.get("setup")
        try:
            answer = fn()
        except self.not_written as e:
            if tried.ok:
                tried.not_written = str(e)
            return None
        except Exception as e:
            if not tried.ok:
                pass
            elif method != "setup" and setup is not None and setup.error is not None:
                # the store was never made ready: what a method raises now says nothing of the method
                tried.untried = (f"{method} could not be tried: setup raised {type(setup.error).__name__} first "
                                 f"(see test_method_is_written[setup]); it then raised {type(e).__name__}: {e}")
            else:
                tried.error = e
            return None
        if answers is not None and not isinstance(answer, answers) and tried.ok:
            tried.error = TypeError(f"{method} returned {answer!r}: it must return {what}")
        return answer


#: the protocol's answers, by method (None stands for "ok")
_OUTCOME = (Refused, type(None))


def try_methods(spec: TargetSpec, not_written: type[BaseException]) -> dict[str, Tried]:
    """Call each method of ``spec``'s adapter once against its store, on a fresh node; what each did.

    A plain adapter's protocol methods are called in a lease's life (setup,
    add_node, try_claim, renew, effect, release, a second try_claim, commit,
    read, and read_resource where the adapter has it); a lock adapter's (:class:`LockLease`) library methods instead
    (setup, acquire, extend, unlock). Building the client (``spec.make()``)
    is not caught: an adapter that cannot even be built fails every test with it.
    """
    target = spec.make()
    calls = _Calls(not_written)
    node = f"new-target/{uuid.uuid4().hex[:12]}"
    try:
        if isinstance(target, LockLease):
            _try_lock(target, calls, node)
        else:
            _try_protocol(target, calls, node)
    finally:
        try:
            target.close()
        except Exception:
            pass
    return calls.tried


def _try_protocol(target: Target, calls: _Calls, node: str) -> None:
    claims = (Lease, Refused)
    calls.call("setup", target.setup)
    calls.call("add_node", lambda: target.add_node(node))
    first = calls.call("try_claim", lambda: target.try_claim(node, "w1"), claims, "a Lease or a Refused")
    lease = first if isinstance(first, Lease) else Lease(node, "w1", 1, "token")
    calls.call("renew", lambda: target.renew(lease), _OUTCOME, "None (ok) or a Refused")
    calls.call("effect", lambda: target.effect(lease, "payload"), _OUTCOME, "None (ok) or a Refused")
    calls.call("release", lambda: target.release(lease), _OUTCOME, "None (ok) or a Refused")
    second = calls.call("try_claim", lambda: target.try_claim(node, "w2"), claims, "a Lease or a Refused")
    lease = second if isinstance(second, Lease) else lease
    calls.call("commit", lambda: target.commit(lease, "result"), _OUTCOME, "None (ok) or a Refused")
    calls.call("read", lambda: target.read(node), (NodeState,), "a NodeState")
    if reads_resource(target):  # optional: an adapter without it is run without resource reads
        calls.call("read_resource", lambda: target.read_resource(node), (ResourceState,), "a ResourceState")


def _try_lock(target: LockLease, calls: _Calls, node: str) -> None:
    calls.call("setup", target.setup)
    held = calls.call("acquire", lambda: target.acquire(node, "w1"), (Held,),
                      "a Held (the lock of a node nobody holds must be granted)")
    if isinstance(held, Held):
        calls.call("extend", lambda: target.extend(held), (bool,), "True or False")
        calls.call("unlock", lambda: target.unlock(held))
        return
    # no lock to try them on: only whether they are written yet can be told
    stand_in = Held(None, "new-target-stand-in")
    for method, fn in (("extend", target.extend), ("unlock", target.unlock)):
        calls.call(method, partial(fn, stand_in))
        tried = calls.tried[method]
        if tried.not_written is None:
            tried.error = None
            tried.untried = f"{method} is written, but it can only be tried on a lock that acquire() granted: make acquire work first"
