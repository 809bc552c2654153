"""What the power-loss layer knows of one file, folder or link: its place now and its place on the disk.

The layer (:mod:`leasecheck.servers.powerfs_cache`) keeps two namespaces: the one every
program sees now (``parent``/``name``, ``children``), and the durable one, which is
exactly what the backing folder holds (``dparent``/``dname``, ``dchildren``). A node
fsynced while it had no durable name (a file in a folder never fsynced) is kept in the
backing folder's hidden area, :data:`HIDDEN`, under its inode number (``hidden``):
durable but unreachable, as an inode with no name is on a real disk, and removed by a
power loss as fsck would. A file's data is its backing file's first ``valid`` bytes,
overlaid by the dirty pages the programs wrote since its last fsync.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

#: the page size of the layer's cache: what a write dirties, and what a torn write tears in half
PAGE = 4096
#: the backing folder's hidden area (never listed through the mount): nodes fsynced with no durable name
HIDDEN = ".powerfs-hidden"


@dataclass(eq=False)
class Node:
    """One inode of the layer."""

    ino: int
    #: ``st_mode``, with the file-type bits
    mode: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    #: where it is now (None: removed, or the root)
    parent: Node | None = None
    name: str = ""
    #: where it is on the disk (None: nowhere, or ``hidden``, or the root)
    dparent: Node | None = None
    dname: str = ""
    #: durable in the hidden area only (no durable name)
    hidden: bool = False
    #: a folder's entries now, and on the disk
    children: dict[str, Node] = field(default_factory=dict)
    dchildren: dict[str, Node] = field(default_factory=dict)
    #: a file's size now
    size: int = 0
    #: how many leading bytes of the backing file are still this file's (a truncate below them cuts them)
    valid: int = 0
    #: the backing file's size
    dsize: int = 0
    #: dirty pages: page number -> the page as it is now (bytes past ``size`` are zeros)
    pages: dict[int, bytearray] = field(default_factory=dict)
    #: page number -> the write that last dirtied it (the latest is the page a torn write tears)
    written: dict[int, int] = field(default_factory=dict)
    #: mode, owner or times changed since the node last reached the disk
    meta_dirty: bool = False
    #: a link's target
    target: str = ""
    #: open handles on it (a removed file lives on while open)
    opens: int = 0
    #: the backing file, open for reading and writing (follows it through renames)
    fd: int | None = None

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def unsynced(self) -> bool:
        """Does this file hold data the disk has not got (dirty pages, or a size the disk does not have)?"""
        return bool(self.pages) or self.size != self.dsize or self.valid != self.dsize

    def attrs(self) -> dict[str, int]:
        """``stat`` as FUSE wants it (times in nanoseconds)."""
        if self.is_dir:
            size, links = PAGE, 2 + sum(1 for child in self.children.values() if child.is_dir)
        else:
            size, links = (self.size if self.is_file else len(os.fsencode(self.target))), int(self.parent is not None)
        return {"st_mode": self.mode, "st_ino": self.ino, "st_nlink": links, "st_uid": self.uid, "st_gid": self.gid,
                "st_size": size, "st_blocks": (size + 511) // 512, "st_blksize": PAGE,
                "st_atime": self.atime_ns, "st_mtime": self.mtime_ns, "st_ctime": self.ctime_ns}
