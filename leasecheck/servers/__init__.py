"""Store servers leasecheck starts for tests and runs: see :mod:`leasecheck.servers.base`."""

from leasecheck.servers.base import EnvironmentFailure, LocalServer, free_port

__all__ = ["EnvironmentFailure", "LocalServer", "free_port"]
