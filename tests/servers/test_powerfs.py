"""The power-loss layer mounted for real (FUSE, mfusepy): what a program reads, what a power loss leaves, and that no
mount outlives its layer, its harness, or ``leasecheck heal``.

Every file here is written through the kernel by ordinary system calls (``os.write``, ``os.fsync`` of a file and
of a folder, ``os.rename``), as a store would write it; the disk is the backing folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from paths import REPO

from leasecheck.cli import main
from leasecheck.errors import EnvironmentFailure
from leasecheck.machine.mounts import mounted, mounts, powerfs_mounts
from leasecheck.servers import powerfs_layer
from leasecheck.servers.base import python_module
from leasecheck.servers.powerfs_layer import POWERFS_MODULE, PowerLayer
from leasecheck.servers.powerfs_nodes import PAGE
from leasecheck.waiting import wait_for


@pytest.fixture
def layer(tmp_path: Path) -> Iterator[PowerLayer]:
    with PowerLayer(tmp_path / "disk", tmp_path / "mnt", tmp_path / "ctl.sock", tmp_path / "powerfs.log") as mounted_layer:
        yield mounted_layer


def put(path: Path, data: bytes, offset: int = 0, sync: bool = False) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_a_power_loss_leaves_exactly_the_synced_bytes(layer: PowerLayer) -> None:
    f = layer.mount_point / "wal"
    synced = bytes(range(256)) * 40  # 10240 bytes: two pages and a half
    put(f, synced, sync=True)
    fsync_folder(layer.mount_point)
    put(f, b"\xff" * 3000, 5000)  # inside the second page
    put(f, b"tail", len(synced))  # past the synced end, in the third
    now = synced[:5000] + b"\xff" * 3000 + synced[8000:] + b"tail"
    assert f.read_bytes() == now, "a read before the loss sees every write"
    assert layer.stats() == {"bytes": PAGE + (len(now) - 2 * PAGE), "files": 1, "entries": 0}  # two dirty pages
    dropped = layer.power_loss()
    assert dropped["files"] == 1 and dropped["bytes"] == PAGE + len(now) - 2 * PAGE
    assert f.read_bytes() == synced
    assert (layer.backing / "wal").read_bytes() == synced


def test_a_file_in_a_folder_never_fsynced_is_lost_and_kept_once_the_folder_is(layer: PowerLayer) -> None:
    folder = layer.mount_point / "appendonlydir"
    folder.mkdir()
    put(folder / "aof", b"SET k v", sync=True)  # the file's data, not its name, nor its folder's
    assert layer.stats()["entries"] == 2
    assert layer.power_loss()["entries"] == 2
    assert not folder.exists()
    folder.mkdir()
    fsync_folder(layer.mount_point)
    put(folder / "aof", b"SET k v", sync=True)
    layer.power_loss()
    assert folder.is_dir() and os.listdir(folder) == []
    put(folder / "aof", b"SET k v", sync=True)
    fsync_folder(folder)
    layer.power_loss()
    assert (folder / "aof").read_bytes() == b"SET k v"


def test_a_rename_is_lost_until_its_folder_is_fsynced(layer: PowerLayer) -> None:
    put(layer.mount_point / "manifest", b"old", sync=True)
    put(layer.mount_point / "manifest.tmp", b"new", sync=True)
    fsync_folder(layer.mount_point)
    os.rename(layer.mount_point / "manifest.tmp", layer.mount_point / "manifest")
    assert (layer.mount_point / "manifest").read_bytes() == b"new"
    layer.power_loss()
    assert sorted(os.listdir(layer.mount_point)) == ["manifest", "manifest.tmp"]
    assert (layer.mount_point / "manifest").read_bytes() == b"old"
    os.rename(layer.mount_point / "manifest.tmp", layer.mount_point / "manifest")
    fsync_folder(layer.mount_point)
    layer.power_loss()
    assert os.listdir(layer.mount_point) == ["manifest"] and (layer.mount_point / "manifest").read_bytes() == b"new"


def test_a_torn_page_is_half_new_and_half_old(layer: PowerLayer) -> None:
    f = layer.mount_point / "data"
    put(f, b"o" * (2 * PAGE), sync=True)
    fsync_folder(layer.mount_point)
    put(f, b"n" * PAGE, PAGE)
    dropped = layer.power_loss(torn=True)
    assert dropped["torn"] == 1
    assert f.read_bytes() == b"o" * PAGE + b"n" * (PAGE // 2) + b"o" * (PAGE // 2)


def test_a_layer_whose_process_is_killed_is_taken_off_by_its_guard(layer: PowerLayer) -> None:
    pid = layer.pid
    assert pid is not None and layer.is_mounted
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not layer.is_mounted, 10, what="the guard to take the dead layer's mount off")


def test_a_killed_harness_leaves_no_mount(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from leasecheck.servers.powerfs_layer import PowerLayer
        layer = PowerLayer({str(tmp_path / 'disk')!r}, {str(tmp_path / 'mnt')!r}).mount()
        print(layer.pid, flush=True)
        time.sleep(120)
    """)
    harness = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert harness.stdout is not None
        layer_pid = int(harness.stdout.readline())
        mount = os.path.realpath(tmp_path / "mnt")
        assert mounted(mount)
        harness.kill()
        harness.wait()
        wait_for(lambda: not mounted(mount), 10, what="the killed harness's mount to go")
        wait_for(lambda: not Path(f"/proc/{layer_pid}").exists() or "Z" in Path(f"/proc/{layer_pid}/stat").read_text().split(")")[-1][:3],
                 10, what="the layer's process to end")
    finally:
        harness.kill()
        harness.wait()


