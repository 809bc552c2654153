"""Backends in any language: one child process per client, speaking JSON Lines (docs/contracts/exec-protocol.md).

``--target exec:COMMAND`` makes every worker start ``COMMAND`` (split like a
shell command, run in the current directory) with ``LEASECHECK_URL`` (the run's
store, possibly empty) and ``LEASECHECK_TTL_MS`` in its environment. The child
first prints its hello, ``{"leasecheck": 1, "name": "acme", "fenced": true}``
(with ``"resource": true`` if it answers ``read_resource``, the read of a node's
protected resource: otherwise that request is never sent); then every operation is one request line on its stdin and one answer line on
its stdout, one at a time, each request with a larger ``id``::

    {"id": 7, "op": "claim", "node": "run-1/node-3", "owner": "w2", "ttl_ms": 1000}
    {"id": 7, "ok": true, "epoch": 42}

Why one child per :class:`ExecTarget` (so per worker process): a pause or a kill
of a worker must hit its client alone, exactly as for a Python backend; the
child dies with the worker (its parent-death signal, and EOF on its stdin).

A child is trusted with nothing. One that exits, hangs past the op's deadline
(``TargetConfig.timeout_s``, which also bounds its hello), prints a line that is
not JSON, answers another id, or answers with the wrong shape makes that op
:class:`~leasecheck.targets.base.Indeterminate` (recorded ``info``) with a
one-line message — what was wrong, the child's pid, the first 200 characters of
the line — and is killed with its process group. The worker then closes this
client and makes a new one (``Client.reconnect``): a fresh child, under a new
process number. A client used again after that (the harness's producer retries
``add_nodes``) starts a fresh child itself. Stdout is read with a deadline
(``poll`` on the pipe, in the caller's thread: a worker resumed from a pause
past the deadline still sees an answer that arrived meanwhile); stderr is
copied, line by line and prefixed with the child's pid, to ``exec.log`` in the
run's folder (``TargetConfig.options["log_dir"]``, which the runner fills), or
to a temporary file when no folder is known; every message names it. Running
the child itself (its process group, its deadlines, its log) is
:mod:`leasecheck.targets.exec_child`'s; this module is the protocol.

What the class declares before any child runs, and what the hello settles:
``name`` is ``"exec"``; ``store`` is what ``--exec-store`` asks leasecheck to
start (:meth:`ExecTarget.with_store`), ``None`` by default (the child talks to
whatever ``--url`` names, or to nothing); ``fenced`` is True, as in the contract's
example hello, but is only a default: each instance's :attr:`ExecTarget.hello`
holds what its child said. The checker reads fencing from the history itself
(``epoch: null`` on a claim), and the runner takes ``effect_fence`` from the
producer's hello (an optional ``"effect_fence": "lease" | "token"`` key), which
it has read before it writes the history's header.
"""

from __future__ import annotations

import functools
import itertools
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import msgspec

