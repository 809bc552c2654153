"""One store in a Docker container, faulted through ``docker exec`` alone: a deployment of one member (issue 35).

The container is ``--env docker``'s Redis (:class:`~leasecheck.servers.container_stores.ContainerRedisServer`: its
image, the run's network, the port published on 127.0.0.1, its folder at ``/data``, the durable settings), written
into a deployment of one member as a team would: ``host = "docker://CONTAINER"``, its process by pidfile, its start
command, its log. ``leasecheck run --target redis --url redis://127.0.0.1:PORT --hosts FILE --nemesis
pause-store,kill-store`` pauses and kills the container's server through the member (``docker exec kill -STOP``,
``-KILL``, then the start command), and the run is valid: Redis fsyncs before it answers.

What a container needs for that: its server must not be its pid 1. The kernel drops a SIGSTOP or SIGKILL sent to a
pid namespace's init from inside the namespace, and ``kill`` still exits 0, so ``--env docker``'s own container
(redis-server as its entrypoint) cannot be paused or killed through exec. Both ways are tested: that container is
refused by ``leasecheck hosts check`` and by the fault itself, saying why; the one the run faults runs its server
as a daemon under an init (tini, what ``docker run --init`` runs), as docs/hosts.md shows.

The server really stops: a thread of the test reads the server's state from this machine's ``/proc`` (its host
pid, from the engine's ``top``) all through the run and sees ``T``; and the history holds the pause's and the kill's
events, with no op of the workers acknowledged while a pause had just begun. ``leasecheck heal --hosts`` after it
finds nothing to undo, and says that the container's firewall is not one it may read (nor could a run have changed it).

Needs a Docker engine (scripts/start-dockerd.sh starts one); skipped, saying why, if none can be had.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

from leasecheck.servers.container import DATA

PIDFILE = f"{DATA}/redis.pid"
#: after a pause's start event, how long the server is stopped for sure: a pause lasts at least 0.5 ttl (500 ms), counted
#: from before its three commands through exec (find the pid, its children, kill -STOP), which take far less
SURELY_STOPPED_S = 0.2


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    """An engine that answers, started by scripts/start-dockerd.sh if need be; skipped, saying why, if none can be."""
    docker = pytest.importorskip("docker", reason="the docker extra is not installed: pip install '.[docker]'")
    done = subprocess.run(["bash", str(REPO / "scripts" / "start-dockerd.sh")], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.skip(f"no Docker engine can be started (scripts/start-dockerd.sh exit {done.returncode}): "
                    f"{(done.stdout + done.stderr)[-500:]}")
    client = docker.from_env(timeout=60)
    yield client
    client.close()


def daemon_redis() -> type:
    """``--env docker``'s Redis on the host-root image, its server a daemon under an init (tini, as ``docker run
    --init`` has it; the host's, which the image runs on), the container kept up by ``sleep``."""
    from leasecheck.servers.container_stores import ContainerRedisServer

    found = shutil.which("docker-init") or shutil.which("tini")
    if found is None:
        pytest.fail("no tini on this machine (docker.io brings it as docker-init): apt-get install -y tini", pytrace=False)
    tini: str = found

    class DaemonRedis(ContainerRedisServer):
        def server_argv(self) -> list[str]:
            """The server's own command line, as ``--env docker`` has it, daemonized with a pidfile: also the start."""
            argv = super()._command()
            argv[argv.index("--daemonize") + 1] = "yes"
            return [*argv, "--pidfile", PIDFILE]

        def _command(self) -> list[str]:
            return [tini, "--", "sh", "-c", f"{shlex.join(self.server_argv())} && exec sleep infinity"]

    return DaemonRedis


def deployment(path: Path, container: str, start: list[str] | None) -> Path:
    """A deployment of one member, ``r1`` in ``container``, reached by ``docker://``; found by pidfile or by pattern."""
    process = f'{{ pidfile = "{PIDFILE}" }}' if start else '{ pattern = "redis-server" }'
    path.write_text(f"""store = "redis"

[[member]]
name = "r1"
host = "docker://{container}"
process = {process}
{f"start = {json.dumps(shlex.join(start))}" if start else ""}
logs = ["{DATA}/redis.log"]
""")
    return path


