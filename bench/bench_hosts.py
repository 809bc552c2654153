"""From a fault's decision to its effect on a member's host, through each transport side by side.

    python -m bench.bench_hosts --repeat 20

The member faults of a run with ``--hosts FILE`` are a few commands on a member's host, sent through one of three
transports (docs/hosts.md). What each costs is the time between the moment a fault is decided and the moment it
holds on the host, so this measures exactly that, on two members per transport:

* ``netns://``: two network namespaces of a :class:`~leasecheck.servers.hosts.HostNetwork` (what ``--cluster``
  makes), each command ``ip netns exec NS ...``;
* ``ssh://``: the same namespaces, an sshd in each (as tests/support/hostlab.py starts one: OpenSSH, a key made for the
  run), each command a channel on one asyncssh connection per host;
* ``docker://``: two containers of the host-root image (``leasecheck.servers.image``) on a run's bridge network,
  NET_ADMIN granted so that iptables may be called in them, each command the engine's ``exec``. Left out, saying
  why, when no engine answers (scripts/start-dockerd.sh starts one).

Each member runs a stand-in server (a sleeping python, found by its pattern, never its host's pid 1). Every fault
goes through a :class:`~leasecheck.hosts.control.DeployedCluster` of a deployment file naming the members, as a
run's nemesis calls it:

* **partition**: ``partition([(a, b)])`` (``iptables -I INPUT -s PEER/32 ... -j DROP`` on a, then on b). Its
  effect is b's traffic to a dropped: a sender in b's network namespace sends a datagram every 0.5 ms, a receiver
  in a's notes when each arrives, and the last one to arrive after the decision is the moment the cut held.
  Also when the call returned (both rules in place);
* **pause**: ``pause_member(a)`` (the pattern looked up, the process's children, ``kill -STOP``). Its effect is
  the process in state ``T``, read from ``/proc/PID/stat`` every 0.25 ms by an observer process. Also when the
  call returned.

All on one machine, so every process reads the same CLOCK_MONOTONIC: the decision, the arrival and the state are
times on one clock. Each fault is healed (and its healing seen: traffic flows, the process runs) before the next.

What a fault costs the harness: the CPU this process spent per fault and per heal (``getrusage``), which is the
process a run's recorder lives in (its merge thread, beside the nemesis' threads and the ssh event loop); the
commands' own processes (``ip netns exec``: children) apart, and the engine's and sshd's not counted. The workers
never wait on a host: they talk to the store, and a fault reaches them only through the store it changed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import machine_note, table
from leasecheck.hosts.control import DeployedCluster
from leasecheck.hosts.deployment import load_deployment
from leasecheck.servers.hosts import HostNetwork

PORT = 47_000
#: the sender's interval between two datagrams (the precision of "traffic dropped")
SEND_EVERY_S = 0.0005
#: the observer's interval between two reads of /proc (the precision of "stopped")
READ_EVERY_S = 0.00025
#: how long a fault or its heal may take to show before the benchmark gives up on it
EFFECT_TIMEOUT_S = 30.0

RECEIVER = textwrap.dedent("""
    import select, socket, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", int(sys.argv[1])))
    last, count = 0.0, 0
    while True:
        ready, _, _ = select.select([s, sys.stdin], [], [])
        if s in ready:
            s.recv(64)
            last, count = time.monotonic(), count + 1
        if sys.stdin in ready:
            if not sys.stdin.readline():
                break
            print(f"{last!r} {count}", flush=True)
""")
SENDER = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    while True:
        try:
            s.sendto(b"x", (sys.argv[1], int(sys.argv[2])))
        except OSError:
            pass
        time.sleep(float(sys.argv[3]))
""")
OBSERVER = textwrap.dedent("""
    import sys, time
    path, every, was = f"/proc/{sys.argv[1]}/stat", float(sys.argv[2]), None
    while True:
        with open(path) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state != was:
            print(f"{state} {time.monotonic()!r}", flush=True)
            was = state
        time.sleep(every)
""")


