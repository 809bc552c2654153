"""Where a member's host is and how it is reached: ``ssh://user@host:port``, ``docker://container``, ``netns://name``.

An address is data (a deployment file holds them, a run's header repeats
them); :func:`leasecheck.hosts.transports.open_host` turns one into a live host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from leasecheck.errors import BadInput

SCHEMES = ("ssh", "docker", "netns")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class BadAddress(BadInput):
    """An address leasecheck cannot reach a host by; ``str()`` says what is wrong in one line."""


@dataclass(frozen=True)
class HostAddress:
    """A parsed address: its transport (``scheme``), whom to reach (a host name or address, a container, a
    namespace) and, for ssh, the user and port it names (None: the deployment's ``[ssh]`` defaults)."""

    scheme: str
    target: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        if self.scheme != "ssh":
            return f"{self.scheme}://{self.target}"
        host = f"[{self.target}]" if ":" in self.target else self.target
        return f"ssh://{self.user + '@' if self.user else ''}{host}{':' + str(self.port) if self.port else ''}"


def parse_address(text: str) -> HostAddress:
    """``ssh://user@host:port`` (user and port optional), ``docker://container`` or ``netns://name``."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in SCHEMES:
        raise BadAddress(f"{text!r} is not a host address (ssh://user@host:port, docker://container or netns://name)")
    if scheme in ("docker", "netns"):
        if not _NAME.match(rest):
            what = "a container's name or id" if scheme == "docker" else "a network namespace's name"
            raise BadAddress(f"{text!r}: {rest!r} is not {what}")
        return HostAddress(scheme, rest)
    parts = urlsplit(text)
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.password:
        raise BadAddress(f"{text!r}: an ssh address is ssh://user@host:port, with no path, query or password")
    try:
        port = parts.port
    except ValueError:
        raise BadAddress(f"{text!r}: the port is not a number from 1 to 65535") from None
    if not parts.hostname:
        raise BadAddress(f"{text!r}: no host name")
    if port == 0:
        raise BadAddress(f"{text!r}: the port is not a number from 1 to 65535")
    return HostAddress("ssh", parts.hostname, parts.username or None, port)


@dataclass(frozen=True)
class SshOptions:
    """How ssh hosts are reached (the deployment's ``[ssh]`` table); an address's own user and port win.

    ``known_hosts`` None is ``~/.ssh/known_hosts`` when it exists. A host whose key
    is in neither is refused, unless ``trust_host_key``: a harness that SIGKILLs
    processes and rewrites firewalls must know whom it is talking to.
    """

    user: str = "root"
    port: int = 22
    #: private key files; empty: asyncssh's defaults (~/.ssh/id_ed25519, id_rsa, ...)
    identities: tuple[Path, ...] = ()
    #: offer the keys of a running ssh-agent (``SSH_AUTH_SOCK``)
    agent: bool = True
    known_hosts: Path | None = None
    trust_host_key: bool = False
    connect_timeout_s: float = 10.0


__all__ = ["SCHEMES", "BadAddress", "HostAddress", "SshOptions", "parse_address"]
