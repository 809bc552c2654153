"""``leasecheck run`` refuses what cannot make a run before anything starts: exit 3, one line, no banner.

Found by a newcomer: ``--store FILE`` and ``--url 'not a url'`` exited 4 (the environment
failed) although they are usage errors; ``--nemesis kill-store --url ...`` ran 8.8 s and
ended ``unknown`` ("kill-store never started": there is no server of ours to kill); an
etcd lock with ``--ttl 500`` was an "internal error" (exit 4); and every refused run
first printed "replay with --seed N" for a run that never started. Each is refused here
before a store, a worker or a run folder exists.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leasecheck.servers.base import free_port

#: a store address nothing answers at: a refusal must come before anything tries to reach it
NOWHERE = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"

CASES = {
    "store-is-a-file": (["--store", "{file}"], "is a file, not a folder"),
    "store-below-a-file": (["--store", "{file}/runs"], "(on its path) is a file"),
    "url-not-a-url": (["--target", "postgres", "--url", "not a url"], "neither a postgresql:// URL nor a libpq"),
    "url-wrong-scheme": (["--target", "redis", "--url", NOWHERE], "a redis address starts with redis://"),
    "url-bad-port": (["--target", "postgres", "--url", "postgresql://u@h:port/db"], "--url: "),
    "kill-store-with-url": (["--target", "postgres", "--url", NOWHERE, "--nemesis", "kill-store"],
                            "kill-store acts on a store server that leasecheck started itself"),
    "pause-store-with-url": (["--target", "redis", "--url", "redis://127.0.0.1:1/0", "--nemesis", "pause,pause-store"],
                             "pause-store acts on a store server"),
    "require-no-such-situation": (["--require", "claim-twice"], "--require claim-twice: no such situation"),
    "ttl-the-library-cannot-take": (["--target", "etcd3-lock", "--ttl", "500"], "etcd leases last whole seconds"),
    "member-fault-without-a-cluster": (["--target", "redis", "--nemesis", "failover"],
                                       "failover acts on the members of a cluster: add --cluster KIND"),
    "one-server-fault-on-a-cluster": (["--target", "redis", "--cluster", "redis-sentinel", "--nemesis", "kill-store"],
                                      "kill-store acts on one store server; a cluster's faults are isolate-primary"),
    "cluster-of-another-store": (["--target", "redis", "--cluster", "postgres-standby"],
                                 "--cluster postgres-standby runs postgres; --target redis runs on redis"),
    "cluster-and-url": (["--target", "redis", "--cluster", "redis-sentinel", "--url", "redis://127.0.0.1:1/0"],
                        "--url names a store of yours"),
    "clock-of-a-go-member": (["--target", "etcd3-lock", "--cluster", "etcd-cluster", "--nemesis", "clock-member"],
                             "clock-member skews a member's clock under libfaketime, which etcd-cluster cannot take"),
}


@pytest.mark.parametrize("case", CASES)
def test_refused_before_anything_starts(case: str, tmp_path: Path) -> None:
    args, said = CASES[case]
    (tmp_path / "afile").write_text("not a folder")
    argv = [a.replace("{file}", str(tmp_path / "afile")) for a in args]
    store = ["--store", str(tmp_path / "store")] if "--store" not in argv else []
    done = subprocess.run([sys.executable, "-m", "leasecheck", "run", *argv, *store], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("leasecheck run: ") and said in lines[0], lines
    assert "replay" not in done.stderr + done.stdout, "a run that never started has no seed to replay"
    assert not (tmp_path / "store").exists(), "a refused run made a run folder"


def test_run_help_names_every_exit_code() -> None:
    done = subprocess.run([sys.executable, "-m", "leasecheck", "run", "--help"], capture_output=True, text=True, timeout=60)
    text = " ".join(done.stdout.split())
    for code in ("0 valid", "1 anomalies", "2 unknown", "3 bad options", "4 the environment failed", "130 / 143 interrupted"):
        assert code in text, code
