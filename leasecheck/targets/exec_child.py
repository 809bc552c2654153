"""One child process of an ``exec:`` target: started, read, written and killed, never trusted.

Why apart from the protocol (:mod:`leasecheck.targets.exec_target`): what it
takes to run a child safely is its own concern, whatever the child says. Each
child gets a process group of its own (killed as one) and dies with its
parent; its stdout is read and its stdin written with deadlines (``poll`` on
the pipes, in the caller's thread); its stderr is copied, line by line and
prefixed with its pid, to the children's log. A child that exits, hangs or
floods its pipe raises :class:`Garbled`, which the protocol turns into an
``info`` op.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import os
import select
import shlex
import signal
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: a stdout line longer than this is garbage, not an answer still on its way
MAX_LINE = 1 << 20


class Garbled(Exception):
    """The child broke the protocol: ``what`` says how, ``line`` is what it printed (if anything)."""

    def __init__(self, what: str, line: bytes | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.line = line


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