from leasecheck.errors import BadInput
from leasecheck.histories.format import EFFECT_FENCES, EffectFence
from leasecheck.histories.vocabulary import FAIL_REASONS, READ_STATUSES
from leasecheck.targets.base import (
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
from leasecheck.targets.exec_child import Child, Deadline, Garbled, note

#: ``--target exec:COMMAND``
EXEC_PREFIX = "exec:"
#: what ``--exec-store`` may ask leasecheck to start for the child ("none": the child's own business)
EXEC_STORES = ("none", "sqlite", "postgres", "redis")
PROTOCOL_VERSION = 1
#: the log file, in the run's folder, that every child's stderr goes to
LOG_NAME = "exec.log"
#: how much of an offending line a message quotes
EXCERPT = 200
#: how long a closed child gets to exit by itself (EOF on its stdin) before it is killed
GRACE_S = 1.0

T = TypeVar("T")


class BadCommand(BadInput):
    """``exec:COMMAND`` that cannot start anything; ``str()`` says why in one line."""


@dataclass(frozen=True)
class Hello:
    """What a child says it is, on its first line."""

    name: str
    fenced: bool
    effect_fence: EffectFence = "lease"
    #: does the child answer ``read_resource``? Only then is the request sent (a child written before it never sees one)
    resource: bool = False

    @classmethod
    def parse(cls, line: bytes) -> Hello:
        """The hello ``line`` says; raises Garbled naming what is wrong with it."""

        def bad(why: str) -> Garbled:
            return Garbled(f'printed a bad hello ({why}; expected {{"leasecheck": 1, "name": "...", "fenced": true|false}})', line)

        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError:
            raise bad("not JSON") from None
        if not isinstance(obj, dict) or "leasecheck" not in obj:
            raise bad('no "leasecheck" key')
        if obj["leasecheck"] != PROTOCOL_VERSION or type(obj["leasecheck"]) is not int:
            raise bad(f"protocol version {obj['leasecheck']!r}, this leasecheck speaks {PROTOCOL_VERSION}")
        name, fenced, effect_fence = obj.get("name"), obj.get("fenced"), obj.get("effect_fence", "lease")
        if not isinstance(name, str) or not isinstance(fenced, bool):
            raise bad('no string "name" or no boolean "fenced"')
        if effect_fence not in EFFECT_FENCES:
            raise bad(f'"effect_fence" {effect_fence!r} is neither "lease" nor "token"')
        resource = obj.get("resource", False)
        if not isinstance(resource, bool):
            raise bad(f'"resource" {resource!r} is not a boolean')
        return cls(name, fenced, effect_fence, resource)


def parse_command(command: str) -> list[str]:
    """``COMMAND`` split like a shell would; raises BadCommand if it names no program we can run."""
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise BadCommand(f"cannot split the command {command!r}: {e}") from None
    if not argv:
        raise BadCommand("exec: needs a command, e.g. exec:./my-lease-child or 'exec:node child.js'")
    if shutil.which(argv[0]) is None:
        raise BadCommand(f"{argv[0]}: no such executable (not on PATH, or not executable from {os.getcwd()})")
    return argv


def excerpt(line: bytes) -> str:
    """The first 200 characters of what a child printed, quoted (for one-line messages)."""
    return repr(line.decode("utf-8", "replace")[:EXCERPT])


def _lease_fields(lease: Lease) -> dict[str, Any]:
    """What every op after a claim carries: the lease's node, epoch and token (null where unused)."""
    return {"node": lease.node, "epoch": lease.epoch, "token": lease.token}


def _optional(answer: dict[str, Any], key: str, kind: type, what: str) -> Any:
    value = answer.get(key)
    if value is not None and (type(value) is not kind):
        raise Garbled(f"{key} {value!r} is not {what} or null")
    return value


def _ok(answer: dict[str, Any]) -> None:
    return None


def _resource(answer: dict[str, Any]) -> ResourceState:
    """A ``read_resource`` answer: ``fence`` (an integer or null) and ``accepted``, each entry as an effect wrote it."""
    if "fence" not in answer or not isinstance(answer.get("accepted"), list):
        raise Garbled('a read_resource answer needs "fence" (null for none) and an "accepted" list')
    fence = _optional(answer, "fence", int, "an integer")
    entries = []
    for entry in answer["accepted"]:
        if not isinstance(entry, dict) or "epoch" not in entry or type(entry.get("payload")) is not str:
            raise Garbled(f'accepted entry {entry!r} needs "epoch" (null when unfenced) and a string "payload"')
        epoch, token = _optional(entry, "epoch", int, "an integer"), _optional(entry, "token", str, "a string")
        if epoch is None and token is None:
            raise Garbled(f"accepted entry {entry!r} has neither an epoch nor a token: no lease wrote it")
        entries.append(Accepted(epoch, entry["payload"], token))
    return ResourceState(tuple(entries), fence)


class ExecTarget(Target):
    """A backend in any language: a child process speaking JSON Lines (--target exec:COMMAND)."""

    name = "exec"
    fenced = True
    store: ClassVar[str | None] = None
    #: the command this class runs, as given after ``exec:``; set by :func:`exec_target`
    command: ClassVar[str] = ""
    argv: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: TargetConfig) -> None:
        super().__init__(config)
        if not self.argv:
            raise BadCommand("ExecTarget is bound to a command by exec_target(); use --target exec:COMMAND")
        log_dir = config.options.get("log_dir")
        if log_dir:
            self.log_path = Path(log_dir) / LOG_NAME
        else:
            fd, name = tempfile.mkstemp(prefix="leasecheck-exec-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        #: the op deadline too: a child that gives up on its store before it, answering "indeterminate",
        #: says more than one the harness has to kill for hanging
        self.env = {**os.environ, "LEASECHECK_URL": config.url, "LEASECHECK_TTL_MS": str(config.ttl_ms),
                    "LEASECHECK_TIMEOUT_MS": str(round(config.timeout_s * 1000))}
        self._ids = itertools.count(1)
        self._child: Child | None = None
        #: what the child said it is (None until one has said hello)
        self.hello: Hello | None = None
        #: why starting the first child failed: the first op says so (a constructor that raised would
        #: kill the worker instead of making one op ``info``)
        self._failed_start: str | None = None
        try:
            self._child = self._start()
        except Indeterminate as e:
            self._failed_start = str(e)

    @classmethod
    def with_store(cls, store: str | None) -> type[ExecTarget]:
        """This command with ``store`` started for it by leasecheck (``--exec-store``)."""
        return exec_target(cls.command, store)

    # ------------------------------------------------------------ the child

    def _start(self) -> Child:
        """A fresh child that has said hello; raises Indeterminate (after killing it) if it does not."""
        try:
            child = Child(list(self.argv), self.env, self.log_path)
        except Garbled as e:
            raise Indeterminate(f"exec child {e.what} (log {self.log_path})") from None
        try:
            hello = Hello.parse(child.receive(Deadline.after(self.config.timeout_s), "hello"))
        except Garbled as e:
            raise self._discard(child, e) from None
        if self.hello is not None and hello != self.hello:
            raise self._discard(child, Garbled(f"changed its hello from {self.hello} to {hello}"))
        self.hello = hello
        return child

    def _discard(self, child: Child, e: Garbled) -> Indeterminate:
        """Kill a child that broke the protocol; the op's exception, with the one-line story (also logged)."""
        message = f"exec child pid {child.pid} {e.what}"
        if e.line is not None:
            message += f": {excerpt(e.line)}"
        note(self.log_path, child.pid, message)
        child.kill()
        if self._child is child:
            self._child = None
        return Indeterminate(f"{message} (killed; its stderr is in {self.log_path})")

    def _call(self, op: str, fields: dict[str, Any], parse: Callable[[dict[str, Any]], T], refusable: bool = True) -> T | Refused:
        """One request and its answer: ``parse(answer)`` when ok, a Refused, or one of the op exceptions."""
        if self._child is None:
            if self._failed_start is not None:
                failed, self._failed_start = self._failed_start, None
                raise Indeterminate(failed)
            self._child = self._start()
        child = self._child
        rid = next(self._ids)
        request = f"request {rid} ({op})"
        deadline = Deadline.after(self.config.timeout_s)
        try:
            child.send(msgspec.json.encode({"id": rid, "op": op, **fields}) + b"\n", deadline, request)
            line = child.receive(deadline, f"answer to {request}")
        except Garbled as e:
            raise self._discard(child, e) from None
        try:
            answer = self._answer(line, rid, op, child.pid, refusable)
            return answer if isinstance(answer, Refused) else parse(answer)
        except Garbled as e:
            raise self._discard(child, Garbled(f"gave a bad answer to {request} ({e.what})", line)) from None

    @staticmethod
    def _answer(line: bytes, rid: int, op: str, pid: int, refusable: bool) -> dict[str, Any] | Refused:
        """Check an answer's envelope: the ok object, a Refused, or Unavailable / Indeterminate / Garbled raised."""
        try:
            answer = msgspec.json.decode(line)
        except msgspec.DecodeError:
            raise Garbled("not JSON") from None
        if not isinstance(answer, dict):
            raise Garbled("not a JSON object")
        if answer.get("id") != rid or type(answer.get("id")) is not int:
            raise Garbled(f"id {answer.get('id')!r} instead of {rid}")
        message = answer.get("message")
        detail = f"exec child pid {pid}: " + (message if isinstance(message, str) and message else "no message")
        if "error" in answer:
            if answer["error"] == "unavailable":
                raise Unavailable(detail)
            if answer["error"] == "indeterminate":
                raise Indeterminate(detail)
            raise Garbled(f'error {answer["error"]!r} is neither "unavailable" nor "indeterminate"')
        ok = answer.get("ok")
        if ok is True:
            return answer
        if ok is not False:
            raise Garbled('neither "ok": true / false nor "error"')
        reason = answer.get("reason")
        if not refusable:
            raise Garbled(f"refused with {reason!r}, but {op} only answers ok or an error")
        if reason not in FAIL_REASONS:
            raise Garbled(f"refusal reason {reason!r} is not one of {', '.join(sorted(FAIL_REASONS))}")
        if reason == "unavailable":
            raise Unavailable(detail)
        return Refused(reason, message if isinstance(message, str) else "")

    def _outcome(self, op: str, fields: dict[str, Any]) -> Outcome:
        return self._call(op, fields, _ok)

    # ------------------------------------------------------------ the protocol

    def setup(self) -> None:
        self._call("setup", {}, _ok, refusable=False)

    def add_node(self, node: str) -> None:
        self.add_nodes([node])

    def add_nodes(self, nodes: list[str]) -> None:
        self._call("add_nodes", {"nodes": nodes}, _ok, refusable=False)

    def try_claim(self, node: str, owner: str) -> Lease | Refused:
        def granted(answer: dict[str, Any]) -> Lease:
            if "epoch" not in answer:
                raise Garbled('a granted claim needs "epoch" (null for an unfenced lease)')
            epoch = _optional(answer, "epoch", int, "an integer")
            token = _optional(answer, "token", str, "a string")
            if epoch is None and token is None:
                raise Garbled("a granted claim with neither an epoch nor a token: no later op could name the lease")
            return Lease(node, owner, epoch, token)

        return self._call("claim", {"node": node, "owner": owner, "ttl_ms": self.config.ttl_ms}, granted)

    def renew(self, lease: Lease) -> Outcome:
        return self._outcome("renew", _lease_fields(lease))

    def effect(self, lease: Lease, payload: str) -> Outcome:
        return self._outcome("effect", {**_lease_fields(lease), "payload": payload})

    def commit(self, lease: Lease, result: str) -> Outcome:
        return self._outcome("commit", {**_lease_fields(lease), "result": result})

    def release(self, lease: Lease) -> Outcome:
        return self._outcome("release", _lease_fields(lease))

    def read(self, node: str) -> NodeState:
        def record(answer: dict[str, Any]) -> NodeState:
            missing = [key for key in ("status", "epoch", "owner", "result") if key not in answer]
            if missing:
                raise Garbled(f"a read needs {', '.join(missing)} (null for none)")
            if answer["status"] not in READ_STATUSES:
                raise Garbled(f"status {answer['status']!r} is not one of {', '.join(sorted(READ_STATUSES))}")
            return NodeState(
                answer["status"], _optional(answer, "epoch", int, "an integer"), _optional(answer, "owner", str, "a string"),
                _optional(answer, "result", str, "a string"), _optional(answer, "token", str, "a string"),
            )

        state = self._call("read", {"node": node}, record, refusable=False)
        assert not isinstance(state, Refused)  # refusable=False
        return state

    @property
    def resource_readable(self) -> bool:
        """Did the child declare ``"resource": true`` in its hello (:func:`~leasecheck.targets.base.reads_resource`)?"""
        return self.hello is not None and self.hello.resource

    def read_resource(self, node: str) -> ResourceState:
        if not self.resource_readable:
            raise NotImplementedError(f"exec child {self.command!r} did not declare \"resource\": true in its hello")
        state = self._call("read_resource", {"node": node}, _resource, refusable=False)
        assert not isinstance(state, Refused)  # refusable=False
        return state

    def close(self) -> None:
        if self._child is not None:
            self._child.stop(GRACE_S)
            self._child = None


@functools.cache
def exec_target(command: str, store: str | None = None) -> type[ExecTarget]:
    """The backend class for ``exec:COMMAND`` (one class per command and store); raises BadCommand.

    A class, not an instance, because the registry hands out classes; the
    ``TargetSpec`` that workers receive keeps the string ``exec:COMMAND``, so it
    stays picklable and every worker binds the same command again.
    """
    argv = parse_command(command)
    if store not in (None, *EXEC_STORES[1:]):
        raise BadCommand(f"--exec-store {store!r}: expected one of {', '.join(EXEC_STORES)}")

    class Bound(ExecTarget):
        __doc__ = ExecTarget.__doc__

    Bound.command, Bound.argv, Bound.store = command, tuple(argv), store
    Bound.__qualname__ = Bound.__name__ = f"ExecTarget[{command}]"
    return Bound