@dataclass
class Transport:
    """Two members reached one way: the deployment file, what runs on their hosts, how to enter a's and b's network."""

    name: str
    deployment: Path
    #: the argv prefix that runs a command in each member's network namespace (``ip netns exec NS``, ``nsenter -t PID -n``)
    enter: dict[str, list[str]]
    #: each member's address among its peers
    addresses: dict[str, str]
    #: each member's stand-in server, by its pid on this machine
    pids: dict[str, int]
    #: processes this benchmark started for the transport (stopped by pid at the end)
    started: list[subprocess.Popen[Any]] = field(default_factory=list)


@dataclass
class Figures:
    """One transport's measurements, in seconds after each fault's decision (and CPU seconds per fault)."""

    dropped: list[float] = field(default_factory=list)
    cut_returned: list[float] = field(default_factory=list)
    stopped: list[float] = field(default_factory=list)
    pause_returned: list[float] = field(default_factory=list)
    cpu_self: list[float] = field(default_factory=list)
    cpu_children: list[float] = field(default_factory=list)


# ---------------------------------------------------------------- the members' hosts


def member_deployment(path: Path, hosts: dict[str, str], addresses: dict[str, str], tag: str, ssh: str = "") -> Path:
    members = "".join(textwrap.dedent(f"""
        [[member]]
        name = "{name}"
        host = "{host}"
        address = "{addresses[name]}"
        process = {{ pattern = '{pattern(tag, name)}' }}
        """) for name, host in hosts.items())
    path.write_text('store = "redis"\n' + ssh + members)
    return path


def sleeper(tag: str, name: str, python: str = sys.executable) -> list[str]:
    """The stand-in server of member ``name``: a python sleeping, its pattern on its command line."""
    return [python, "-c", "import time; time.sleep(1e6)", f"{tag}-{name}"]


def pattern(tag: str, name: str) -> str:
    """What finds member ``name``'s stand-in (``pgrep -f``), and nothing else: not the init of a container whose
    command line starts it (there the code and the name are apart, in quotes)."""
    return rf"sleep\(1e6\) {tag}-{name}"


@contextlib.contextmanager
def namespaces(work: Path, tag: str) -> Iterator[tuple[Transport, Transport]]:
    """Two members in network namespaces, reached as netns:// and as ssh:// (an sshd in each namespace)."""
    from tests.support.hostlab import Keys, start_sshd

    network = HostNetwork.open(2)
    sshds, servers = [], []
    try:
        names = [h.name for h in network.hosts]
        addresses = {h.name: h.address for h in network.hosts}
        servers = [subprocess.Popen(sleeper(tag, name), stdin=subprocess.DEVNULL) for name in names]
        keys = Keys.make(work / "keys")
        for host in network.hosts:
            sshds.append(start_sshd(work / "sshd", keys, host.address, 22, netns=host.netns))
        known = keys.known_hosts(work / "known_hosts", *((h.address, 22) for h in network.hosts))
        ssh = f'[ssh]\nuser = "root"\nidentity = "{keys.client}"\nagent = false\nknown-hosts = "{known}"\n'
        enter = {h.name: ["ip", "netns", "exec", h.netns] for h in network.hosts}
        pids = {name: p.pid for name, p in zip(names, servers, strict=True)}
        yield (Transport("netns://", member_deployment(work / "netns.toml", {h.name: f"netns://{h.netns}" for h in network.hosts},
                                                        addresses, tag), enter, addresses, pids),
               Transport("ssh://", member_deployment(work / "ssh.toml", {h.name: f"ssh://root@{h.address}:22" for h in network.hosts},
                                                      addresses, tag, ssh), enter, addresses, pids))
    finally:
        for sshd in sshds:
            sshd.stop()
        stop(servers)
        network.close()


