"""The harness's side of the power-loss layer: one place that mounts it, talks to it and takes it off.

:class:`PowerLayer` starts ``python -m leasecheck.servers.powerfs BACKING MOUNT CONTROL``
(:mod:`leasecheck.servers.powerfs`) as a child, waits until MOUNT is a mount point and
its control socket answers, and puts a guard (:mod:`leasecheck.servers.guard`) over it:
should the harness be SIGKILLed, the guard kills what works inside the mount and takes
the mount off (and the layer, told by its parent-death signal, unmounts itself too).
``leasecheck heal`` takes off any layer left whose process is gone
(:func:`leasecheck.machine.mounts.unmount_orphans`).

A store server runs on it through :func:`on_powerfs`: the server's directory becomes
the mount, over a backing folder beside it (``NAME.disk``), and
:meth:`~leasecheck.servers.base.LocalServer.power_loss` cuts its power.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from leasecheck.errors import EnvironmentFailure
from leasecheck.machine.mounts import mounted, unmount
from leasecheck.servers.base import LocalServer, log_tail, popen, python_module, start_guard, stop_guard
from leasecheck.waiting import poll

#: the layer's program, run with ``python -m`` (named, not imported: see :data:`leasecheck.servers.base.GUARD_MODULE`)
POWERFS_MODULE = "leasecheck.servers.powerfs"
#: the kernel's FUSE device
FUSE_DEVICE = "/dev/fuse"
#: how long a control command may take (a power loss of a big store reloads its whole tree)
CONTROL_TIMEOUT_S = 60.0

S = TypeVar("S", bound=LocalServer)


def powerfs_problem() -> str | None:
    """What this machine lacks to mount the layer, in one line; None when nothing is missing."""
    if not os.path.exists(FUSE_DEVICE):
        return f"{FUSE_DEVICE} is missing (the kernel's FUSE module; in a container: --device /dev/fuse --cap-add SYS_ADMIN)"
    try:
        os.close(os.open(FUSE_DEVICE, os.O_RDWR | os.O_CLOEXEC))
    except OSError as e:
        return f"cannot open {FUSE_DEVICE}: {e.strerror} (mounting the layer needs root)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not on PATH (apt-get install fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is missing (apt-get install fuse3)"
    if os.geteuid() != 0 and not _user_allow_other():
        return "mounting as a user with allow_other needs user_allow_other in /etc/fuse.conf (or run as root)"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (pip install 'leasecheck[powerloss]')"
    return None


def _user_allow_other(conf: str = "/etc/fuse.conf") -> bool:
    """Does fusermount3 let a user mount with ``allow_other`` (a server running as another user must reach the mount)?"""
    try:
        with open(conf) as f:
            return any(line.split("#", 1)[0].strip() == "user_allow_other" for line in f)
    except OSError:
        return False


class PowerLayer:
    """A power-loss layer mounted at ``mount`` over ``backing``, its control socket ``control``, its log ``log_path``.

    ``mount()`` and ``unmount()`` may be called again; the backing folder stays (it is the disk).
    """

    def __init__(self, backing: str | os.PathLike[str], mount: str | os.PathLike[str],
                 control: str | os.PathLike[str] | None = None, log_path: str | os.PathLike[str] | None = None,
                 names: str = "strict") -> None:
        #: when a name becomes durable (:data:`leasecheck.servers.powerfs_cache.NAMES`): at its folder's fsync, or any
        self.names = names
        self.backing = Path(backing).absolute()
        self.mount_point = Path(mount).absolute()
        self.control = Path(control).absolute() if control is not None else self.backing.with_name(self.backing.name + ".sock")
        self.log_path = Path(log_path).absolute() if log_path is not None else self.backing.with_name(self.backing.name + ".log")
        self.process: subprocess.Popen[bytes] | None = None
        self._guard: subprocess.Popen[bytes] | None = None
        self._synced_once = False

    @classmethod
    def under(cls, folder: str | os.PathLike[str], names: str = "strict") -> PowerLayer:
        """A layer mounted at ``folder``, its disk, socket and log beside it (``NAME.disk``, ``NAME.powerfs.sock``, ...)."""
        folder = Path(folder).absolute()
        return cls(folder.with_name(folder.name + ".disk"), folder, folder.with_name(folder.name + ".powerfs.sock"),
                   folder.with_name(folder.name + ".powerfs.log"), names)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    @property
    def is_mounted(self) -> bool:
        return mounted(os.path.realpath(self.mount_point))

    def mount(self, timeout: float = 15.0) -> PowerLayer:
        """Mount the layer (if it is not) and wait until it serves; EnvironmentFailure, in one line, if it cannot."""
        if self.pid is not None:
            return self
        problem = powerfs_problem()
        if problem is not None:
            raise EnvironmentFailure(f"powerfs: {problem}")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount_point.mkdir(parents=True, exist_ok=True)
        if self.is_mounted:  # a dead layer of an earlier life of this folder
            unmount(os.path.realpath(self.mount_point), lazy=True)
        self.control.unlink(missing_ok=True)
        command = [*python_module(POWERFS_MODULE), str(self.backing), str(self.mount_point), str(self.control),
                   "--names", self.names]
        with open(self.log_path, "ab") as log:
            process = self.process = popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True)

        def serving() -> bool:
            if process.poll() is not None:
                raise EnvironmentFailure(f"powerfs exited with code {process.returncode} while mounting {self.mount_point};"
                                         f" log {self.log_path}:\n{log_tail(self.log_path)}")
            return os.path.ismount(self.mount_point) and self.control.exists()

        if not poll(serving, timeout, every=0.02):
            self.unmount()
            raise EnvironmentFailure(f"powerfs did not mount {self.mount_point} within {timeout:g} s; log {self.log_path}:\n"
                                     + log_tail(self.log_path))
        self._guard = start_guard(process.pid, self.mount_point, unmount=[os.path.realpath(self.mount_point)])
        return self

    def unmount(self, timeout: float = 10.0) -> None:
        """Take the layer off (what works in it must have stopped) and wait for its process to end."""
        stop_guard(self._guard)
        self._guard = None
        if self.is_mounted and unmount(os.path.realpath(self.mount_point)) is not None:
            unmount(os.path.realpath(self.mount_point), lazy=True)  # still busy: detached now, gone once let go
        process, self.process = self.process, None
        if process is not None:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def discard(self) -> None:
        """Take the layer off and delete its disk, socket and log (a throwaway server's)."""
        self.unmount()
        shutil.rmtree(self.backing, ignore_errors=True)
        self.control.unlink(missing_ok=True)
        self.log_path.unlink(missing_ok=True)

    # ---------------------------------------------------------------- the control channel

    def command(self, cmd: str, **args: Any) -> dict[str, Any]:
        """One command of the control channel (:mod:`leasecheck.servers.powerfs`), its answer; EnvironmentFailure if
        the layer does not answer or refuses."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(CONTROL_TIMEOUT_S)
                connect_unix(sock, str(self.control))
                with sock.makefile("rwb") as stream:
                    stream.write(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
                    stream.flush()
                    line = stream.readline()
        except OSError as e:
            raise EnvironmentFailure(f"powerfs at {self.mount_point}: {cmd}: {e}") from None
        answer: dict[str, Any] = json.loads(line) if line else {"ok": False, "error": "no answer"}
        if not answer.pop("ok", False):
            raise EnvironmentFailure(f"powerfs at {self.mount_point}: {cmd}: {answer.get('error')}")
        return answer

    def power_loss(self, torn: bool = False) -> dict[str, int]:
        """Drop every write never fsynced (with ``torn``, each file's latest unsynced page reaches the disk half
        written); what was dropped: ``bytes``, ``files``, ``entries`` (and ``torn``)."""
        return self.command("power-loss", torn=torn)

    def stats(self) -> dict[str, int]:
        """What a power loss would drop now."""
        return self.command("stats")

    def sync(self) -> None:
        """Everything to the disk, as ``sync(1)``."""
        self.command("sync")

    def sync_once(self) -> None:
        """The first time only: what a server's set-up wrote (a fresh cluster) is put on the disk before any fault."""
        if not self._synced_once:
            self.sync()
            self._synced_once = True

    def __enter__(self) -> PowerLayer:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()


def bind_unix(sock: socket.socket, path: str) -> None:
    """Bind a unix socket however deep ``path`` is (sun_path holds 107 bytes, and a run folder may lie deeper):
    through ``/proc/self/fd`` of its folder, opened."""
    _through_folder(sock.bind, path)


def connect_unix(sock: socket.socket, path: str) -> None:
    _through_folder(sock.connect, path)


def _through_folder(call: Callable[[str], None], path: str) -> None:
    if len(os.fsencode(path)) < 100:
        call(path)
        return
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        call(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
    finally:
        os.close(folder)


def on_powerfs(server: S, names: str = "strict") -> S:
    """Run ``server`` on a power-loss layer: its directory becomes the mount, its disk ``DIRECTORY.disk`` beside it.

    Give it before the server's first start; :meth:`~leasecheck.servers.base.LocalServer.power_loss` then cuts
    its power, and its ``cleanup`` takes the layer off. ``names``: see :data:`leasecheck.servers.powerfs_cache.NAMES`
    (Postgres never fsyncs the folder of a relation file it creates: under ``strict`` a power cut after a checkpoint
    loses the file its catalog names).
    """
    if server.pid is not None:
        raise ValueError(f"{server.kind} is running: put it on the layer before it starts")
    server.layer = PowerLayer.under(server.directory, names)
    return server
