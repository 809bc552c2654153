"""The power-loss layer's page cache: a file system in memory over a backing folder that is its disk.

Why: ``kill-store`` kills a server's processes, but the kernel keeps every byte they
wrote; only a lost page cache (a power cut) loses what a store acknowledged before it
fsynced. Jepsen and etcd test that with LazyFS; :class:`PageCache` is ours, with no FUSE
in it (:mod:`leasecheck.servers.powerfs` serves it), so every rule below is tested by
calling it.

The rules, the strict reading of POSIX's ``fsync``:

* a write lands in memory (dirty pages of :data:`~leasecheck.servers.powerfs_nodes.PAGE`
  bytes); ``fsync``/``fdatasync`` of a file writes its data, size and mode to the disk;
* a new, renamed or removed name is durable only once its folder is fsynced; a rename
  across two folders is made durable in one step by an fsync of the folder it went to
  (an fsync of only the folder it left drops the old name: the file is then durable with
  no name, and a power loss loses it, which POSIX allows);
* every read and listing sees everything written, as a page cache would;
* :meth:`PageCache.power_loss` drops all of it: what is left is the backing folder, which
  always holds exactly the durable state (and, hidden, the nodes fsynced with no name,
  removed then). With ``torn``, the latest unsynced page of each file reaches the disk
  half written first (its first half new, the rest as the disk had it).

With ``names="journaled"`` a journaling file system's commit is modelled instead (ext4,
xfs): any fsync makes every pending name change durable first, then its file's data. A
store that never fsyncs the folder of a file it creates (Postgres' new relation files)
loses the file under the strict rules, and keeps it under these.

Not modelled: hard links (refused, EPERM), extended attributes, a disk that reorders or
fails the writes it acknowledged.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator

from leasecheck.servers.powerfs_disk import Disk
from leasecheck.servers.powerfs_disk import fs_error as _error
from leasecheck.servers.powerfs_nodes import PAGE, Node

#: when a new, moved or removed name becomes durable: at its folder's fsync (POSIX's promise, no more), or at any
#: fsync (a journaling file system's commit)
NAMES = ("strict", "journaled")
#: ``renameat2``'s flags as FUSE passes them
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


class PageCache:
    """The layer's state: the tree now, the tree on the disk (``backing``), the open handles.

    Not thread-safe: the FUSE side calls it under one lock. ``sync_backing``: see :class:`Disk`; ``names``: when a
    name becomes durable, one of :data:`NAMES`.
    """

    def __init__(self, backing: str | os.PathLike[str], sync_backing: bool = True, names: str = "strict") -> None:
        if names not in NAMES:
            raise ValueError(f"names must be one of {', '.join(NAMES)}, not {names!r}")
        self.disk = Disk(backing, sync_backing)
        self.journaled = names == "journaled"
        #: a name was made, moved or removed since every pending name last reached the disk
        self._names_pending = False
        self._writes = 0
        self.handles: dict[int, Node] = {}
        self._next_handle = 1

    @property
    def root(self) -> Node:
        return self.disk.root

    # ------------------------------------------------------------------ the tree now

    def lookup(self, path: str) -> Node:
        node = self.root
        for part in (p for p in path.split("/") if p):
            if not node.is_dir:
                raise _error(errno.ENOTDIR, path)
            child = node.children.get(part)
            if child is None:
                raise _error(errno.ENOENT, path)
            node = child
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        folder = self.lookup(head or "/")
        if not folder.is_dir:
            raise _error(errno.ENOTDIR, path)
        return folder, name

    def listdir(self, path: str) -> list[str]:
        folder = self.lookup(path)
        if not folder.is_dir:
            raise _error(errno.ENOTDIR, path)
        return list(folder.children)

    def _link(self, folder: Node, name: str, node: Node) -> None:
        self._names_pending = True
        node.parent, node.name = folder, name
        folder.children[name] = node
        folder.mtime_ns = folder.ctime_ns = time.time_ns()

    def _unlink(self, node: Node) -> None:
        folder = node.parent
        assert folder is not None
        del folder.children[node.name]
        self._names_pending = True
        folder.mtime_ns = folder.ctime_ns = time.time_ns()
        node.parent = None
        if node.parent is None and node.opens == 0:
            self.disk.forget(node)

    def make(self, path: str, mode: int, uid: int, gid: int, target: str = "") -> Node:
        """A new file, folder, link (``target``), fifo or socket, in memory only."""
        folder, name = self._parent(path)
        if name in folder.children:
            raise _error(errno.EEXIST, path)
        node = self.disk.new(mode, uid, gid)
        node.target = target
        self._link(folder, name, node)
        return node

    def remove(self, path: str, folder_expected: bool) -> None:
        """``unlink`` or ``rmdir``."""
        node = self.lookup(path)
        if node is self.root:
            raise _error(errno.EBUSY, path)
        if node.is_dir != folder_expected:
            raise _error(errno.EISDIR if node.is_dir else errno.ENOTDIR, path)
        if node.children:
            raise _error(errno.ENOTEMPTY, path)
        self._unlink(node)

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        if flags & RENAME_EXCHANGE:
            raise _error(errno.EINVAL, new)
        node = self.lookup(old)
        if node is self.root:
            raise _error(errno.EBUSY, old)
        folder, name = self._parent(new)
        above: Node | None = folder
        while above is not None:  # a folder into itself, or below itself
            if above is node:
                raise _error(errno.EINVAL, new)
            above = above.parent
        there = folder.children.get(name)
        if there is node:
            return
        if there is not None:
            if flags & RENAME_NOREPLACE:
                raise _error(errno.EEXIST, new)
            if there.is_dir and not node.is_dir:
                raise _error(errno.EISDIR, new)
            if node.is_dir and not there.is_dir:
                raise _error(errno.ENOTDIR, new)
            if there.children:
                raise _error(errno.ENOTEMPTY, new)
            self._unlink(there)
        assert node.parent is not None
        del node.parent.children[node.name]
        self._link(folder, name, node)
        node.ctime_ns = time.time_ns()

    # ------------------------------------------------------------------ attributes

    def chmod(self, node: Node, mode: int) -> None:
        node.mode = stat.S_IFMT(node.mode) | stat.S_IMODE(mode)
        node.ctime_ns, node.meta_dirty = time.time_ns(), True

    def chown(self, node: Node, uid: int, gid: int) -> None:
        node.uid, node.gid = (node.uid if uid < 0 else uid), (node.gid if gid < 0 else gid)
        node.ctime_ns, node.meta_dirty = time.time_ns(), True

    def utimens(self, node: Node, atime_ns: int, mtime_ns: int) -> None:
        node.atime_ns, node.mtime_ns, node.ctime_ns, node.meta_dirty = atime_ns, mtime_ns, time.time_ns(), True

    # ------------------------------------------------------------------ open files and their data

    def open(self, node: Node) -> int:
        handle, self._next_handle = self._next_handle, self._next_handle + 1
        self.handles[handle] = node
        node.opens += 1
        return handle

    def handle(self, handle: int) -> Node:
        node = self.handles.get(handle)
        if node is None:  # a handle from before a power loss: that machine is gone
            raise _error(errno.EIO)
        return node

    def release(self, handle: int) -> None:
        node = self.handles.pop(handle, None)
        if node is not None:
            node.opens -= 1
            if node.parent is None and node.opens == 0:
                self.disk.forget(node)

    def read(self, node: Node, size: int, offset: int) -> bytes:
        end = min(offset + size, node.size)
        out = bytearray()
        pos = offset
        while pos < end:
            page, at = divmod(pos, PAGE)
            dirty = node.pages.get(page)
            if dirty is not None:
                n = min(PAGE - at, end - pos)
                out += dirty[at : at + n]
            else:  # a run of clean pages: one read of the disk
                last = page
                while (last + 1) * PAGE < end and last + 1 not in node.pages:
                    last += 1
                n = min((last + 1) * PAGE, end) - pos
                disk = os.pread(self.disk.fd(node), max(0, min(n, node.valid - pos)), pos) if pos < node.valid else b""
                out += disk + bytes(n - len(disk))
            pos += n
        node.atime_ns = time.time_ns()
        return bytes(out)

    def write(self, node: Node, data: bytes, offset: int) -> int:
        pos, done = offset, 0
        while done < len(data):
            page, at = divmod(pos, PAGE)
            n = min(PAGE - at, len(data) - done)
            buf = node.pages.get(page)
            if buf is None:
                buf = node.pages[page] = self.disk.page(node, page)
            buf[at : at + n] = data[done : done + n]
            self._writes += 1
            node.written[page] = self._writes
            pos, done = pos + n, done + n
        node.size = max(node.size, offset + len(data))
        node.mtime_ns = node.ctime_ns = time.time_ns()
        return len(data)

    def truncate(self, node: Node, length: int) -> None:
        if not node.is_file:
            raise _error(errno.EISDIR if node.is_dir else errno.EINVAL)
        if length < node.size:
            node.valid = min(node.valid, length)
            last, at = divmod(length, PAGE)
            for page in [p for p in node.pages if p > last or (p == last and at == 0)]:
                del node.pages[page], node.written[page]
            if at and last in node.pages:
                node.pages[last][at:] = bytes(PAGE - at)
        node.size = length
        node.mtime_ns = node.ctime_ns = time.time_ns()

    # ------------------------------------------------------------------ to the disk

    def fsync(self, node: Node) -> None:
        """``fsync``/``fdatasync`` of a file (its data, size and mode; not its name) or of a folder (its entries);
        journaled, every pending name first."""
        if self.journaled and self._names_pending:
            for folder in [n for n in self._tree() if n.is_dir]:
                self.disk.fsync(folder)
            self._names_pending = False
        self.disk.fsync(node)

    def sync(self) -> None:
        """Everything to the disk, as ``sync(1)`` does: every folder's entries, then every file's data."""
        for node in list(self._tree()):
            self.disk.fsync(node)

    def _tree(self, folder: Node | None = None) -> Iterator[Node]:
        folder = folder or self.root
        yield folder
        for child in list(folder.children.values()):
            if child.is_dir:
                yield from self._tree(child)
            else:
                yield child

    # ------------------------------------------------------------------ power

    def stats(self) -> dict[str, int]:
        """What a power loss now would drop: ``bytes`` (dirty pages, and files durable with no name), ``files`` (files
        that would lose data, a size or their very existence) and ``entries`` (names created, moved or removed since
        their folder's fsync)."""
        lost_bytes = lost_files = entries = 0
        for node in self._tree():
            if node.is_dir:
                entries += sum(1 for n in set(node.children) | set(node.dchildren) if node.children.get(n) is not node.dchildren.get(n))
                continue
            if not node.is_file:
                continue
            dirty = sum(max(0, min(PAGE, node.size - page * PAGE)) for page in node.pages)
            if self.disk.named(node):
                lost_bytes += dirty
                lost_files += node.unsynced
            else:
                lost_bytes += max(dirty, node.size)
                lost_files += 1
        return {"bytes": lost_bytes, "files": lost_files, "entries": entries}

    def power_loss(self, torn: bool = False) -> dict[str, int]:
        """The power is cut: everything not on the disk is gone, open handles too. Returns what was dropped
        (:meth:`stats`); with ``torn``, ``torn`` counts the pages that reached the disk half written."""
        dropped = self.stats()
        tears = sum(self.disk.tear(node) for node in self._tree() if node.is_file) if torn else 0
        for node in {*self._tree(), *self.handles.values()}:
            self.disk.close(node)
        self.handles.clear()
        self.disk.load()
        self._names_pending = False
        return {**dropped, "torn": tears} if torn else dropped
