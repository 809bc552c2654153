"""A host lost in the middle of a run: the fault it failed under is in the history, and the run is never valid (issue 35).

A team's one Redis on "another host" (here: this machine, reached only through an sshd of the test's own on
loopback, as a deployment of one member). The moment the run's ``pause-store`` has the server stopped (seen in
``/proc``: the server is the test's own process), the test kills that sshd and every session it serves: the
``kill -STOP`` may not have told its exit yet (its start lost its host), and the pause's heal (``kill -CONT``)
cannot be sent. The run does not end on it: the history has a ``fault-failed`` event, with the error; the server
stays stopped (a start that lost its host counts as done, and is undone); the run goes on (the test continues its
own server once the run's log says so), tries the heal once more at the end, and comes out ``unknown`` (exit 2),
naming it; it is never valid. Once an sshd answers again, ``leasecheck heal --hosts`` undoes it from the deployment
alone. Before issue 35's fix the lost connection ended the run with exit 4, and a start that lost its host was never
undone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hostlab import Keys, free_port, start_sshd

from leasecheck.servers.base import popen
from leasecheck.waiting import poll

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sshd runs as root here")

#: the lease's ttl: ``pause-store`` stops the server 0.5-1.5 ttl, so the SSH is gone long before its heal is due
TTL_MS = 3000


def _state(pid: int) -> str:
    """The process' state letter from ``/proc`` (``T``: stopped), ``X`` once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (an sshd's sessions: the processes it forked for each connection)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _lose(sshd: subprocess.Popen[bytes]) -> None:
    """The host is lost: the sshd (the test's own) and every session below it killed, so the connection drops."""
    below = _descendants(sshd.pid)
    sshd.kill()
    sshd.wait()
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_host_lost_while_a_fault_is_on_leaves_the_run_unknown_naming_the_heal_that_failed(tmp_path: Path) -> None:
    keys = Keys.make(tmp_path / "keys")
    ssh_port, redis_port = free_port(), free_port()
    sshd = start_sshd(tmp_path / "sshd", keys, port=ssh_port)
    known = keys.known_hosts(tmp_path / "known_hosts", ("127.0.0.1", ssh_port))
    home = tmp_path / "redis"
    home.mkdir()
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--dir", str(home), "--save", "",
            "--appendonly", "yes", "--appendfsync", "always"]
    server = popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    run: subprocess.Popen[str] | None = None
    try:
        deployment = tmp_path / "one.toml"
        deployment.write_text('store = "redis"\n' + keys.ssh_table(known) + textwrap.dedent(f"""
            [[member]]
            name = "r1"
            host = "ssh://root@127.0.0.1:{ssh_port}"
            address = "127.0.0.1"
            process = {{ pattern = "redis-server 127.0.0.1:{redis_port}" }}
            """))
        assert poll(lambda: _state(server.pid) in "SR", 10.0, every=0.05), "redis-server did not start"
        store = tmp_path / "store"
        out_file, err_file = tmp_path / "run.json", tmp_path / "run.err"  # files, not pipes: nobody reads them meanwhile
        with out_file.open("w") as out, err_file.open("w") as err:
            run = subprocess.Popen(
                [sys.executable, "-m", "leasecheck", "run", "--target", "redis", "--url", f"redis://127.0.0.1:{redis_port}",
                 "--hosts", str(deployment), "--nemesis", "pause-store", "--ttl", str(TTL_MS), "--time-limit", "12",
                 "--evidence-wait", "20", "--seed", "1", "--store", str(store), "--json"],
                cwd=tmp_path, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        # the pause began (the server is stopped): the host is lost before its heal is due
        assert poll(lambda: _state(server.pid) == "T" or run.poll() is not None, 120.0, every=0.005), "never paused"
        assert run.poll() is None, err_file.read_text()[-3000:]
        _lose(sshd.process)
        log = (store / "latest").resolve() / "leasecheck.log"
        said = " of pause-store failed: r1: "
        assert poll(lambda: said in log.read_text(errors="replace") or run.poll() is not None, 120.0, every=0.05), \
            log.read_text(errors="replace")[-3000:]
        assert _state(server.pid) == "T", "nobody else continues it: its heal really failed"
        os.kill(server.pid, signal.SIGCONT)  # the test's own server, continued so the run can read its nodes back
        run.wait(timeout=300)
        assert run.returncode == 2, err_file.read_text()[-3000:]
        results = json.loads(out_file.read_text())
        assert results["valid"] == "unknown", results
        assert "what the run tested is not sure: the " in results["reason"], results["reason"]
        assert " of pause-store failed (r1: " in results["reason"], results["reason"]
        run_dir = (store / "latest").resolve()
        failed = [json.loads(line)["value"] for line in (run_dir / "history.jsonl").read_text().splitlines()
                  if '"fault-failed"' in line]
        assert failed and failed[0]["fault"] == "pause-store" and failed[0]["step"] in ("start", "heal"), failed
        assert failed[0]["error"].startswith("r1: "), failed
        assert len(failed) <= 2, failed  # a start that lost its host, or its heal; then it holds the store: no more tried
        # the host answers again: `leasecheck heal --hosts` undoes what the run could not, from the deployment alone
        again = start_sshd(tmp_path / "sshd", keys, port=ssh_port)
        try:
            os.kill(server.pid, signal.SIGSTOP)  # as the run left it, had the test not continued it
            healed = subprocess.run([sys.executable, "-m", "leasecheck", "heal", "--hosts", str(deployment)], cwd=tmp_path,
                                    capture_output=True, text=True, timeout=120)
            assert healed.returncode == 0, healed.stdout + healed.stderr
            assert f"r1: processes: SIGCONT to {server.pid}" in healed.stdout, healed.stdout
            assert _state(server.pid) in "SR", _state(server.pid)
        finally:
            again.stop()
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        sshd.stop()
        if server.poll() is None:
            os.kill(server.pid, signal.SIGCONT)
            server.terminate()
            server.wait(10)
