"""A host reached over SSH (``ssh://user@host:port``), with asyncssh, from one background event loop.

Why asyncssh, and why one loop: a fault acts on several hosts at once (a
partition adds a rule on each side) from the nemesis' threads, and a run keeps
its connections for hours. asyncssh multiplexes any number of commands over one
connection per host; its connections live on one event loop, on a daemon thread
of its own (:class:`_Loop`), and every call from any thread is handed to it and
waited for. A process that forks gets a loop of its own on first use (a loop's
thread does not survive a fork).

A command is sent as ``exec ARGV`` (quoted): the remote login shell *becomes*
the command, so it runs as it would through ``docker exec`` or ``ip netns
exec`` — no shell left behind whose command line a ``pgrep -f PATTERN`` would
match, no shell syntax interpreted.

Host keys: a host whose key is in no known_hosts file is refused (the harness
SIGKILLs processes and rewrites firewalls there, so it must know whom it talks
to), naming the key's fingerprint and both ways to accept it; the deployment's
``trust-host-key = true`` accepts any key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shlex
import threading
import warnings
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts.address import HostAddress, SshOptions
from leasecheck.hosts.protocol import TIMEOUT_S, WRITE_SCRIPT, HostFileError, HostUnreachable, Ran

with warnings.catch_warnings():  # asyncssh imports cryptography's DSA, which warns on import: not ours to show
    warnings.simplefilter("ignore")
    try:
        import asyncssh
    except ImportError:  # the `hosts` extra is not installed: said when an ssh host is first used
        asyncssh = None  # type: ignore[assignment]

T = TypeVar("T")
#: the default known_hosts file, used when the deployment names none and it exists
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


class _Loop:
    """An event loop on a daemon thread, owning every ssh connection of this process."""

    _current: _Loop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="leasecheck-ssh", daemon=True).start()

    @classmethod
    def get(cls) -> _Loop:
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid():
                cls._current = _Loop()
            return cls._current

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop and wait for it (``timeout``: a last resort, the coroutine times itself)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise HostUnreachable(f"no answer within {timeout:g} s") from None


@dataclass
class SshHost:
    """The host at ``address``, reached with ``options``; connects on first use, reconnects after a lost connection."""

    name: str
    address: HostAddress
    options: SshOptions
    _conn: Any = field(default=None, repr=False)
    _connecting: asyncio.Lock | None = field(default=None, repr=False)
    _loop: _Loop | None = field(default=None, repr=False)

    @property
    def user(self) -> str:
        return self.address.user or self.options.user

    @property
    def port(self) -> int:
        return self.address.port or self.options.port

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        if self._loop is None or self._loop.pid != os.getpid():
            self._loop, self._conn, self._connecting = _Loop.get(), None, None
        return self._loop.call(coro, timeout + self.options.connect_timeout_s + 5.0)

    # ------------------------------------------------------------ the connection

    def _known_hosts(self) -> Any:
        """What asyncssh checks the host's key against: None (any key), a file, or nothing (every key refused)."""
        if self.options.trust_host_key:
            return None
        if self.options.known_hosts is not None:
            path = self.options.known_hosts.expanduser()
            if not path.is_file():
                raise HostUnreachable(f"{self.name}: the known-hosts file {path} does not exist")
            return str(path)
        default = DEFAULT_KNOWN_HOSTS.expanduser()
        return str(default) if default.is_file() else []

    async def _connection(self) -> Any:
        if asyncssh is None:
            raise EnvironmentFailure("ssh hosts need asyncssh: pip install 'leasecheck[hosts]'")
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            known_hosts = self._known_hosts()
            try:
                self._conn = await asyncssh.connect(
                    self.address.target, self.port, username=self.user, known_hosts=known_hosts,
                    client_keys=[str(p.expanduser()) for p in self.options.identities] or (),
                    agent_path=() if self.options.agent else None, connect_timeout=self.options.connect_timeout_s,
                    keepalive_interval=15.0,
                )
            except asyncssh.HostKeyNotVerifiable:
                raise HostUnreachable(await self._unknown_key(known_hosts)) from None
            except asyncssh.PermissionDenied as e:
                raise HostUnreachable(f"{self.name}: {self.user}@{self.address.target}:{self.port} refused every key "
                                      f"offered ({e.reason}): give identity = [...] in [ssh], or load the key into the "
                                      f"agent") from None
            except (TimeoutError, OSError, asyncssh.Error) as e:
                raise HostUnreachable(f"{self.name}: cannot reach {self.address}: {_said(e)}") from None
            return self._conn

    async def _unknown_key(self, known_hosts: Any) -> str:
        where = known_hosts if isinstance(known_hosts, str) else f"any known_hosts file ({DEFAULT_KNOWN_HOSTS} is missing)"
        try:
            key = await asyncssh.get_server_host_key(self.address.target, self.port)
            shown = f"{key.get_algorithm()} {key.get_fingerprint()}" if key is not None else "its key"
        except (OSError, asyncssh.Error):
            shown = "its key"
        scan = f"ssh-keyscan -p {self.port} {self.address.target}"
        return (f"{self.name}: the host key of {self.address.target}:{self.port} ({shown}) is unknown: it is not in "
                f"{where}; add it ({scan} >> FILE, then known-hosts = FILE in [ssh]) or set trust-host-key = true")

    def _dropped(self) -> None:
        """Forget a connection that failed: the next command reconnects."""
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    # ------------------------------------------------------------ the interface

    def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = TIMEOUT_S) -> Ran:
        return self._call(self._run(tuple(argv), input, timeout, None), timeout)

    async def _run(self, argv: tuple[str, ...], input: bytes | None, timeout: float, stdout: str | None) -> Ran:
        conn = await self._connection()
        command = "exec " + shlex.join(argv)
        try:
            done = await asyncio.wait_for(
                conn.run(command, input=input, encoding=None, check=False, **({"stdout": stdout} if stdout else {})),
                timeout)
        except TimeoutError:
            raise HostUnreachable(f"{self.name}: {shlex.join(argv)} did not finish within {timeout:g} s") from None
        except (OSError, asyncssh.Error) as e:
            self._dropped()
            raise HostUnreachable(f"{self.name}: {shlex.join(argv)}: the connection failed: {_said(e)}") from None
        if done.returncode is None:
            self._dropped()
            raise HostUnreachable(f"{self.name}: {shlex.join(argv)}: the connection was lost before it exited")
        return Ran(argv, done.returncode, done.stdout or b"", done.stderr or b"")

    def read_file(self, path: str) -> bytes:
        ran = self.run(["cat", "--", path])
        if not ran.ok:
            raise HostFileError(f"{self.name}: cannot read {path}: {ran.err}")
        return ran.stdout

    def write_file(self, path: str, data: bytes) -> None:
        ran = self.run(["sh", "-c", WRITE_SCRIPT, "sh", path], input=data)
        if not ran.ok:
            raise HostFileError(f"{self.name}: cannot write {path}: {ran.err}")

    def fetch(self, remote_path: str, local_path: Path, timeout: float = 300.0) -> None:
        """Stream the file into ``local_path`` (a log may be large: it never sits in memory whole)."""
        ran = self._call(self._run(("cat", "--", remote_path), None, timeout, str(local_path)), timeout)
        if not ran.ok:
            raise HostFileError(f"{self.name}: cannot fetch {remote_path}: {ran.err}")

    def close(self) -> None:
        if self._conn is None or self._loop is None or self._loop.pid != os.getpid():
            return
        conn, self._conn = self._conn, None

        async def closing() -> None:
            conn.close()
            await conn.wait_closed()

        try:
            self._loop.call(closing(), 5.0)
        except HostUnreachable:
            pass


def _said(e: BaseException) -> str:
    """An asyncssh or socket error in a few words (asyncssh's own carry a reason, sockets a strerror)."""
    text = getattr(e, "reason", None) or getattr(e, "strerror", None) or str(e) or type(e).__name__
    return " ".join(str(text).split())
