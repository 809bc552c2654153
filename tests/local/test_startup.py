"""What a command imports: `check --json` and `--help` start without rich, networkx or a database client.

Start-up is most of the wall time of checking a small history (a CI gate checks
many), so the CLI imports the heavy parts only in the commands that use them.
This holds the line by the modules a fresh interpreter has loaded when the
command exits, not by a timing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from paths import EXAMPLES

#: what a command that only reads a history must never load
HEAVY = ("rich", "networkx", "psycopg", "redis", "docker", "matplotlib", "numpy", "kazoo", "etcd3", "sqlalchemy",
         "toxiproxy", "http.client", "subprocess", "leasecheck.targets", "leasecheck.servers", "leasecheck.report.terminal")

PROBE = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: sys.__stderr__.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
    "from leasecheck.cli import main\n"
    "main()\n"
)


def modules_of(*args: str) -> tuple[int, set[str]]:
    """Run ``leasecheck ARGS`` in a fresh interpreter: its exit code and every module it had loaded at exit."""
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("MODULES "))
    return r.returncode, set(json.loads(line.removeprefix("MODULES ")))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(("history", "code"), [
    ("clean-run-three-nodes-four-workers.jsonl", 0),
    ("stale-commit-after-takeover.jsonl", 1),
    ("non-linearizable-claim-after-commit.jsonl", 1),
    ("bad-input-index-gap.jsonl", 3),
])
def test_check_json_loads_nothing_heavy(history: str, code: int) -> None:
    rc, modules = modules_of("check", "--json", str(EXAMPLES / history))
    assert rc == code
    assert "leasecheck.checker" in modules  # the probe saw the check run
    assert heavy(modules) == []


def test_help_loads_nothing_heavy() -> None:
    rc, modules = modules_of("--help")
    assert rc == 0
    assert heavy(modules) == []


def test_check_without_json_loads_rich_only_to_print() -> None:
    """The terminal verdict is rich's (the control: the probe does see a heavy import when one happens)."""
    rc, modules = modules_of("check", str(EXAMPLES / "stale-commit-after-takeover.jsonl"))
    assert rc == 1
    assert "rich" in modules
    assert not any(m.startswith(("networkx", "psycopg", "redis", "docker")) for m in modules)
