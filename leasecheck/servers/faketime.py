"""Store servers whose clock a nemesis can skew, under Debian's libfaketime.

The reference backends judge lease expiry by the store's clock, so the clock
fault that matters for them is a skew of the *server's* wall clock. We never
touch the machine's clock: the server alone runs with libfaketime preloaded,
reading its offset from a small control file that
:class:`leasecheck.nemesis.store_clock.ServerClockSkew` rewrites (``+1.5``, ``-0.25``, ``+0``:
seconds relative to the real time). ``FAKETIME_NO_CACHE=1`` makes the server
re-read it on every clock call, so an edit takes effect at once, in every
running backend process — measured: ``+3600`` moves Postgres'
``clock_timestamp()`` an hour ahead on an open connection, ``+0`` brings it back.

The environment, and why each variable:

* ``LD_PRELOAD=.../faketime/libfaketime.so.1`` and
  ``FAKETIME_TIMESTAMP_FILE=<control file>``: the offset, live.
* ``FAKETIME_NO_CACHE=1``: without it libfaketime re-reads the file only every
  10 s. The price is a file read per clock call, which a lease workload does
  not notice.
* ``FAKETIME_DONT_FAKE_MONOTONIC=1``: a real clock step (NTP, a VM restore)
  moves CLOCK_REALTIME only. Shifting CLOCK_MONOTONIC as well stalls the
  server's timers for the size of the skew — seen: a redis-server taken to
  ``+3610`` and back to ``+0`` without it no longer ran its cron, so it ignored
  SIGTERM (Redis acts on it in the cron) and had to be SIGKILLed; with it,
  the same steps leave ``stop()`` taking milliseconds. Postgres' latch
  timeouts run on the monotonic clock too.
* ``NO_FAKE_STAT=1``: file timestamps are not the clock under test.

The file is rewritten by rename, never in place: a server reading a
half-written ``+3`` of ``+3600`` would take a wrong step. libfaketime keeps a
small shared-memory pair per process (``/dev/shm/faketime_shm_<pid>``,
``sem.faketime_sem_<pid>``) that it removes at a clean exit; ``kill()``
removes it after a SIGKILL.

Redis (Debian's redis-server 7.0, linked against the system jemalloc): under
libfaketime alone it never gets to serve. It prints "libfaketime: Unexpected
recursive calls to clock_gettime() without proper initialization" / "Cannot
recover from unexpected recursive calls to clock_gettime()" and then hangs on a
futex (docs/background.md says it hangs in libfaketime's start-up: this deadlock). A
backtrace shows why: libfaketime's lazy initialisation ``dlsym``\\ s
``__ftime``, which glibc 2.36 no longer has; the failed lookup formats its
error message with ``malloc``, which is jemalloc, whose own first-time
initialisation calls ``clock_gettime`` — libfaketime again, still
uninitialised — and then waits on jemalloc's init lock that the outer call
holds. Tried, each still hanging the same way (no answer to PING after
1.5 s): ``FAKETIME_NO_CACHE=1`` or ``0``; ``FAKETIME_DONT_FAKE_MONOTONIC=1``
alone or with ``FAKETIME_NO_CACHE=1``; ``NO_FAKE_STAT=1``; ``FAKE_STAT=0``;
none of them; the ``libfaketimeMT.so.1`` variant; preloading
``libjemalloc.so.2`` before libfaketime (the recursion happens before any
variable is consulted, and jemalloc is still the malloc). What works: preloading
glibc's ``libc_malloc_debug.so.0`` *before* libfaketime, so that ``malloc``
(for the dynamic linker, libfaketime and redis-server alike) is glibc's and the
error path no longer enters jemalloc. Redis then starts, ``TIME`` follows the
control file live, keys expire by the skewed clock; jemalloc is still loaded
but idle, so ``INFO memory``'s ``allocator_*`` figures read near zero
(``used_memory`` is right: Redis counts with ``malloc_usable_size``), and
active defragmentation (off by default) would do nothing.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from leasecheck.nemesis.store_clock import ServerClockSkew, write_faketime_offset
from leasecheck.servers.base import EnvironmentFailure, LocalServer, StrPath
from leasecheck.servers.postgres import PostgresServer
from leasecheck.servers.redis import RedisServer

#: where Debian's libfaketime package puts the preload library (any architecture)
LIBFAKETIME_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
#: glibc's (≥ 2.34) malloc-debugging library, which also exports a plain glibc malloc
MALLOC_DEBUG_GLOB = "/usr/lib/*/libc_malloc_debug.so.0"
#: the control file's name in a server's directory
CONTROL_FILE = "faketime.rc"


def _find(pattern: str, given: StrPath | None, what: str, hint: str) -> Path:
    if given is not None:
        candidates = [Path(given)]
    else:
        candidates = [Path(p) for p in sorted(glob.glob(pattern))]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    where = str(given) if given is not None else pattern
    raise EnvironmentFailure(f"{what}: not found at {where} ({hint})")


def find_libfaketime(path: StrPath | None = None) -> Path:
    """The libfaketime preload library: ``path`` if given, else Debian's."""
    return _find(LIBFAKETIME_GLOB, path, "libfaketime", "install it: apt-get install -y libfaketime")