@contextlib.contextmanager
def containers(work: Path, tag: str) -> Iterator[Transport | str]:
    """Two members in containers of the host-root image, reached as docker://; or why there are none."""
    try:
        import docker
    except ImportError:
        yield "the docker extra is not installed (pip install '.[docker]')"
        return
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except docker.errors.DockerException as e:
        yield f"no Docker engine answers ({str(e).splitlines()[0]}); bash scripts/start-dockerd.sh starts one"
        return
    from leasecheck.servers.docker import DockerRun
    from leasecheck.servers.image import ensure_base_image, host_mounts

    tini = shutil.which("docker-init") or shutil.which("tini")
    if tini is None:
        yield "no tini on this machine to be the containers' init (apt-get install -y tini)"
        return
    run = DockerRun.open(client)
    tag = f"{tag}-docker"  # not the namespaces' stand-ins: this machine's /proc shows both
    try:
        image, names, made = ensure_base_image(client), ["m1", "m2"], {}
        for name in names:
            server = shlex.join(sleeper(tag, name, "python3"))
            made[name] = client.containers.run(
                image, entrypoint=[tini, "--", "sh", "-c", f"{server} & exec sleep infinity"], detach=True,
                name=f"leasecheck-{run.run_id}-{name}", labels=run.labels, network=run.network_name,
                mounts=host_mounts(), cap_add=["NET_ADMIN"])
        addresses, pids = {}, {}
        for name, container in made.items():
            container.reload()
            addresses[name] = container.attrs["NetworkSettings"]["Networks"][run.network_name]["IPAddress"]
            pids[name] = wait_for_pid(f"sleep(1e6) {tag}-{name}")
        enter = {name: ["nsenter", "-t", str(pids[name]), "-n"] for name in names}
        yield Transport("docker://", member_deployment(work / "docker.toml", {n: f"docker://{c.name}" for n, c in made.items()},
                                                       addresses, tag), enter, addresses, pids)
    finally:
        run.close()
        client.close()


def wait_for_pid(pattern: str) -> int:
    """The pid on this machine of the one process whose command line holds ``pattern`` (a container's, too)."""
    deadline = time.monotonic() + EFFECT_TIMEOUT_S
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if pattern in (entry / "cmdline").read_bytes().decode(errors="replace").replace("\0", " "):
                        return int(entry.name)
        time.sleep(0.05)
    raise RuntimeError(f"no process {pattern} within {EFFECT_TIMEOUT_S:g} s")


def stop(processes: list[subprocess.Popen[Any]]) -> None:
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait()


# ---------------------------------------------------------------- seeing the effects


class Receiver:
    """The last datagram a's network namespace received, and how many (asked over the receiver's stdin)."""

    def __init__(self, transport: Transport, a: str, b: str) -> None:
        self.process = subprocess.Popen([*transport.enter[a], sys.executable, "-c", RECEIVER, str(PORT)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.sender = subprocess.Popen([*transport.enter[b], sys.executable, "-c", SENDER, transport.addresses[a],
                                        str(PORT), str(SEND_EVERY_S)], stdin=subprocess.DEVNULL)
        transport.started += [self.process, self.sender]
        if not poll(lambda: self.ask()[1] > 0):
            raise RuntimeError(f"{transport.name}: no datagram from {b} reached {a}")

    def quiet(self, for_s: float = 0.02) -> bool:
        """Did no datagram arrive for ``for_s`` seconds?"""
        count = self.ask()[1]
        time.sleep(for_s)
        return self.ask()[1] == count

    def ask(self) -> tuple[float, int]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("?\n")
        self.process.stdin.flush()
        last, count = self.process.stdout.readline().split()
        return float(last), int(count)


class Observer:
    """A process's changes of state (``T`` stopped, ``S`` sleeping, ...), each with its time, as /proc shows them."""

    def __init__(self, transport: Transport, pid: int) -> None:
        # unbuffered: a line read is all that was read, so select() says whether another is waiting
        self.process = subprocess.Popen([sys.executable, "-c", OBSERVER, str(pid), str(READ_EVERY_S)],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, bufsize=0)
        transport.started.append(self.process)
        self.state = self.next()[0]

    def next(self) -> tuple[str, float]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], EFFECT_TIMEOUT_S)
        if not ready:
            raise RuntimeError(f"no change of state within {EFFECT_TIMEOUT_S:g} s")
        state, at = self.process.stdout.readline().decode().split()
        return state, float(at)

    def until(self, wanted: Callable[[str], bool]) -> float:
        while True:
            state, at = self.next()
            if wanted(state):
                return at


