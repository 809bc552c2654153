"""A host that is a network namespace on this machine (``netns://NAME``): what ``--cluster`` makes, and a test's lab.

A namespace has its own addresses and firewall but shares this machine's
processes and files, so commands run in it (``ip netns exec NAME ...``: an
iptables rule lands in the namespace's tables, a ``pgrep`` sees every process)
and files are read and written here, directly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from leasecheck.hosts.protocol import TIMEOUT_S, HostFileError, HostUnreachable, Ran

#: where iproute2 keeps named network namespaces
NETNS_DIR = Path("/run/netns")


@dataclass
class NetnsHost:
    """The namespace ``netns`` as a host named ``name``."""

    name: str
    netns: str

    def run(self, argv: Sequence[str], input: bytes | None = None, timeout: float = TIMEOUT_S) -> Ran:
        if not (NETNS_DIR / self.netns).exists():
            raise HostUnreachable(f"{self.name}: no network namespace {self.netns} ({NETNS_DIR / self.netns} is missing)")
        command = ["ip", "netns", "exec", self.netns, *argv]
        try:
            done = subprocess.run(command, input=input, capture_output=True, timeout=timeout)
        except FileNotFoundError:
            raise HostUnreachable(f"{self.name}: ip is not installed (apt-get install -y iproute2)") from None
        except subprocess.TimeoutExpired:
            raise HostUnreachable(f"{self.name}: {' '.join(argv)} did not finish within {timeout:g} s") from None
        return Ran(tuple(argv), done.returncode, done.stdout, done.stderr)

    def read_file(self, path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise HostFileError(f"{self.name}: cannot read {path}: {e.strerror or e}") from None

    def write_file(self, path: str, data: bytes) -> None:
        target = Path(path)
        tmp = target.with_name(target.name + ".leasecheck-tmp")
        try:
            tmp.write_bytes(data)
            tmp.chmod(0o644)
            os.replace(tmp, target)
        except OSError as e:
            raise HostFileError(f"{self.name}: cannot write {path}: {e.strerror or e}") from None

    def fetch(self, remote_path: str, local_path: Path) -> None:
        try:
            shutil.copyfile(remote_path, local_path)
        except OSError as e:
            raise HostFileError(f"{self.name}: cannot fetch {remote_path}: {e.strerror or e}") from None

    def close(self) -> None:
        """Nothing to let go of: every command is a process of its own."""
