"""What a run keeps in its directory besides its record, and how what a dead harness left is cleaned.

Server data directories, server logs and worker clocks live inside the run
directory, never in the system's temp folder: a run cut short by SIGTERM or
``kill -9`` then leaves nothing anywhere else, the servers' logs stay with the
run that produced them, and ``leasecheck heal RUN_DIR`` knows where to look.
The record (history, results, test.json, logs) is kept; the bulky or
meaningless-after-the-run state (a Postgres cluster of ~40 MB, a Redis append-only
file, the clock files) is removed at the end of the run, or by ``heal``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from leasecheck.machine.mounts import unmount_orphans
from leasecheck.machine.processes import read_process

#: the worker clocks' directory (:class:`leasecheck.nemesis.worker_clocks.ClockControl`)
CLOCKS_DIR = "clocks"
#: a deployment's members' logs, copied back from their hosts at the end of a ``--hosts`` run (``m1-redis.log`` ...)
MEMBERS_DIR = "members"

#: server state under the run directory: removed once the server is gone (``NAME.disk``: a power-loss layer's disk)
SERVER_STATE = ("postgres/data", "redis/appendonlydir", "redis/dump.rdb", "postgres.disk", "redis.disk",
                *(f"cluster/m{i}.disk" for i in (1, 2, 3)))  # a cluster's members' layers
#: names the harness's multiprocessing temp folder (``pymp-*``, the workers' forkserver socket): it lives in
#: the system's temp folder (a Unix socket path must be short) and a killed harness cannot remove it
MP_TEMP_NOTE = "mp-tempdir"


def note_mp_tempdir(run_dir: Path) -> None:
    """Write down where this process's multiprocessing temp folder is, for :func:`remove_mp_tempdir`."""
    from multiprocessing import util

    (run_dir / MP_TEMP_NOTE).write_text(util.get_temp_dir() + "\n")


def remove_mp_tempdir(run_dir: Path) -> str | None:
    """After a killed harness (``leasecheck heal``): remove the ``pymp-*`` folder it noted; the path removed, or None.

    Only a folder named like multiprocessing's own, and only by ``heal``: at a
    normal end the harness's own exit removes it, and a harness that goes on
    (another run in the same process) still needs it.
    """
    note = run_dir / MP_TEMP_NOTE
    try:
        path = Path(note.read_text().strip())
    except OSError:
        return None
    note.unlink(missing_ok=True)
    if not path.name.startswith("pymp-") or not path.is_dir():
        return None
    shutil.rmtree(path, ignore_errors=True)
    return str(path)


def _postmaster_alive(data: Path) -> bool:
    """Is the Postgres server of this data directory still running (its postmaster.pid names a live process)?"""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    process = read_process(pid)
    return process is not None and not process.exited


def _reachable_by(path: Path, user: pwd.struct_passwd) -> bool:
    """Can ``user`` reach ``path``: may it search every directory from the root down to it?"""
    for d in [path, *path.parents]:
        st = d.stat()
        if not (st.st_mode & 0o001 or (st.st_uid == user.pw_uid and st.st_mode & 0o100)
                or (st.st_gid == user.pw_gid and st.st_mode & 0o010)):
            return False
    return True


def server_directory(run_dir: Path, name: str, user: pwd.struct_passwd | None = None) -> Path:
    """Where a server we start keeps its data and log: ``run_dir/name``.

    A server that runs as another user (Postgres, when we are root) may be unable
    to reach a private run directory (a 0700 ``--store``); it then gets a temp
    directory (returned), and ``run_dir/name`` is a symlink to it, so that
    :func:`remove_leftovers` (the run's end, or ``leasecheck heal``) finds and removes it.
    """
    home = run_dir / name
    if user is None or _reachable_by(run_dir, user):
        return home
    tmp = Path(tempfile.mkdtemp(prefix=f"leasecheck-{name}-"))
    os.chmod(tmp, 0o755)
    home.symlink_to(tmp, target_is_directory=True)
    return tmp  # the server is given the real path: it cannot pass through the run directory


def _logs_only(home: Path) -> Callable[[str, list[str]], list[str]]:
    """What a copy of the members' folders leaves out: every folder below a member's (its data), and anything that is
    neither a file nor a folder (a server's socket, which no copy can read: ENXIO)."""
    def ignore(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        return [n for n in names if ((here / n).is_dir() and here != home) or not ((here / n).is_dir() or (here / n).is_file())]
    return ignore


def _remove_linked_home(run_dir: Path, name: str) -> bool:
    """A server directory outside the run (see :func:`server_directory`): keep its log in the run, remove it."""
    link = run_dir / name
    if not link.is_symlink():
        return False
    home = link.resolve()
    if name == "postgres" and _postmaster_alive(home / "data"):
        return False
    if name == "cluster":  # members' folders: their logs (at each folder's top) come home, their data goes
        if any(_postmaster_alive(data) for data in home.glob("*/data")):
            return False
        link.unlink()
        shutil.copytree(home, link, ignore=_logs_only(home))
        shutil.rmtree(home, ignore_errors=True)
        return True
    log = home / f"{name}.log"
    if log.is_file() and not (run_dir / log.name).exists():
        shutil.copy(log, run_dir / log.name)
    shutil.rmtree(home, ignore_errors=True)
    link.unlink()
    return True


def remove_leftovers(run_dir: Path) -> list[str]:
    """Remove the clocks and the servers' state from ``run_dir`` (never a running server's); the paths removed.

    First every power-loss layer whose process is gone, anywhere on the machine, is taken off (its mount point, an
    absolute path, is among those returned): a dead layer's mount fails every access to it, the state below too.
    """
    removed = unmount_orphans()
    removed += [name for name in ("postgres", "redis", "cluster") if _remove_linked_home(run_dir, name)]
    for name in (CLOCKS_DIR, *SERVER_STATE):
        path = run_dir / name
        try:
            if not path.exists() or (name in ("postgres/data", "postgres.disk") and _postmaster_alive(run_dir / "postgres" / "data")):
                continue
        except OSError:  # a mount that would not come off
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(name)
    return removed