def test_leasecheck_heal_takes_off_a_layer_whose_process_died(tmp_path: Path) -> None:
    """No guard here (the layer started by hand): its mount stays, dead, until ``leasecheck heal``."""
    (tmp_path / "disk").mkdir()
    (tmp_path / "mnt").mkdir()
    mount = os.path.realpath(tmp_path / "mnt")
    layer = subprocess.Popen([*python_module(POWERFS_MODULE), str(tmp_path / "disk"), mount, str(tmp_path / "ctl.sock")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        wait_for(lambda: mounted(mount), 10, what="the layer to mount")
        layer.kill()
        layer.wait()
        assert (layer.pid, mount) in powerfs_mounts()
        with pytest.raises(OSError):  # dead: "Transport endpoint is not connected"
            os.listdir(mount)
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        r = CliRunner().invoke(main, ["heal", str(run_dir)], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        assert f"removed {mount}" in r.stdout
        assert not mounted(mount)
    finally:
        layer.kill()
        layer.wait()
        if mounted(mount):
            subprocess.run(["fusermount3", "-u", "-z", mount], check=False)


def test_without_fuse_the_mount_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(powerfs_layer, "FUSE_DEVICE", str(tmp_path / "no-fuse"))
    with pytest.raises(EnvironmentFailure) as e:
        PowerLayer(tmp_path / "disk", tmp_path / "mnt").mount()
    assert str(e.value) == f"powerfs: {tmp_path / 'no-fuse'} is missing (the kernel's FUSE module; in a container: --device /dev/fuse --cap-add SYS_ADMIN)"
    monkeypatch.setattr(powerfs_layer, "FUSE_DEVICE", "/dev/fuse")
    monkeypatch.setattr(powerfs_layer.shutil, "which", lambda name: None)
    with pytest.raises(EnvironmentFailure, match=r"^powerfs: fusermount3 is not on PATH \(apt-get install fuse3\)$"):
        PowerLayer(tmp_path / "disk", tmp_path / "mnt").mount()


def test_proc_mounts_is_read_with_its_escapes(tmp_path: Path) -> None:
    table = tmp_path / "mounts"
    table.write_text("/dev/vda / ext4 rw 0 0\n"
                     "leasecheck-powerfs-4242 /tmp/run\\040one/redis fuse.powerfs rw,allow_other 0 0\n"
                     "leasecheck-powerfs-x /tmp/other fuse.powerfs rw 0 0\n"
                     "leasecheck-powerfs-7 /tmp/not-fuse ext4 rw 0 0\n")
    assert mounts(str(table))[1].target == "/tmp/run one/redis"
    assert powerfs_mounts(str(table)) == [(4242, "/tmp/run one/redis")]

