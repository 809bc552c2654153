"""Before a run touches anything: every command its faults will need, tried harmlessly on every member's host.

A fault that cannot be applied mid-run makes the run ``unknown``; a missing
``iptables``, a pidfile in another place, a clock file root cannot write are
better found in a second than after an hour. So ``leasecheck hosts check FILE``
(and a run with ``--hosts``, through :func:`open_deployment`) asks each host what
the chosen faults will ask, changing nothing: ``true`` (reachable), the process
found and ``kill -0`` of it (may we signal it? not if it is its host's pid 1, a container's
init: :data:`~leasecheck.hosts.processes.INIT_REFUSES`), ``command -v`` of the start
command, ``iptables -S INPUT`` (installed, and ours to call), each log readable,
the faketime file writable, and who is primary.

Which fault needs what is :data:`NEEDS`, by the catalogue's fault names
(tests/local/test_hosts_deployment.py holds it to ``leasecheck.nemesis.catalogue``).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts import firewall, processes, stores
from leasecheck.hosts.control import DeployedCluster, Row, each
from leasecheck.hosts.deployment import DeploymentError, MemberSpec, load_deployment
from leasecheck.hosts.protocol import Host

#: what each fault done through the members' hosts needs of them
NEEDS: dict[str, frozenset[str]] = {
    "isolate-primary": frozenset({"primary", "firewall"}),
    "partition-halves": frozenset({"firewall"}),
    "partition-bridge": frozenset({"firewall"}),
    "kill-primary": frozenset({"primary", "signal", "start"}),
    "pause-primary": frozenset({"primary", "signal"}),
    "failover": frozenset({"primary", "failover"}),
    "clock-member": frozenset({"faketime"}),
    # the store faults, on a deployment of one member: its server is the member's process (DeployedCluster.server)
    "pause-store": frozenset({"signal"}),
    "kill-store": frozenset({"signal", "start"}),
}
#: what needs a key of the deployment file, by need: a row failing for want of it is the file's fault (exit 3)
_KEYS = {"firewall": "address", "start": "start", "faketime": "faketime"}
#: a failover the store has no built-in way to make
_NO_FAILOVER = {"zookeeper": "ZooKeeper has no command to move its leader"}
#: is ``$1`` writable, or (missing) may it be made in its folder?
_WRITABLE = 'if [ -e "$1" ]; then test -w "$1"; else test -w "$(dirname "$1")"; fi'


def needs_of(faults: Iterable[str]) -> frozenset[str]:
    """What ``faults`` need of the hosts together (faults not done through the hosts need nothing of them)."""
    return frozenset(need for fault in faults for need in NEEDS.get(fault, ()))


def check(cluster: DeployedCluster, faults: Sequence[str] = tuple(NEEDS)) -> list[Row]:
    """One row per thing tried, on every member, for ``faults``; nothing on any host is changed."""
    needs = needs_of(faults)
    rows = [row for member_rows in each(cluster.member_names(), lambda name: _member_rows(
        cluster.host(name), cluster.member(name), needs, cluster.run_id)) for row in member_rows]
    reached = all(r.ok for r in rows if r.what == "reach")
    if "primary" in needs and reached:
        primary = cluster.primary()
        rows.append(Row("*", "primary", primary is not None,
                        f"{primary} ({_primary_how(cluster)})" if primary else "no member answers as the primary"))
    if "failover" in needs:
        rows.append(_failover_row(cluster))
    return rows


def _member_rows(host: Host, member: MemberSpec, needs: frozenset[str], run_id: str) -> list[Row]:
    name = member.name
    try:
        reached = host.run(["true"])
    except EnvironmentFailure as e:
        return [Row(name, "reach", False, str(e))]
    rows = [Row(name, "reach", reached.ok, str(member.host) if reached.ok else reached.why())]
    for key in sorted(need for need in needs if need in _KEYS):
        if getattr(member, "start_command" if key == "start" else _KEYS[key]) is None:
            rows.append(Row(name, key, False, f"no {_KEYS[key]} = ... for this member", config=True))
    try:
        rows += _process_rows(host, member, "signal" in needs or "start" in needs)
        if "start" in needs and member.start_command is not None:
            first = shlex.split(member.start_command)[0]
            found = host.run(["sh", "-c", 'command -v "$1"', "sh", first])
            rows.append(Row(name, "start", found.ok, found.out if found.ok else f"{first}: not found on the host"))
        if "firewall" in needs:
            rows.append(_firewall_row(host, member, run_id))
        if "faketime" in needs and member.faketime is not None:
            writable = host.run(["sh", "-c", _WRITABLE, "sh", member.faketime])
            rows.append(Row(name, "faketime", writable.ok, member.faketime + ("" if writable.ok else ": not writable")))
        for log in member.logs:
            readable = host.run(["test", "-f", log, "-a", "-r", log])
            rows.append(Row(name, "log", readable.ok, log + ("" if readable.ok else ": not a readable file")))
    except EnvironmentFailure as e:
        rows.append(Row(name, "reach", False, str(e)))
    return rows


def _firewall_row(host: Host, member: MemberSpec, run_id: str) -> Row:
    """May we call iptables here? And is the firewall free of this run id's rules (others' are only noted)?"""
    listed = host.run([*firewall.IPTABLES, "-S", "INPUT"])
    if not listed.ok:
        return Row(member.name, "firewall", False, listed.why())
    comments = [firewall.comment_of(shlex.split(line)) or "" for line in listed.out.splitlines()]
    ours = sum(c == firewall.tag(run_id) for c in comments)
    others = sum(c.startswith(firewall.TAG) for c in comments) - ours
    detail = "iptables -S INPUT answers"
    if ours:
        detail += f"; {ours} rule(s) of run {run_id} already there"
    if others:
        detail += f"; {others} rule(s) of other leasecheck runs (leasecheck heal --hosts FILE removes them)"
    return Row(member.name, "firewall", not ours, detail)


def _process_rows(host: Host, member: MemberSpec, signalled: bool) -> list[Row]:
    rows = []
    for spec in member.processes:
        pids = processes.find_pids(host, spec)
        if not pids:
            rows.append(Row(member.name, "process", False, f"{spec}: not running"))
            continue
        detail = f"{spec}: pid {', '.join(map(str, pids))}"
        if signalled and 1 in pids:
            rows.append(Row(member.name, "process", False, f"{detail}; {processes.INIT_REFUSES}"))
        elif signalled:
            may = host.run(["kill", "-0", *map(str, pids)])
            rows.append(Row(member.name, "process", may.ok, detail + ("" if may.ok else f"; kill -0: {may.err}")))
        else:
            rows.append(Row(member.name, "process", True, detail))
    return rows


def _primary_how(cluster: DeployedCluster) -> str:
    own = [m.name for m in cluster.deployment.members if m.primary != "builtin"]
    if own:
        return f"the command of {', '.join(own)}"
    return f"{cluster.deployment.store}'s own answer"


def _failover_row(cluster: DeployedCluster) -> Row:
    store = cluster.deployment.store
    if store in _NO_FAILOVER:
        return Row("*", "failover", False, f"{store}: no built-in failover ({_NO_FAILOVER[store]})", config=True)
    if store == "redis" and not cluster.deployment.option("sentinel"):
        return Row("*", "failover", False, "redis: no built-in failover without Sentinel (sentinel = ... in [redis])",
                   config=True)
    return Row("*", "failover", True, stores.FAILOVER_HOW[store])


def open_deployment(path: str | Path, run_id: str, faults: Sequence[str] = tuple(NEEDS)) -> DeployedCluster:
    """What a run with ``--hosts FILE`` calls first: the file read, its hosts opened, :func:`check` passed.

    Raises :class:`DeploymentError` for a file that cannot make the run (exit 3)
    and EnvironmentFailure, naming every failed row, for hosts that cannot
    (exit 4); the caller closes the cluster it gets, after ``heal_all()``.
    """
    cluster = DeployedCluster.open(load_deployment(path), run_id)
    try:
        rows = check(cluster, faults)
    except BaseException:
        cluster.close()
        raise
    failed = [r for r in rows if not r.ok]
    if failed:
        cluster.close()
        said = "; ".join(f"{r.member} {r.what}: {r.detail}" for r in failed)
        if all(r.config for r in failed):
            raise DeploymentError(f"{path}: the faults chosen need more of it: {said}")
        raise EnvironmentFailure(f"hosts: {len(failed)} check(s) failed: {said}")
    return cluster