def find_malloc_debug(path: StrPath | None = None) -> Path:
    """glibc's libc_malloc_debug.so.0 (Redis needs it under libfaketime; see the module docstring)."""
    return _find(MALLOC_DEBUG_GLOB, path, "libc_malloc_debug", "it ships with glibc 2.34 or newer (libc6)")


def faketime_environment(control_file: Path, libfaketime: Path, preload_first: tuple[Path, ...] = ()) -> dict[str, str]:
    """The variables that put a server under libfaketime, following ``control_file`` live."""
    preload = [str(p) for p in (*preload_first, libfaketime)]
    inherited = os.environ.get("LD_PRELOAD")
    if inherited:
        preload.append(inherited)
    return {
        "LD_PRELOAD": " ".join(preload),
        "FAKETIME_TIMESTAMP_FILE": str(control_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "NO_FAKE_STAT": "1",
    }


def _env_binary() -> str:
    found = shutil.which("env")
    if found is None:
        raise EnvironmentFailure("faketime: no env(1) on PATH to start the server under libfaketime")
    return found


class FaketimeServer(LocalServer):
    """What a faketime server adds to a store's server: listed before it (``FaketimeServer, RedisServer``).

    The environment goes in through ``env VAR=... server ...``: env(1) execs
    the server in place, so the pid the base class waits for, pauses and kills
    is still the server's, and no ``preexec_fn`` has to touch the environment
    in a forked child (unsafe while the harness runs threads).
    """

    control_file: Path
    libfaketime: Path

    def _init_faketime(self, control_file: StrPath | None, libfaketime: StrPath | None) -> None:
        self.libfaketime = find_libfaketime(libfaketime)
        self.control_file = Path(control_file) if control_file is not None else self.directory / CONTROL_FILE
        if not self.control_file.exists():
            write_faketime_offset(self.control_file, 0.0)

    def _preload_first(self) -> tuple[Path, ...]:
        """Libraries to preload before libfaketime (none, unless the server needs a workaround)."""
        return ()

    def _launcher(self) -> list[str]:
        """env(1) with libfaketime's variables: the store server's own command runs under it."""
        env = faketime_environment(self.control_file, self.libfaketime, self._preload_first())
        return [_env_binary(), *(f"{key}={value}" for key, value in env.items())]

    def kill(self) -> None:
        """SIGKILL the server, and remove the shared-memory pair libfaketime made for it.

        libfaketime removes ``/dev/shm/faketime_shm_<pid>`` and ``sem.faketime_sem_<pid>``
        at a clean exit; a SIGKILLed server leaves them behind.
        """
        pid = self.pid
        super().kill()
        if pid is None:
            return
        for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
            try:
                os.unlink(f"/dev/shm/{name}")
            except OSError:
                pass

    def skew(self, offset_ms: float) -> None:
        """Set the server's clock ``offset_ms`` ahead of the host's (0: back to the host's)."""
        write_faketime_offset(self.control_file, offset_ms)

    def clock_fault(self, delta_ms: float) -> ServerClockSkew:
        """A nemesis fault that skews this server's clock by ``delta_ms`` and heals to +0."""
        return ServerClockSkew(self.control_file, delta_ms)


class FaketimePostgresServer(FaketimeServer, PostgresServer):
    """A :class:`PostgresServer` whose clock (``now()``, ``clock_timestamp()``) follows ``control_file``.

    ``control_file`` defaults to ``<directory>/faketime.rc``; a file given
    elsewhere must be readable by the ``postgres`` user when running as root.
    """

    def __init__(
        self,
        directory: StrPath | None = None,
        port: int | None = None,
        bin_dir: StrPath | None = None,
        control_file: StrPath | None = None,
        libfaketime: StrPath | None = None,
    ) -> None:
        find_libfaketime(libfaketime)  # before the base class makes a directory we would leave behind
        super().__init__(directory, port, bin_dir)
        self._init_faketime(control_file, libfaketime)


class FaketimeRedisServer(FaketimeServer, RedisServer):
    """A :class:`RedisServer` whose clock (``TIME``, key expiry) follows ``control_file``.

    Needs glibc's malloc preloaded before libfaketime (see the module docstring).
    """

    def __init__(
        self,
        directory: StrPath | None = None,
        port: int | None = None,
        binary: StrPath | None = None,
        control_file: StrPath | None = None,
        libfaketime: StrPath | None = None,
        malloc_debug: StrPath | None = None,
    ) -> None:
        find_libfaketime(libfaketime)
        self.malloc_debug = find_malloc_debug(malloc_debug)
        super().__init__(directory, port, binary)
        self._init_faketime(control_file, libfaketime)

    def _preload_first(self) -> tuple[Path, ...]:
        return (self.malloc_debug,)