def leasecheck(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leasecheck", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


class States:
    """The states of the container's redis-server as this machine's ``/proc`` shows them, read every 10 ms."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self.seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def _pids(self) -> list[int]:
        try:
            top = self.container.top(ps_args="-eo pid,args")
        except Exception:  # the engine between a kill and a start: the next look will do
            return []
        return [int(row[0]) for row in top.get("Processes") or [] if "redis-server" in row[-1]]

    def _read(self) -> None:
        pids, looked = [], 0.0
        while not self._stop.is_set():
            if time.monotonic() - looked > 0.2:
                pids, looked = self._pids(), time.monotonic()
            for pid in pids:
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "?")
                self.seen[state] = self.seen.get(state, 0) + 1
            self._stop.wait(0.01)

    def __enter__(self) -> States:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_containers_own_server_as_its_pid_1_is_refused_saying_why(engine: Any, tmp_path: Path) -> None:
    """``--env docker``'s container as it is: its redis-server is its pid 1, which no exec can stop or kill."""
    from leasecheck.errors import EnvironmentFailure
    from leasecheck.hosts.control import DeployedCluster
    from leasecheck.hosts.deployment import load_deployment
    from leasecheck.servers.docker import DockerRun

    run = DockerRun.open(engine)
    try:
        server = run.redis(tmp_path / "redis")
        server.start()
        assert server.container is not None
        hosts = deployment(tmp_path / "one.toml", server.container.name, None)
        done = leasecheck("hosts", "check", str(hosts), "--nemesis", "pause-store,kill-store", cwd=tmp_path)
        assert done.returncode == 4, done.stdout + done.stderr
        assert "r1  process  FAIL  pattern redis-server: pid 1; it is pid 1 there, a container's init" in done.stdout, done.stdout
        cluster = DeployedCluster.open(load_deployment(hosts), "pid-one")
        try:
            for fault in (cluster.server("r1").pause, cluster.server("r1").kill):
                with pytest.raises(EnvironmentFailure, match=r"r1: cannot (pause|kill) its pattern redis-server: it is pid 1 there"):
                    fault()
        finally:
            cluster.close()
        assert server.container.top()["Processes"], "the server runs on, untouched"
        state = Path(f"/proc/{server.pid}/status").read_text()
        assert "State:\tS" in state or "State:\tR" in state, state
    finally:
        run.close()


def test_a_store_in_a_container_is_paused_and_killed_through_docker_exec_and_the_run_is_valid(
        engine: Any, tmp_path: Path) -> None:
    from leasecheck.histories import read_history
    from leasecheck.servers.docker import DockerRun

    run = DockerRun.open(engine)
    try:
        # the host-root image (no image asked for): the engine's own init cannot go where the host's /sbin is mounted
        server = run._add(daemon_redis()(run, tmp_path / "redis", image=""))
        server.start()
        assert server.container is not None
        hosts = deployment(tmp_path / "one.toml", server.container.name, server.server_argv())
        check = leasecheck("hosts", "check", str(hosts), "--nemesis", "pause-store,kill-store", cwd=tmp_path)
        assert check.returncode == 0, check.stdout + check.stderr
        assert f"r1  reach    ok    docker://{server.container.name}" in check.stdout, check.stdout
        assert "r1  process  ok    pidfile /data/redis.pid: pid " in check.stdout, check.stdout

        with States(server.container) as states:
            done = leasecheck("run", "--target", "redis", "--url", server.url, "--hosts", str(hosts),
                              "--nemesis", "pause-store,kill-store", "--time-limit", "8", "--evidence-wait", "60",
                              "--seed", "1", "--store", str(tmp_path / "store"), cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert states.seen.get("T"), f"the container's redis-server was never seen stopped: {states.seen}"

        run_dir = (tmp_path / "store" / "latest").resolve()
        header, ops, reader = read_history(run_dir / "history.jsonl")
        assert header.meta["cluster"]["hosts"] == {"r1": f"docker://{server.container.name}"}, header.meta
        events = [(e.f, e.time, e.value) for e in reader.nemesis if isinstance(e.value, dict) and "fault" in e.value]
        started = {(f, value["fault"]) for f, _, value in events}
        assert {("pause", "pause-store"), ("resume", "pause-store"), ("kill", "kill-store"), ("start", "kill-store")} <= started, events
        assert all(value["victims"] == ["store"] for _, _, value in events), events
        # while a pause had just begun the server answered no one: no op of the workers was acknowledged then
        pauses = [t for f, t, value in events if f == "pause" and value["fault"] == "pause-store"]
        acked = [op.complete_time for op in ops if op.type == "ok" and op.complete_time is not None]
        for begun in pauses:
            inside = [t for t in acked if begun < t < begun + SURELY_STOPPED_S * 1e9]
            assert not inside, f"ops acknowledged {[(t - begun) / 1e6 for t in inside]} ms after the pause began"
        assert any(t < pauses[0] for t in acked) and any(t > pauses[-1] for t in acked), "the workers wrote before and after"
        assert (run_dir / "members" / "r1-redis.log").is_file()
        assert json.loads((run_dir / "results.json").read_text())["valid"] is True
        # after the run, as after a killed harness: nothing left to heal, the container's firewall not ours to read
        healed = leasecheck("heal", "--hosts", str(hosts), cwd=tmp_path)
        assert healed.returncode == 0, healed.stdout + healed.stderr
        assert "r1: firewall: no leasecheck rule: its firewall is not ours to read (iptables" in healed.stdout, healed.stdout
        assert "r1: processes: SIGCONT to " in healed.stdout, healed.stdout
    finally:
        run.close()
    assert os.path.exists(tmp_path / "redis" / "redis.log"), "the server's log is in its folder on this machine"
