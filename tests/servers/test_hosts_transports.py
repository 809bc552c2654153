"""Each way of reaching a host (ssh, a network namespace, a container) keeps the one Host contract, for real.

The contract (leasecheck/hosts/protocol.py): a command's exit code and both
outputs come back as they were (a non-zero exit is an answer, not an error),
stdin reaches it, a file written is replaced whole with mode 0644 and read back
byte for byte, a file is fetched into this machine, a missing file is a
HostFileError, and a host that cannot be reached is a HostUnreachable. Each
transport is held to it against a real peer: an sshd of the test's own on
loopback, a namespace of a HostNetwork, a container of a Docker engine (skipped,
with the reason, only when no engine can be had).

And ssh's host keys: an unknown key is refused, naming its fingerprint and both
ways to accept it; the key in a known_hosts file, or trust-host-key, lets it in;
a known_hosts file with another key for that host refuses it.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostlab import Keys, Sshd, free_port, start_sshd
from paths import REPO

from leasecheck.hosts.address import HostAddress, SshOptions, parse_address
from leasecheck.hosts.netns import NetnsHost
from leasecheck.hosts.protocol import Host, HostFileError, HostUnreachable
from leasecheck.hosts.ssh import SshHost
from leasecheck.hosts.transports import open_host
from leasecheck.servers.hosts import HostNetwork
from leasecheck.waiting import wait_for


def keep_the_contract(host: Host, folder: str, local: Path) -> None:
    """Everything the Host protocol promises, asserted on its real effects; ``folder`` is writable on the host."""
    ran = host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (ran.returncode, ran.stdout, ran.stderr) == (3, b"out\n", b"err\n")
    assert not ran.ok and "exit 3" in ran.why() and "err" in ran.why()
    assert host.run(["cat"], input=b"in\x00put\n").stdout == b"in\x00put\n"
    assert host.run(["sh", "-c", 'printf "%s|" "$@"', "sh", "a b", "$HOME", "*"]).stdout == b"a b|$HOME|*|", \
        "arguments cross as they are: no shell of the transport's splits or expands them"
    assert host.run(["sh", "-c", "kill -9 $$"]).returncode == -9, "a command killed by a signal: minus the signal"
    assert not host.run(["no-such-command-leasecheck"]).ok

    data = bytes(range(256)) * 40
    path = f"{folder}/file.bin"
    host.write_file(path, b"old")
    host.write_file(path, data)
    assert host.read_file(path) == data
    assert host.run(["stat", "-c", "%a", path]).out == "644"
    assert host.run(["sh", "-c", f"ls -a {folder} | grep -c leasecheck-tmp"]).out == "0", "no temporary file left"
    host.fetch(path, local)
    assert local.read_bytes() == data
    with pytest.raises(HostFileError, match="no-such-file"):
        host.read_file(f"{folder}/no-such-file")
    with pytest.raises(HostFileError):
        host.write_file(f"{folder}/no-such-folder/x", b"x")
    host.close()
    again = host.run(["echo", "again"])
    assert again.ok, f"a closed host is used again by reconnecting: {again.why()}"
    assert again.out == "again", again


# ---------------------------------------------------------------- ssh on loopback


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys.make(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory, keys: Keys) -> Iterator[Sshd]:
    server = start_sshd(tmp_path_factory.mktemp("sshd"), keys)
    yield server
    server.stop()


def ssh_host(sshd: Sshd, keys: Keys, **options: object) -> SshHost:
    address = parse_address(f"ssh://root@{sshd.address}:{sshd.port}")
    return SshHost("test", address, SshOptions(identities=(keys.client,), agent=False, **options))  # type: ignore[arg-type]


def test_ssh_keeps_the_contract(sshd: Sshd, keys: Keys, tmp_path: Path) -> None:
    keep_the_contract(ssh_host(sshd, keys, trust_host_key=True), str(tmp_path), tmp_path / "fetched")


def test_ssh_commands_from_many_threads_share_one_connection(sshd: Sshd, keys: Keys) -> None:
    """The nemesis acts from several threads at once: every command of each comes back to its caller."""
    from concurrent.futures import ThreadPoolExecutor

    host = ssh_host(sshd, keys, trust_host_key=True)
    with ThreadPoolExecutor(8) as pool:
        said = list(pool.map(lambda i: host.run(["sh", "-c", 'echo "$1 $SSH_CLIENT"', "sh", str(i)]).out, range(32)))
    assert [line.split()[0] for line in said] == [str(i) for i in range(32)]
    assert len({line.split()[2] for line in said}) == 1, f"one connection (one client port), its channels multiplexed: {said}"
    host.close()


def test_an_unknown_host_key_is_refused_with_its_fingerprint_and_the_ways_to_accept_it(
        sshd: Sshd, keys: Keys, tmp_path: Path) -> None:
    import asyncssh

    fingerprint = asyncssh.import_public_key(keys.host_public).get_fingerprint()
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(HostUnreachable) as refused:
        ssh_host(sshd, keys, known_hosts=empty).run(["true"])
    said = str(refused.value)
    assert "unknown" in said and fingerprint in said, said
    assert "trust-host-key = true" in said and f"ssh-keyscan -p {sshd.port} {sshd.address}" in said, said

    known = keys.known_hosts(tmp_path / "known_hosts", (sshd.address, sshd.port))
    assert ssh_host(sshd, keys, known_hosts=known).run(["echo", "known"]).out == "known"
    assert ssh_host(sshd, keys, trust_host_key=True).run(["echo", "trusted"]).out == "trusted"

    other = Keys.make(tmp_path / "other")  # the same host, another key: a man in the middle, or a rebuilt host
    wrong = other.known_hosts(tmp_path / "wrong_known_hosts", (sshd.address, sshd.port))
    with pytest.raises(HostUnreachable, match="unknown"):
        ssh_host(sshd, keys, known_hosts=wrong).run(["true"])


def test_ssh_that_cannot_reach_or_log_in_says_so(sshd: Sshd, keys: Keys, tmp_path: Path) -> None:
    closed = SshHost("gone", HostAddress("ssh", "127.0.0.1", "root", free_port()), SshOptions(trust_host_key=True))
    started = time.monotonic()
    with pytest.raises(HostUnreachable, match=re.escape("gone: cannot reach ssh://root@127.0.0.1")):
        closed.run(["true"])
    assert time.monotonic() - started < 5
    stranger = Keys.make(tmp_path / "stranger")
    refused = SshHost("m", parse_address(f"ssh://root@{sshd.address}:{sshd.port}"),
                      SshOptions(identities=(stranger.client,), agent=False, trust_host_key=True))
    with pytest.raises(HostUnreachable, match="refused every key"):
        refused.run(["true"])
    slow = ssh_host(sshd, keys, trust_host_key=True)
    with pytest.raises(HostUnreachable, match=re.escape("did not finish within 0.5 s")):
        slow.run(["sleep", "5"], timeout=0.5)
    assert slow.run(["echo", "after"]).out == "after", "a command that timed out leaves the connection usable"


# ---------------------------------------------------------------- a network namespace


def test_a_namespace_keeps_the_contract_and_runs_inside_it(tmp_path: Path) -> None:
    network = HostNetwork.open(2)
    try:
        m1 = network.host("m1")
        host = open_host(parse_address(f"netns://{m1.netns}"), name="m1")
        assert isinstance(host, NetnsHost)
        assert f"inet {m1.address}/24" in host.run(["ip", "-4", "-o", "addr", "show", "eth0"]).out, \
            "the command ran in the member's namespace, where its address is"
        keep_the_contract(host, str(tmp_path), tmp_path / "fetched")
    finally:
        network.close()
    with pytest.raises(HostUnreachable, match="no network namespace"):
        host.run(["true"])


# ---------------------------------------------------------------- a container


@pytest.fixture(scope="module")
def docker_client() -> Iterator[object]:
    """An engine that answers, started by scripts/start-dockerd.sh if need be; the tests skip, saying why, if none."""
    docker = pytest.importorskip("docker", reason="the docker extra is not installed")
    done = subprocess.run(["bash", str(REPO / "scripts" / "start-dockerd.sh")], capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        pytest.skip(f"no Docker engine (scripts/start-dockerd.sh exit {done.returncode}): {done.stdout[-500:]}")
    client = docker.from_env(timeout=60)
    yield client
    client.close()


def test_a_container_keeps_the_contract(docker_client: object, tmp_path: Path) -> None:
    from leasecheck.hosts.docker import DockerHost
    from leasecheck.servers.docker import DockerRun

    run = DockerRun.open(docker_client)  # type: ignore[arg-type]
    try:
        server = run.redis()
        server.start()
        assert server.container is not None
        host = open_host(parse_address(f"docker://{server.container.name}"), name="d1")
        assert isinstance(host, DockerHost)
        assert host.run(["cat", "/.dockerenv"]).ok, "the command ran in the container"
        assert host.run(["mkdir", "-p", "/work"]).ok
        keep_the_contract(host, "/work", tmp_path / "fetched")
    finally:
        run.close()
    with pytest.raises(HostUnreachable, match="no container"):
        host.run(["true"])


def test_a_quick_commands_output_that_comes_in_with_the_engines_answer_is_kept(
        docker_client: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Docker SDK's ``exec_run`` lost a quick command's output now and then (docker/docker-py#2042, #3332; once in
    this suite's CI, under load): what came in one read with the answer's headers stayed in the HTTP response's buffer.
    Here each answer is read only once the engine says every exec of the container has ended, so the output is always
    there with the headers; the host must still say it all."""
    import http.client

    from docker import APIClient

    from leasecheck.servers.docker import DockerRun

    api = docker_client.api  # type: ignore[attr-defined]
    run = DockerRun.open(docker_client)  # type: ignore[arg-type]
    try:
        server = run.redis()
        server.start()
        assert server.container is not None
        name = server.container.name
        begin, start, inside = http.client.HTTPResponse.begin, APIClient.exec_start, threading.local()

        def every_exec_ended() -> bool:
            return all(api.exec_inspect(e)["ExitCode"] is not None for e in api.inspect_container(name)["ExecIDs"] or ())

        def starting(client: APIClient, *args: Any, **kwargs: Any) -> Any:
            inside.starting = True
            try:
                return start(client, *args, **kwargs)
            finally:
                inside.starting = False

        def late_begin(response: http.client.HTTPResponse) -> None:
            if getattr(inside, "starting", False):  # the answer to an exec's start, read once the exec has ended
                inside.starting = False
                wait_for(every_exec_ended, 30.0, what="the exec's end")
            begin(response)

        monkeypatch.setattr(APIClient, "exec_start", starting)
        monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
        host = open_host(parse_address(f"docker://{name}"), name="d1")
        said = [host.run(["echo", "again"]) for _ in range(5)]
        assert [r.out for r in said] == ["again"] * 5, said
        both = host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (both.returncode, both.stdout, both.stderr) == (3, b"out\n", b"err\n"), both
        host.close()
    finally:
        monkeypatch.undo()
        run.close()
