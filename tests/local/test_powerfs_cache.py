"""The power-loss layer's rules, called directly (no FUSE): what an fsync makes durable and a power loss drops.

The backing folder is the disk: after each power loss the test reads it as a rebooted machine would, and the
cache's own view after the loss must be exactly that. A property test drives random programs of writes, renames,
removals and fsyncs against a model of what must survive.
"""

from __future__ import annotations

import stat
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from leasecheck.servers.powerfs_cache import PageCache
from leasecheck.servers.powerfs_nodes import HIDDEN, PAGE

FILE, DIR = stat.S_IFREG | 0o644, stat.S_IFDIR | 0o755


def write(cache: PageCache, path: str, data: bytes, offset: int = 0) -> None:
    try:
        node = cache.lookup(path)
    except FileNotFoundError:
        node = cache.make(path, FILE, 0, 0)
    cache.write(node, data, offset)


def read(cache: PageCache, path: str) -> bytes:
    node = cache.lookup(path)
    return cache.read(node, node.size + 10, 0)


def disk(root: Path) -> dict[str, bytes | None]:
    """The backing folder as a rebooted machine reads it (the hidden area is no file of anybody's)."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] != HIDDEN:
            found[rel] = path.read_bytes() if path.is_file() else None
    return found


def test_a_write_is_read_back_at_once_and_lost_at_a_power_loss_unless_fsynced(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, sync_backing=False)
    write(cache, "/a", b"x" * 10000)
    cache.fsync(cache.root)  # the name, not the data
    cache.fsync(cache.lookup("/a"))
    write(cache, "/a", b"y" * 100, 5000)
    write(cache, "/a", b"z" * 10, 10000)
    assert read(cache, "/a") == b"x" * 5000 + b"y" * 100 + b"x" * 4900 + b"z" * 10
    assert cache.stats() == {"bytes": PAGE + (10010 - 2 * PAGE), "files": 1, "entries": 0}
    dropped = cache.power_loss()
    assert dropped == {"bytes": PAGE + (10010 - 2 * PAGE), "files": 1, "entries": 0}
    assert read(cache, "/a") == b"x" * 10000 == (tmp_path / "a").read_bytes()


def test_a_name_is_durable_only_once_its_folder_is_fsynced(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, sync_backing=False)
    cache.make("/d", DIR, 0, 0)
    write(cache, "/d/f", b"data")
    cache.fsync(cache.lookup("/d/f"))
    cache.fsync(cache.lookup("/d"))  # d's entries, in a folder nobody reaches: d itself is no name on the disk yet
    assert cache.stats()["entries"] == 1
    cache.power_loss()
    assert disk(tmp_path) == {} and cache.listdir("/") == []
    cache.make("/d", DIR, 0, 0)
    cache.fsync(cache.root)
    write(cache, "/d/f", b"data")
    cache.fsync(cache.lookup("/d/f"))
    cache.power_loss()
    assert disk(tmp_path) == {"d": None}
    write(cache, "/d/f", b"data")
    cache.fsync(cache.lookup("/d/f"))
    cache.fsync(cache.lookup("/d"))
    cache.power_loss()
    assert disk(tmp_path) == {"d": None, "d/f": b"data"} and read(cache, "/d/f") == b"data"


def test_renames_and_removals_wait_for_their_folder(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, sync_backing=False)
    write(cache, "/tmp", b"new")
    write(cache, "/old", b"gone")
    cache.sync()
    cache.rename("/tmp", "/final")
    cache.remove("/old", folder_expected=False)
    cache.power_loss()
    assert disk(tmp_path) == {"old": b"gone", "tmp": b"new"}
    cache.rename("/tmp", "/final")
    cache.remove("/old", folder_expected=False)
    cache.fsync(cache.root)
    cache.power_loss()
    assert disk(tmp_path) == {"final": b"new"}


def test_a_rename_into_another_folder_is_durable_with_that_folder(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, sync_backing=False)
    cache.make("/dir", DIR, 0, 0)
    write(cache, "/temp", b"aof")
    cache.sync()
    cache.rename("/temp", "/dir/base")
    cache.fsync(cache.lookup("/dir"))  # the folder it went to: the whole rename
    cache.power_loss()
    assert disk(tmp_path) == {"dir": None, "dir/base": b"aof"}


def test_journaled_any_fsync_makes_every_pending_name_durable(tmp_path: Path) -> None:
    """As a journaling file system's commit: the file's own fsync keeps it, in its new folder, and the other names
    changed before; not other files' data."""
    cache = PageCache(tmp_path, sync_backing=False, names="journaled")
    cache.make("/base", DIR, 0, 0)
    write(cache, "/base/16384", b"relation")
    write(cache, "/other", b"unsynced")
    cache.fsync(cache.lookup("/base/16384"))
    cache.power_loss()
    assert disk(tmp_path) == {"base": None, "base/16384": b"relation", "other": b""}


