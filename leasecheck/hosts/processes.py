"""A member's processes on its host: found by pidfile, systemd unit or pattern, and signalled with their children.

Why the children too: a member is a process *tree* (Postgres' postmaster and
its backends, a server and its forked saver). SIGSTOP of the root alone leaves
the backends answering, and a kill of the root alone leaves them to die on their
own time; a crashed or frozen host stops them all at once. So a signal goes to
each process found and every descendant (``ps -e -o pid=,ppid=``, read once),
parents first: a stopped parent forks no new child that would slip by.

A pid is looked up each time, never remembered: a member started again after a
kill has a new one, and so has a unit systemd restarted on its own.

A process that is pid 1 where the command runs is its pid namespace's init: the
kernel drops a SIGSTOP or SIGKILL sent to it from inside that namespace, and
``kill`` still exits 0. That is a store run as its container's main process,
reached through ``docker exec`` (the official images run theirs so). A pause or a
kill of it would be a fault that never landed, so it is refused, naming why
(:data:`INIT_REFUSES`), and ``leasecheck hosts check`` says so before a run.
"""

from __future__ import annotations

from collections.abc import Iterable

from leasecheck.errors import EnvironmentFailure
from leasecheck.hosts.deployment import ProcessSpec
from leasecheck.hosts.protocol import Host

#: the pid on pidfile $1's first line (Postgres' postmaster.pid has more) if that process is alive, else nothing; in one
#: command (each costs a round trip), from /proc, not ps (a slim image has none); a zombie (SIGKILLed, not yet reaped)
#: serves nothing, so is not alive
_PIDFILE_SCRIPT = """
if [ -e "$1" ] && [ ! -r "$1" ]; then echo "$1: permission denied" >&2; exit 2; fi
p=$(head -n 1 "$1" 2>/dev/null | tr -d ' \\t\\r') || exit 0
case $p in ''|*[!0-9]*) exit 0;; esac
s=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || exit 0
case $s in ''|Z*|X*) exit 0;; esac
echo "$p"
"""


#: why a process found as pid 1 cannot be paused or killed from its own host (see the module's docstring)
INIT_REFUSES = ("it is pid 1 there, a container's init: the kernel drops SIGSTOP and SIGKILL sent to it from inside its "
                "container (docker exec), and kill still exits 0; run the server under an init (docker run --init) "
                "in a container that outlives it")


def find_pids(host: Host, spec: ProcessSpec) -> list[int]:
    """The pids running ``spec`` on ``host`` now (none: it is not running); EnvironmentFailure if it cannot be asked."""
    if spec.how == "pidfile":
        ran = host.run(["sh", "-c", _PIDFILE_SCRIPT, "sh", spec.value])
        if not ran.ok:
            raise EnvironmentFailure(f"{host.name}: cannot read the pidfile {spec.value}: {ran.why()}")
        return [int(ran.out)] if ran.out.isdigit() else []
    if spec.how == "systemd":
        ran = host.run(["systemctl", "show", "--property=MainPID", "--value", spec.value])
        if not ran.ok or not ran.out.isdigit():
            raise EnvironmentFailure(f"{host.name}: cannot ask systemd for {spec.value}'s pid: {ran.why()}")
        return [int(ran.out)] if int(ran.out) > 0 else []
    ran = host.run(["pgrep", "-f", "--", spec.value])
    if ran.returncode == 1:
        return []
    if not ran.ok:
        raise EnvironmentFailure(f"{host.name}: cannot look for {spec}: {ran.why()}")
    return sorted(int(line) for line in ran.out.split())


def with_descendants(host: Host, pids: Iterable[int]) -> list[int]:
    """``pids`` and every process below them, each parent before its children; just ``pids`` if ``ps`` cannot tell."""
    roots = list(dict.fromkeys(pids))
    ran = host.run(["ps", "-e", "-o", "pid=,ppid="])
    if not ran.ok or not roots:
        return roots
    children: dict[int, list[int]] = {}
    for line in ran.out.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(fields[0]))
    order, queue = [], list(roots)
    while queue:
        pid = queue.pop(0)
        if pid not in order:
            order.append(pid)
            queue.extend(sorted(children.get(pid, ())))
    return order


def signal(host: Host, pids: list[int], sig: str) -> list[int]:
    """``kill -SIG`` every pid at once; the pids signalled. A pid already gone is no failure; a permission lacked is."""
    if not pids:
        return []
    ran = host.run(["kill", f"-{sig}", *map(str, pids)])
    if ran.ok:
        return pids
    lines = [line for line in ran.stderr.decode(errors="replace").splitlines() if line.strip()]
    refused = [line for line in lines if "No such process" not in line]
    if refused or not lines:
        raise EnvironmentFailure(f"{host.name}: {ran.why()}")
    gone = {pid for pid in pids if any(f"({pid})" in line or f" {pid}:" in line for line in lines)}
    return [pid for pid in pids if pid not in gone]


def find_tree(host: Host, specs: Iterable[ProcessSpec]) -> list[int]:
    """Every process of ``specs`` on ``host`` and their descendants (what a kill or a pause of a member hits)."""
    return with_descendants(host, [pid for spec in specs for pid in find_pids(host, spec)])
