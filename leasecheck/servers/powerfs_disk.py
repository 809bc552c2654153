"""The power-loss layer's disk: the backing folder, which always holds exactly what is durable.

:class:`Disk` is the half of :class:`~leasecheck.servers.powerfs_cache.PageCache` that
touches the backing folder: it loads the tree from it (after a power loss too), writes a
file's data there at its fsync, and moves names there at a folder's fsync. A node fsynced
with no durable name goes to the hidden area (:data:`~leasecheck.servers.powerfs_nodes.HIDDEN`),
which a load removes: nothing on a rebooted disk reaches it.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time

from leasecheck.servers.powerfs_nodes import HIDDEN, PAGE, Node


def fs_error(code: int, path: str = "") -> OSError:
    return OSError(code, os.strerror(code), path)


class Disk:
    """The backing folder as the layer's disk; ``root`` is the tree the last :meth:`load` built."""

    def __init__(self, backing: str | os.PathLike[str], sync_backing: bool = True) -> None:
        self.backing = os.fspath(backing)
        #: fsync the backing files too when a program fsyncs (a store's fsync then costs what it costs on this disk)
        self.sync_backing = sync_backing
        self._ino = 1
        self.root = self.load()

    # ------------------------------------------------------------------ loading

    def new(self, mode: int, uid: int, gid: int) -> Node:
        """A node with a fresh inode number (never reused, across power losses too)."""
        self._ino += 1
        now = time.time_ns()
        return Node(self._ino, mode, uid, gid, now, now, now)

    def load(self) -> Node:
        """The tree as the disk has it, the hidden area removed (as fsck would: nothing reaches it)."""
        shutil.rmtree(os.path.join(self.backing, HIDDEN), ignore_errors=True)
        st = os.lstat(self.backing)
        self.root = Node(1, st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns)
        self._load_dir(self.root, self.backing)
        return self.root

    def _load_dir(self, folder: Node, path: str) -> None:
        for entry in os.scandir(path):
            if folder is self.root and entry.name == HIDDEN:
                continue
            st = entry.stat(follow_symlinks=False)
            node = self.new(st.st_mode, st.st_uid, st.st_gid)
            node.atime_ns, node.mtime_ns, node.ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
            node.parent, node.name, node.dparent, node.dname = folder, entry.name, folder, entry.name
            folder.children[entry.name] = folder.dchildren[entry.name] = node
            if node.is_dir:
                self._load_dir(node, entry.path)
            elif node.is_file:
                node.size = node.valid = node.dsize = st.st_size
            elif stat.S_ISLNK(st.st_mode):
                node.target = os.readlink(entry.path)

    # ------------------------------------------------------------------ where a node is

    def where(self, node: Node) -> str:
        """The node's path in the backing folder (it must have one)."""
        if node is self.root:
            return self.backing
        if node.hidden:
            return os.path.join(self.backing, HIDDEN, str(node.ino))
        assert node.dparent is not None, f"inode {node.ino} has no place on the disk"
        return os.path.join(self.where(node.dparent), node.dname)

    def has(self, node: Node) -> bool:
        """Has the node a place on the disk (a durable name, or the hidden area)?"""
        return node is self.root or node.hidden or node.dparent is not None

    def named(self, node: Node) -> bool:
        """Is the node reachable on the disk (a durable name all the way up)?"""
        while node is not self.root:
            if node.dparent is None:
                return False
            node = node.dparent
        return True

    def fd(self, node: Node) -> int:
        if node.fd is None:
            node.fd = os.open(self.where(node), os.O_RDWR | os.O_CLOEXEC)
        return node.fd

    def close(self, node: Node) -> None:
        if node.fd is not None:
            os.close(node.fd)
            node.fd = None

    def page(self, node: Node, page: int) -> bytearray:
        """A page of a file as the disk has it (zeros past what is still the file's)."""
        buf = bytearray(PAGE)
        start = page * PAGE
        if start < node.valid:
            data = os.pread(self.fd(node), min(PAGE, node.valid - start), start)
            buf[: len(data)] = data
        return buf

    # ------------------------------------------------------------------ changing the disk

    def _create(self, node: Node, path: str) -> None:
        """A node with no place on the disk gets one at ``path``: empty (its data is not synced yet)."""
        if node.is_dir:
            os.mkdir(path, 0o700)
        elif node.is_file:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            node.valid = node.dsize = 0
        elif stat.S_ISLNK(node.mode):
            os.symlink(node.target, path)
        else:
            os.mknod(path, node.mode)
        node.meta_dirty = True

    def _write_meta(self, node: Node) -> None:
        if not node.meta_dirty:
            return
        path = self.where(node)
        if not stat.S_ISLNK(node.mode):
            os.chmod(path, stat.S_IMODE(node.mode))
            os.utime(path, ns=(node.atime_ns, node.mtime_ns))
        os.lchown(path, node.uid, node.gid)
        node.meta_dirty = False

    def _hide(self, node: Node, path: str | None = None) -> None:
        """Give the node a place in the hidden area: its disk copy moved there (from ``path``), or a new empty one."""
        os.makedirs(os.path.join(self.backing, HIDDEN), exist_ok=True)
        node.hidden, node.dparent, node.dname = True, None, ""
        if path is None:
            self._create(node, self.where(node))
        else:
            os.rename(path, self.where(node))

    def forget(self, node: Node) -> None:
        """A node removed and closed: its hidden copy, if any, goes (nothing can reach it any more)."""
        self.close(node)
        if node.hidden:
            path = self.where(node)
            shutil.rmtree(path, ignore_errors=True) if node.is_dir else os.unlink(path)
            node.hidden = False

    def _unname(self, node: Node) -> None:
        """The node's durable name goes: its disk copy to the hidden area if it lives on, else deleted."""
        assert node.dparent is not None
        path = self.where(node)
        del node.dparent.dchildren[node.dname]
        if node.parent is not None or node.opens > 0:
            self._hide(node, path)
            return
        for child in list(node.dchildren.values()):  # a removed folder: what moved out of it must not go with it
            self._unname(child)
        node.dparent, node.dname = None, ""
        self.close(node)
        os.rmdir(path) if node.is_dir else os.unlink(path)

    def _name(self, node: Node, folder: Node, name: str) -> None:
        """``folder/name`` on the disk becomes ``node`` (the old node of that name already gone)."""
        path = os.path.join(self.where(folder), name)
        if self.has(node):
            source = self.where(node)
            if node.is_dir and path.startswith(source + os.sep):
                raise fs_error(errno.EIO, path)  # the folder it goes to lies below it on the disk: not modelled
            if node.dparent is not None:
                del node.dparent.dchildren[node.dname]
            os.rename(source, path)
        else:
            self._create(node, path)
        node.hidden, node.dparent, node.dname = False, folder, name
        folder.dchildren[name] = node
        self._write_meta(node)

    def _settle(self, folder: Node, name: str) -> None:
        """The entry ``name`` of ``folder`` on the disk as it is now."""
        now, before = folder.children.get(name), folder.dchildren.get(name)
        if now is before:
            return
        if before is not None:
            self._unname(before)
        if now is not None:
            self._name(now, folder, name)

    def fsync(self, node: Node) -> None:
        """``fsync``/``fdatasync`` of a file (its data, size and mode; not its name) or of a folder (its entries)."""
        if not self.has(node):
            self._hide(node)
        if node.is_dir:
            for name in sorted(set(node.children) | set(node.dchildren)):
                self._settle(node, name)
        elif node.is_file and node.unsynced:
            fd = self.fd(node)
            if node.valid < node.dsize:
                os.ftruncate(fd, node.valid)
            for page, buf in sorted(node.pages.items()):
                n = min(PAGE, node.size - page * PAGE)
                if n > 0:
                    os.pwrite(fd, buf[:n], page * PAGE)
            os.ftruncate(fd, node.size)
            node.pages.clear()
            node.written.clear()
            node.valid = node.dsize = node.size
            if self.sync_backing:
                os.fdatasync(fd)
        self._write_meta(node)

    def tear(self, node: Node) -> bool:
        """Write the first half of the file's latest dirty page to the disk (a torn write); False if it has none."""
        if not node.written or not self.named(node):
            return False
        page = max(node.written, key=node.written.__getitem__)
        n = min(PAGE // 2, node.size - page * PAGE)
        if n <= 0:
            return False
        os.pwrite(self.fd(node), node.pages[page][:n], page * PAGE)
        return True