def poll(condition: Callable[[], bool], timeout: float = EFFECT_TIMEOUT_S, every: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return False


def cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


# ---------------------------------------------------------------- the measurements


def measure(transport: Transport, repeat: int) -> Figures:
    """``repeat`` partitions and pauses through ``transport`` (one of each first, not counted: connections made)."""
    a, b = sorted(transport.pids)
    cluster = DeployedCluster.open(load_deployment(transport.deployment), f"bench-{uuid.uuid4().hex[:8]}")
    figures = Figures()
    try:
        receiver, observer = Receiver(transport, a, b), Observer(transport, transport.pids[a])
        for i in range(repeat + 1):
            used = cpu()
            # the partition: decided, then the rules inserted on a and b; when did b's datagrams stop reaching a?
            decided = time.monotonic()
            cluster.partition([(a, b)])
            returned = time.monotonic()
            if not poll(receiver.quiet, every=0.0):
                raise RuntimeError(f"{transport.name}: {b}'s traffic to {a} still arrives after the partition")
            last, count = receiver.ask()
            cluster.heal_partition([(a, b)])
            if not poll(lambda: receiver.ask()[1] > count):  # noqa: B023 (called at once, in this iteration)
                raise RuntimeError(f"{transport.name}: {b}'s traffic to {a} never came back after the heal")
            # the pause: decided, then the pid looked up, its children, kill -STOP; when did /proc say T?
            paused = time.monotonic()
            cluster.pause_member(a)
            pause_returned = time.monotonic()
            stopped = observer.until(lambda state: state == "T")
            cluster.resume_member(a)
            observer.until(lambda state: state != "T")
            own, children = (now - then for now, then in zip(cpu(), used, strict=True))
            if i == 0:
                continue
            figures.dropped.append(last - decided)
            figures.cut_returned.append(returned - decided)
            figures.stopped.append(stopped - paused)
            figures.pause_returned.append(pause_returned - paused)
            figures.cpu_self.append(own / 4)  # two faults and two heals
            figures.cpu_children.append(children / 4)
    finally:
        cluster.heal_all()
        cluster.close()
    return figures


def ms(values: list[float]) -> str:
    """Median / worst, in milliseconds."""
    return f"{statistics.median(values) * 1000:.1f} / {max(values) * 1000:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=20, help="faults of each kind per transport (default 20)")
    parser.add_argument("--transports", default="netns,ssh,docker", help="which (default: netns,ssh,docker)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_hosts: the members' hosts are network namespaces and containers: run it as root", file=sys.stderr)
        return 2
    wanted = [t.strip() for t in args.transports.split(",") if t.strip()]
    print(machine_note())
    work = Path(tempfile.mkdtemp(prefix="leasecheck-bench-hosts-"))
    tag = f"leasecheck-bench-{uuid.uuid4().hex[:8]}"
    rows, notes = [], []
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with namespaces(work, tag) as (netns, ssh), containers(work, tag) as docker:
            for name, transport in (("netns", netns), ("ssh", ssh), ("docker", docker)):
                if name not in wanted:
                    continue
                if isinstance(transport, str):
                    notes.append(f"docker://: not measured: {transport}")
                    continue
                try:
                    figures = measure(transport, args.repeat)
                finally:
                    stop(transport.started)
                rows.append([transport.name, args.repeat, ms(figures.dropped), ms(figures.cut_returned), ms(figures.stopped),
                             ms(figures.pause_returned), f"{statistics.mean(figures.cpu_self) * 1000:.1f}",
                             f"{statistics.mean(figures.cpu_children) * 1000:.1f}"])
                print(f"{transport.name}: done", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(work, ignore_errors=True)
    print(table(["transport", "faults", "partition: traffic dropped ms", "partition: call returned ms",
                 "pause: stopped (T) ms", "pause: call returned ms", "harness CPU ms/fault", "commands' CPU ms/fault"], rows))
    print("median / worst after the fault's decision; CPU per fault or heal, the engine's and sshd's not counted")
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
