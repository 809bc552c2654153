"""Backends in any language: one child process per client, speaking JSON Lines (docs/contracts/exec-protocol.md).

``--target exec:COMMAND`` makes every worker start ``COMMAND`` (split like a
shell command, run in the current directory) with ``LEASECHECK_URL`` (the run's
store, possibly empty) and ``LEASECHECK_TTL_MS`` in its environment. The child
first prints its hello, ``{"leasecheck": 1, "name": "acme", "fenced": true}``;
then every operation is one request line on its stdin and one answer line on
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
to a temporary file when no folder is known; every message names it.

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

import ctypes
import datetime as dt
import functools
import itertools
import os
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar

import msgspec

from leasecheck.histories.format import EFFECT_FENCES, EffectFence
from leasecheck.histories.vocabulary import FAIL_REASONS, READ_STATUSES
from leasecheck.targets.base import Indeterminate, Lease, NodeState, Outcome, Refused, Target, TargetConfig, Unavailable

#: ``--target exec:COMMAND``
EXEC_PREFIX = "exec:"
#: what ``--exec-store`` may ask leasecheck to start for the child ("none": the child's own business)
EXEC_STORES = ("none", "sqlite", "postgres", "redis")
PROTOCOL_VERSION = 1
#: the log file, in the run's folder, that every child's stderr goes to
LOG_NAME = "exec.log"
#: how much of an offending line a message quotes
EXCERPT = 200
#: a stdout line longer than this is garbage, not an answer still on its way
MAX_LINE = 1 << 20
#: how long a closed child gets to exit by itself (EOF on its stdin) before it is killed
GRACE_S = 1.0

T = TypeVar("T")


class BadCommand(ValueError):
    """``exec:COMMAND`` that cannot start anything; ``str()`` says why in one line."""


class Garbled(Exception):
    """The child broke the protocol: ``what`` says how, ``line`` is what it printed (if anything)."""

    def __init__(self, what: str, line: bytes | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.line = line


@dataclass(frozen=True)
class Hello:
    """What a child says it is, on its first line."""

    name: str
    fenced: bool
    effect_fence: EffectFence = "lease"

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
        return cls(name, fenced, effect_fence)


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


#: loaded in the parent: the child calls it between fork and exec, where importing is unsafe
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
_PR_SET_PDEATHSIG = 1


def _child_setup() -> None:
    """In the child before exec: a process group of its own (killed as one), and death with its parent.

    The parent-death signal fires when the *thread* that started the child
    ends: workers start children from their main thread; the harness's producer
    may restart one from its producer thread, which ends only when production does.
    """
    os.setpgrp()
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (and the child, should it have left it), and reap it.

    Only while it is not reaped: until then its pid, the group's id, cannot be reused.
    """
    if proc.returncode is not None:
        return
    for kill in (os.killpg, os.kill):
        try:
            kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:  # stuck in the kernel: nothing more we can do
        pass


def _stamp(pid: int, text: bytes) -> bytes:
    """One line of the log: wall time, the child's pid, the text."""
    now = dt.datetime.now().isoformat(sep=" ", timespec="milliseconds")
    return f"{now} [{pid}] ".encode() + text + b"\n"


def note(log_path: Path, pid: int, text: str) -> None:
    """A line of leasecheck's own about a child, in the children's log."""
    try:
        with open(log_path, "ab") as log:
            log.write(_stamp(pid, f"leasecheck: {text}".encode()))
    except OSError:
        pass


def _copy_stderr(stream: IO[bytes], log: int, pid: int) -> None:
    """Copy the child's stderr to the log, line by line, until it closes (a daemon thread's body)."""
    try:
        for line in iter(lambda: stream.readline(64 * 1024), b""):
            os.write(log, _stamp(pid, line.rstrip(b"\r\n")))
    except OSError:
        pass
    finally:
        os.close(log)
        stream.close()