def test_a_torn_page_is_half_new_half_old(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, sync_backing=False)
    write(cache, "/f", b"o" * (2 * PAGE))
    cache.sync()
    write(cache, "/f", b"n" * (2 * PAGE))  # page 1 is the latest written
    dropped = cache.power_loss(torn=True)
    assert dropped["torn"] == 1
    assert (tmp_path / "f").read_bytes() == b"o" * PAGE + b"n" * (PAGE // 2) + b"o" * (PAGE // 2)


def test_a_truncate_below_the_disk_then_a_write_reads_zeros_between(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, sync_backing=False)
    write(cache, "/f", b"x" * 9000)
    cache.sync()
    node = cache.lookup("/f")
    cache.truncate(node, 100)
    cache.write(node, b"y", 8000)
    expected = b"x" * 100 + bytes(7900) + b"y"
    assert read(cache, "/f") == expected
    cache.fsync(node)
    cache.power_loss()
    assert (tmp_path / "f").read_bytes() == expected


def test_an_open_removed_file_lives_until_closed(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, sync_backing=False)
    write(cache, "/f", b"abc")
    handle = cache.open(cache.lookup("/f"))
    cache.remove("/f", folder_expected=False)
    cache.fsync(cache.handle(handle))  # durable, with no name: hidden
    assert cache.read(cache.handle(handle), 10, 0) == b"abc"
    cache.release(handle)
    assert not (tmp_path / HIDDEN).exists() or not any((tmp_path / HIDDEN).iterdir())


# ------------------------------------------------------------------------- random programs against a model

NAMES = ("a", "b", "d/a", "d/b")
OPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.binary(min_size=1, max_size=40), st.integers(0, 3 * PAGE)),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("unlink"), st.sampled_from(NAMES)),
    st.tuples(st.just("fsync"), st.sampled_from((*NAMES, "/", "d"))),
), max_size=30)


@settings(max_examples=150, deadline=None)
@given(program=OPS)
def test_random_programs_keep_exactly_what_was_fsynced(tmp_path_factory: object, program: list[tuple]) -> None:
    """The model: the names now, and ``durable`` (what the disk must hold). A file's fsync makes its content durable
    under whatever name the disk has or will have for it; a folder's fsync makes each of its names durable, and a
    file renamed into it loses its old durable name elsewhere (the rename is durable whole)."""
    root = Path(tmp_path_factory.mktemp("powerfs"))  # type: ignore[attr-defined]
    cache = PageCache(root, sync_backing=False)
    cache.make("/d", DIR, 0, 0)
    cache.sync()
    ident: dict[str, int] = {}  # name -> file identity now
    content: dict[int, bytes] = {}  # identity -> content now
    synced: dict[int, bytes] = {}  # identity -> content at its last fsync
    durable: dict[str, int] = {}  # name on the disk -> identity
    fresh = iter(range(10**6))
    for op in program:
        if op[0] == "write":
            _, name, data, offset = op
            if name not in ident:
                ident[name] = next(fresh)
                content[ident[name]] = b""
            old = content[ident[name]]
            new = old.ljust(offset, b"\0")
            content[ident[name]] = new[:offset] + data + new[offset + len(data):]
            write(cache, "/" + name, data, offset)
        elif op[0] == "rename" and op[1] in ident and op[1] != op[2]:
            cache.rename("/" + op[1], "/" + op[2])
            ident[op[2]] = ident.pop(op[1])
        elif op[0] == "unlink" and op[1] in ident:
            cache.remove("/" + op[1], folder_expected=False)
            del ident[op[1]]
        elif op[0] == "fsync":
            target = op[1]
            if target in ("/", "d"):
                prefix = "" if target == "/" else "d/"
                for name in [n for n in durable if n.startswith(prefix) and "/" not in n[len(prefix):]]:
                    del durable[name]
                arrived = {n: i for n, i in ident.items() if n.startswith(prefix) and "/" not in n[len(prefix):]}
                for name in [n for n, i in durable.items() if i in arrived.values()]:  # a rename is durable whole
                    del durable[name]
                durable.update(arrived)
                cache.fsync(cache.lookup(target))
            elif target in ident:
                synced[ident[target]] = content[ident[target]]
                cache.fsync(cache.lookup("/" + target))
        assert all(read(cache, "/" + n) == content[i] for n, i in ident.items())
    cache.power_loss()
    expected = {"d": None, **{n: synced.get(i, b"") for n, i in durable.items()}}
    assert disk(root) == expected
    assert {n: read(cache, "/" + n) for n in durable} == {n: synced.get(i, b"") for n, i in durable.items()}
