"""The power-loss layer as a program: ``python -m leasecheck.servers.powerfs BACKING MOUNT CONTROL [--names MODE]``.

It mounts a FUSE file system (mfusepy, over libfuse 3) at MOUNT whose disk is the
folder BACKING, with the rules of :class:`~leasecheck.servers.powerfs_cache.PageCache`:
a write stays in the layer's memory until its file is fsynced, a name until its folder
is (``--names journaled``: until any fsync, as on ext4). It is named ``leasecheck-powerfs-PID`` (PID: this process) in ``/proc/mounts``, so
that ``leasecheck heal`` knows it for ours (:mod:`leasecheck.machine.mounts`).

CONTROL is a unix socket the layer listens on, one JSON line in, one JSON line out:
``{"cmd": "power-loss", "torn": false}`` (drop everything unsynced; the answer says what:
``bytes``, ``files``, ``entries``), ``{"cmd": "stats"}`` (what a power loss would drop
now), ``{"cmd": "sync"}`` (everything to the disk, as ``sync(1)``). A socket, not a file
to write commands in: the answer comes back on the same connection once the loss is
done, so the harness restarts the store only on what survived, and knows what was lost,
with no polling and no race with a half-written command file.

The mount is made with ``allow_other`` and ``default_permissions`` (a server running as
another user, Postgres, reads and writes it with the kernel checking the modes we keep),
and no attribute or name caching in the kernel (``attr_timeout=0``): after a power loss
the kernel must not remember a file the disk never had. The harness's side is
:class:`leasecheck.servers.powerfs_layer.PowerLayer`; this module is only ever run.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
from contextlib import suppress
from typing import Any

import mfusepy  # type: ignore[import-untyped, unused-ignore]  # no stubs: ctypes over libfuse

from leasecheck.machine.mounts import POWERFS_FSNAME
from leasecheck.servers.base import die_with_parent
from leasecheck.servers.powerfs_cache import NAMES, PageCache
from leasecheck.servers.powerfs_layer import bind_unix
from leasecheck.servers.powerfs_nodes import Node

log = logging.getLogger("leasecheck.powerfs")


class PowerFS(mfusepy.Operations):
    """FUSE's calls, each turned into one call of the cache under one lock."""

    use_ns = True

    def __init__(self, cache: PageCache) -> None:
        self.cache = cache
        self._mutex = threading.Lock()

    def _node(self, path: str | None, fh: int | None = None) -> Node:
        if fh:
            return self.cache.handle(fh)
        if path is None:
            raise mfusepy.FuseOSError(errno.EIO)
        return self.cache.lookup(path)

    def init_with_config(self, conn_info: Any, config_3: Any) -> None:
        if config_3 is not None:
            config_3.use_ino = 1  # our inode numbers: SQLite tells files apart by them
            config_3.hard_remove = 1  # a removed open file is removed (no .fuse_hidden rename in the store's folder)
            config_3.attr_timeout = config_3.entry_timeout = config_3.negative_timeout = 0.0

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self._mutex:
            return self._node(path, fh).attrs()

    def access(self, path: str, amode: int) -> int:
        with self._mutex:
            self._node(path)
        return 0

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        """Each entry with its inode number: with ``use_ino``, one of 0 would be skipped by readdir(3)."""
        with self._mutex:
            folder = self._node(path, fh)
            up = folder.parent or folder
            entries = [(".", folder), ("..", up), *folder.children.items()]
            return [(name, {"st_mode": node.mode, "st_ino": node.ino}, 0) for name, node in entries]

    def readlink(self, path: str) -> str:
        with self._mutex:
            return self._node(path).target

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.cache.disk.backing)
        return {key: getattr(st, key) for key in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                  "f_files", "f_ffree", "f_favail", "f_namemax")}

    # ---------------------------------------------------------------- names

    def _make(self, path: str, mode: int, target: str = "") -> Node:
        uid, gid, _ = mfusepy.fuse_get_context()
        return self.cache.make(path, mode, uid, gid, target)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mutex:
            return self.cache.open(self._make(path, stat.S_IFREG | stat.S_IMODE(mode)))

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            self._make(path, stat.S_IFDIR | stat.S_IMODE(mode))
        return 0

    def mknod(self, path: str, mode: int, dev: int) -> int:
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISREG(mode)):
            raise mfusepy.FuseOSError(errno.EPERM)  # no devices on a store's disk
        with self._mutex:
            self._make(path, mode)
        return 0

    def symlink(self, target: str, source: str) -> int:
        with self._mutex:
            self._make(target, stat.S_IFLNK | 0o777, source)
        return 0

    def link(self, target: str, source: str) -> int:
        raise mfusepy.FuseOSError(errno.EPERM)  # hard links are not modelled

    def unlink(self, path: str) -> int:
        with self._mutex:
            self.cache.remove(path, folder_expected=False)
        return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            self.cache.remove(path, folder_expected=True)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            self.cache.rename(old, new)
        return 0

    # ---------------------------------------------------------------- attributes

    def chmod(self, path: str, mode: int) -> int:
        with self._mutex:
            self.cache.chmod(self._node(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        with self._mutex:
            self.cache.chown(self._node(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self._mutex:
            now = time.time_ns()
            atime, mtime = times if times is not None else (now, now)
            self.cache.utimens(self._node(path), atime, mtime)
        return 0

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            self.cache.truncate(self._node(path, fh), length)
        return 0

    # ---------------------------------------------------------------- open files

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            return self.cache.open(self._node(path))

    def opendir(self, path: str) -> int:
        with self._mutex:
            return self.cache.open(self._node(path))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            return self.cache.read(self._node(path, fh), size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            return self.cache.write(self._node(path, fh), data, offset)

    def flush(self, path: str, fh: int) -> int:
        return 0  # a close writes nothing to the disk

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self.cache.fsync(self._node(path, fh))
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return self.fsync(path, datasync, fh)

    def release(self, path: str, fh: int) -> int:
        with self._mutex:
            self.cache.release(fh)
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        return self.release(path, fh)

    # ---------------------------------------------------------------- the control channel

    def command(self, request: dict[str, Any]) -> dict[str, Any]:
        """One command of the control channel, answered."""
        cmd = request.get("cmd")
        with self._mutex:
            if cmd == "power-loss":
                dropped = self.cache.power_loss(torn=bool(request.get("torn")))
                log.info("power loss: dropped %s", dropped)
                return {"ok": True, **dropped}
            if cmd == "stats":
                return {"ok": True, **self.cache.stats()}
            if cmd == "sync":
                self.cache.sync()
                return {"ok": True}
        return {"ok": False, "error": f"unknown command {cmd!r} (power-loss, stats, sync)"}


def serve_control(fs: PowerFS, listener: socket.socket) -> None:
    """Answer the control channel's connections, one at a time, for as long as the layer runs."""
    while True:
        conn, _ = listener.accept()
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                try:
                    answer = fs.command(json.loads(line))
                except Exception as e:  # a bad line, or the disk failed us: said, and the layer goes on
                    log.exception("control command %r failed", line)
                    answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                stream.write(json.dumps(answer).encode() + b"\n")
                stream.flush()


def main(argv: list[str]) -> None:
    names = "strict"
    if len(argv) == 5 and argv[3] == "--names" and argv[4] in NAMES:
        names, argv = argv[4], argv[:3]
    if len(argv) != 3:
        sys.exit(f"usage: python -m leasecheck.servers.powerfs BACKING MOUNT CONTROL [--names {'|'.join(NAMES)}]")
    backing, mount, control = argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s powerfs %(levelname)s %(message)s")
    logging.getLogger("mfusepy").setLevel(logging.WARNING)
    die_with_parent(signal.SIGTERM)  # the harness died: libfuse's handler ends the loop and unmounts
    fs = PowerFS(PageCache(backing, names=names))
    with suppress(FileNotFoundError):
        os.unlink(control)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bind_unix(listener, control)
    listener.listen(4)
    threading.Thread(target=serve_control, args=(fs, listener), daemon=True, name="powerfs-control").start()
    log.info("mounting %s over %s", mount, backing)
    mfusepy.FUSE(fs, mount, foreground=True, allow_other=True, default_permissions=True,
                 fsname=f"{POWERFS_FSNAME}-{os.getpid()}", subtype="powerfs")
    log.info("unmounted %s", mount)


if __name__ == "__main__":
    main(sys.argv[1:])