@dataclass(frozen=True)
class Deadline:
    """When an op (or a hello) must be done by, on the monotonic clock, and how long that was."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def poll_ms(self) -> int:
        """What ``poll`` waits, in ms: 0 once passed (a last look, never a negative "forever")."""
        return max(0, int(self.remaining() * 1000))


def _wait_readable(fd: int, timeout_s: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout_s * 1000))))


class Child:
    """One running child: its pipes, read and written with deadlines; killed as a process group."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        try:
            log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise Garbled(f"could not be started: cannot write its log {log_path}: {e.strerror or e}") from None
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                bufsize=0, preexec_fn=_child_setup,
            )
        except OSError as e:
            os.close(log)
            raise Garbled(f"could not be started: {argv[0]}: {e.strerror or e}") from None
        self.pid = self.proc.pid
        self._finalizer = weakref.finalize(self, _kill_group, self.proc)  # also at exit: never leave one behind
        assert self.proc.stdin is not None and self.proc.stdout is not None and self.proc.stderr is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._readable, self._writable = select.poll(), select.poll()
        self._readable.register(self._out, select.POLLIN)
        self._writable.register(self._in, select.POLLOUT)
        self._buffer = b""
        self._eof = False
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except OSError:  # an old kernel: an exit is then seen as EOF only
            self._pidfd = None
        os.write(log, _stamp(self.pid, f"leasecheck: started {shlex.join(argv)}".encode()))
        threading.Thread(target=_copy_stderr, args=(self.proc.stderr, log, self.pid), daemon=True,
                         name=f"exec-stderr-{self.pid}").start()

    def send(self, data: bytes, deadline: Deadline, what: str) -> None:
        """Write ``data`` (``what``: "request 4 (claim)") to the child's stdin before ``deadline``; raises Garbled."""
        view = memoryview(data)
        while view:
            if not self._writable.poll(deadline.poll_ms()) and deadline.remaining() <= 0:
                raise Garbled(f"hung: did not read {what} within {deadline.seconds:g} s")
            try:
                view = view[os.write(self._in, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise Garbled(f"{self._gone(deadline, 'closed its stdin')} before it read {what}") from None

    def receive(self, deadline: Deadline, what: str) -> bytes:
        """The next line of the child's stdout (``what`` it should be), without its newline, before ``deadline``.

        Polled even past the deadline: a worker resumed from a pause still sees
        the answer that arrived meanwhile. Raises Garbled.
        """
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1:]
                return line
            if len(self._buffer) > MAX_LINE:
                raise Garbled(f"printed a line longer than {MAX_LINE} bytes instead of its {what}", self._buffer)
            if self._eof:
                raise Garbled(f"{self._gone(deadline, 'closed its stdout')} instead of sending its {what}", self._buffer or None)
            if not self._readable.poll(deadline.poll_ms()) and deadline.remaining() <= 0:
                raise Garbled(f"hung: no {what} within {deadline.seconds:g} s", self._buffer or None)
            try:
                chunk = os.read(self._out, 64 * 1024)
            except BlockingIOError:
                continue
            self._buffer += chunk
            self._eof = not chunk

    def _gone(self, deadline: Deadline, otherwise: str) -> str:
        """How the child went away: its exit status once it has one (awaited up to ``deadline``), without reaping it."""
        if self._pidfd is not None:
            _wait_readable(self._pidfd, deadline.remaining())
        try:
            status = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            status = None
        if status is None:
            return otherwise
        if status.si_code == os.CLD_EXITED:
            return f"exited with code {status.si_status}"
        return f"was killed by {signal.Signals(status.si_status).name}"

    def stop(self, grace_s: float) -> None:
        """Close its stdin (a well-behaved child exits on EOF), give it ``grace_s`` to exit, then kill its group."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self._pidfd is not None:
            _wait_readable(self._pidfd, grace_s)
        self.kill()

    def kill(self) -> None:
        """Kill the child's process group, reap it, close our ends of its pipes; idempotent."""
        self._finalizer()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


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
