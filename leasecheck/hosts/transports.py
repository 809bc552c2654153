"""An address made a live host of its transport, the transport imported only then.

asyncssh and the Docker SDK are extras: a deployment of ssh hosts needs no
Docker, and the reverse; reading a deployment file needs neither.
"""

from __future__ import annotations

from leasecheck.hosts.address import HostAddress, SshOptions
from leasecheck.hosts.protocol import Host


def open_host(address: HostAddress, ssh: SshOptions | None = None, name: str | None = None) -> Host:
    """A host of ``address``'s transport, named ``name`` (default: the address); not connected until first used."""
    label = name or str(address)
    if address.scheme == "netns":
        from leasecheck.hosts.netns import NetnsHost

        return NetnsHost(label, address.target)
    if address.scheme == "docker":
        from leasecheck.hosts.docker import DockerHost

        return DockerHost(label, address.target)
    from leasecheck.hosts.ssh import SshHost

    return SshHost(label, address, ssh or SshOptions())
