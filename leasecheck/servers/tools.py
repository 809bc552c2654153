"""External tools leasecheck runs, found wherever leasecheck is installed.

Only one so far: Shopify's ``toxiproxy-server``, the TCP proxy behind the
network faults (``partition``, ``latency``, ``bandwidth``). No prebuilt binary
can be assumed, so ``leasecheck install-toxiproxy`` builds it with the
machine's Go into a per-user cache. Why there: a ``pip install`` puts
leasecheck in site-packages, which is neither writable nor the place for a
program, and a checkout's ``.cache`` does not exist for pip users. The lookup
order is ``PATH`` first (a system package or the user's own build wins), then
the cache.

Why pinned: the network nemesis relies on the exact behaviour of the toxics (a
removed ``timeout`` toxic closes the connections it held, a disabled proxy
closes its listener), so an upgrade is a reviewed change of
:data:`TOXIPROXY_VERSION` — the one place the version is written;
``scripts/install-toxiproxy.sh`` runs the command below.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leasecheck.servers.base import EnvironmentFailure

#: the newest release the Go module proxy serves; needs Go >= 1.23
TOXIPROXY_VERSION = "v2.12.0"
TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2"
TOXIPROXY_BINARY = "toxiproxy-server"
#: what a user types to get the tool: every "not found" message names it
INSTALL_COMMAND = "leasecheck install-toxiproxy"


def cache_bin_dir() -> Path:
    """``$XDG_CACHE_HOME/leasecheck/bin`` (default ``~/.cache/leasecheck/bin``): our per-user programs."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"  # the XDG spec ignores relative paths
    return root / "leasecheck" / "bin"


def find_toxiproxy() -> str | None:
    """The toxiproxy-server to run: the one on ``PATH``, else the cached build, else None."""
    found = shutil.which(TOXIPROXY_BINARY)
    if found is not None:
        return found
    cached = cache_bin_dir() / TOXIPROXY_BINARY
    return str(cached) if os.access(cached, os.X_OK) else None


def require_toxiproxy() -> str:
    """:func:`find_toxiproxy`, or an EnvironmentFailure (exit 4) naming the command that fixes it."""
    found = find_toxiproxy()
    if found is None:
        raise EnvironmentFailure(
            f"toxiproxy: no {TOXIPROXY_BINARY} on PATH or in {cache_bin_dir()};"
            f" build it there with: {INSTALL_COMMAND}"
        )
    return found


def find_go(install_command: str = INSTALL_COMMAND) -> str:
    """The Go toolchain: ``go`` on PATH, else the official tarball's ``/usr/local/go/bin/go``."""
    found = shutil.which("go") or shutil.which("/usr/local/go/bin/go")
    if found is None:
        raise EnvironmentFailure(f"{install_command}: no Go toolchain (go on PATH or /usr/local/go/bin/go); Go >= 1.23 builds it")
    return found


def built_version(go: str, binary: Path, module: str) -> str | None:
    """The version of ``module`` recorded in ``binary``'s build info (None: absent, or not ours)."""
    if not os.access(binary, os.X_OK):
        return None
    done = subprocess.run([go, "version", "-m", str(binary)], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "mod" and fields[1] == module:
            return fields[2]
    return None


@dataclass(frozen=True)
class GoBuild:
    """A Go program leasecheck builds at a pinned version into the per-user cache (toxiproxy-server, the temporal CLI),
    written once: :meth:`install`."""

    #: its file name in the cache
    binary: str
    #: the Go module whose version its build info records, and that version
    module: str
    version: str
    #: what ``go install`` builds, without the version (the file it writes is named for its last element)
    package: str
    #: what a user runs to build it (said in every refusal)
    install_command: str
    ldflags: str = ""

    def install(self, bin_dir: Path | None = None, say: Callable[[str], None] = lambda _: None) -> Path:
        """Build it at :attr:`version` into ``bin_dir`` (the per-user cache).

        Idempotent: a binary that already is this version is kept. Two callers at
        once (pytest-xdist workers, parallel CI jobs) serialise on a file lock: one
        builds, the other finds it built. The binary is moved into place from a
        temporary folder beside it, so it appears whole or not at all.
        ``GOTOOLCHAIN=local`` forbids Go to download another toolchain.
        """
        go = find_go(self.install_command)
        bin_dir = bin_dir or cache_bin_dir()
        target = bin_dir / self.binary
        try:
            bin_dir.mkdir(parents=True, exist_ok=True)
            lock = open(bin_dir / f".{self.binary}-install.lock", "w")  # noqa: SIM115 - held for the whole build
        except OSError as e:
            raise EnvironmentFailure(f"{self.install_command}: cannot write {bin_dir}: {e.strerror or e}") from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if built_version(go, target, self.module) == self.version:
                return target
            go_version = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout.strip()
            say(f"building {self.package}@{self.version} with {go_version} into {bin_dir}")
            with tempfile.TemporaryDirectory(prefix=".build.", dir=bin_dir) as build:
                env = {**os.environ, "GOBIN": build, "GOTOOLCHAIN": "local",
                       "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -buildvcs=false".strip()}
                command = [go, "install", "-trimpath", *(["-ldflags", self.ldflags] if self.ldflags else []),
                           f"{self.package}@{self.version}"]
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    detail = done.stderr.strip().splitlines()[-5:]
                    raise EnvironmentFailure(f"{self.install_command}: go install failed: " + " / ".join(detail))
                os.replace(Path(build) / self.package.rsplit("/", 1)[-1], target)
            if built_version(go, target, self.module) != self.version:
                raise EnvironmentFailure(f"{self.install_command}: {target} does not report {self.module} {self.version}")
        return target


#: toxiproxy-server; the ``-X`` ldflag sets what ``GET /version`` answers
TOXIPROXY = GoBuild(TOXIPROXY_BINARY, TOXIPROXY_MODULE, TOXIPROXY_VERSION, f"{TOXIPROXY_MODULE}/cmd/server",
                    INSTALL_COMMAND, ldflags=f"-X {TOXIPROXY_MODULE}.Version={TOXIPROXY_VERSION[1:]}")


def install_toxiproxy(bin_dir: Path | None = None, say: Callable[[str], None] = lambda _: None) -> Path:
    """Build toxiproxy-server at :data:`TOXIPROXY_VERSION` into ``bin_dir`` (the per-user cache): :meth:`GoBuild.install`."""
    return TOXIPROXY.install(bin_dir, say)
