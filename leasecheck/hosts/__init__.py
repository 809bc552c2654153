"""Hosts leasecheck did not start: one small interface to a member's machine, and the faults done through it.

A team's store runs on its own hosts. Every member fault (kill, pause, a partition between members, a
member's clock, the cluster's primary and failover) is a handful of commands on a member's host, so all
of them go through one :class:`~leasecheck.hosts.protocol.Host` (run a command, read, write and fetch a
file), reached one of three ways: ``ssh://`` (asyncssh), ``docker://`` (the Docker SDK's exec and
archives) or ``netns://`` (a network namespace on this machine, as ``--cluster`` makes them).

* :mod:`.protocol` — what a host is (:class:`Host`, what a command gave back :class:`Ran`, :class:`HostUnreachable`);
* :mod:`.address` — ``ssh://user@host:port``, ``docker://container``, ``netns://name``; :mod:`.transports` opens each;
* :mod:`.netns`, :mod:`.ssh`, :mod:`.docker` — the three transports;
* :mod:`.deployment` — the deployment file (``--hosts FILE``, TOML), read and refused in one line ``FILE:LINE: what``;
* :mod:`.processes`, :mod:`.firewall` — a member's processes found and signalled, its iptables rules tagged with the run;
* :mod:`.stores` — who is primary and how a store fails over, per store kind, asked on the members' hosts;
* :mod:`.control` — :class:`DeployedCluster`, the cluster the member faults act on, and its heal;
* :mod:`.checks` — every command the chosen faults will need, tried harmlessly first (``leasecheck hosts check``).

May import ``leasecheck.errors``, ``leasecheck.waiting`` and ``leasecheck.lists`` only: the member faults
(``leasecheck.nemesis``) and the servers leasecheck starts (``leasecheck.servers``) import it, never the
other way round; the cluster is the structural protocol ``ClusterControl`` of ``leasecheck.nemesis.context``,
implemented here without importing it. asyncssh (the ``hosts`` extra) and docker (the ``docker`` extra) are
imported by their transport only, when a host of that kind is opened.
"""
