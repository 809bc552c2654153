"""Toxiproxy found wherever leasecheck is installed, and ``leasecheck install-toxiproxy`` (issue 9, item 5).

A plain ``pip install`` has no checkout: no ``scripts/``, no ``.cache/bin``.
So the server is looked up on PATH, then in the per-user cache
``$XDG_CACHE_HOME/leasecheck/bin``; the command builds it there for real
(Go's module and build caches make a rebuild a few seconds), and a run that
needs it and cannot find it exits 4 naming that command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

from leasecheck.servers import tools
from leasecheck.servers.base import EnvironmentFailure
from leasecheck.servers.tools import INSTALL_COMMAND, TOXIPROXY_BINARY, TOXIPROXY_VERSION, cache_bin_dir, find_toxiproxy
from leasecheck.servers.toxiproxy import ToxiproxyServer


def fake_binary(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TOXIPROXY_BINARY
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def path_without_toxiproxy() -> str:
    """This machine's PATH minus any folder holding a toxiproxy-server (go, redis-server stay)."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(f for f in folders if f and not (Path(f) / TOXIPROXY_BINARY).exists())


def test_the_cache_is_per_user_and_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_bin_dir() == tmp_path / "xdg" / "leasecheck" / "bin"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for unset in ("", "relative/cache"):  # the XDG spec: a relative path is ignored
        monkeypatch.setenv("XDG_CACHE_HOME", unset)
        assert cache_bin_dir() == tmp_path / "home" / ".cache" / "leasecheck" / "bin"


def test_path_comes_first_then_the_per_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_toxiproxy() is None
    with pytest.raises(EnvironmentFailure) as failure:
        tools.require_toxiproxy()
    assert INSTALL_COMMAND in str(failure.value) and str(cache_bin_dir()) in str(failure.value)
    cached = fake_binary(cache_bin_dir())
    assert find_toxiproxy() == str(cached)
    on_path = fake_binary(tmp_path / "bin")
    assert find_toxiproxy() == str(on_path)


def test_no_go_toolchain_is_an_environment_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tools.shutil, "which", lambda name: None)
    with pytest.raises(EnvironmentFailure, match="no Go toolchain"):
        tools.install_toxiproxy(tmp_path)


def test_a_run_without_toxiproxy_exits_4_naming_the_command(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "empty-cache"), "PATH": path_without_toxiproxy()}
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "run", "--target", "redis", "--nemesis", "partition",
         "--time-limit", "1", "--store", str(tmp_path / "store")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert INSTALL_COMMAND in done.stderr and "Traceback" not in done.stderr


def test_install_builds_the_pinned_version_once_under_a_lock(tmp_path: Path) -> None:
    go = tools.find_go()
    go_cache = subprocess.run([go, "env", "GOCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    # a new XDG_CACHE_HOME would also move Go's build cache: keep the warm one (a cold build is ~40 s, not 2)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "GOCACHE": go_cache}
    command = [sys.executable, "-m", "leasecheck", "install-toxiproxy"]
    twins = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in twins]
    assert [p.returncode for p in twins] == [0, 0], outputs
    binary = tmp_path / "xdg" / "leasecheck" / "bin" / TOXIPROXY_BINARY
    assert [out.strip().splitlines()[-1] for out, _ in outputs] == [str(binary)] * 2
    assert sum(err.count("building") for _, err in outputs) == 1, outputs  # the other one waited and found it
    assert tools.built_version(go, binary, tools.TOXIPROXY_MODULE) == TOXIPROXY_VERSION

    script = subprocess.run(["bash", str(REPO / "scripts" / "install-toxiproxy.sh")], capture_output=True, text=True, env=env, timeout=600)
    assert script.returncode == 0 and script.stdout.strip().splitlines()[-1] == str(binary)
    assert "building" not in script.stderr  # idempotent: the same version is kept

    server = ToxiproxyServer(tmp_path / "server", binary=binary).start()
    try:
        assert server.version() == TOXIPROXY_VERSION.removeprefix("v")
    finally:
        server.stop()
