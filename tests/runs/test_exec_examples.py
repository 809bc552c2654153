"""The example exec targets under examples/exec-targets/, in Go and in Node.js.

First each child is driven directly over its stdin/stdout, the way
docs/contracts/exec-protocol.md says leasecheck talks to it: the hello line,
then one request at a time, asserting on every answer. Then end to end through
``leasecheck run --target exec:COMMAND``: the fenced Go lease must come out
valid under worker pauses and kills (and partitions), and the Node lease that
trusts the queue must be caught under duplicate delivery with a kind its
README documents.

The Go example is built here with the machine's Go toolchain (its module
fetched through the Go module proxy). A missing ``go`` or ``node`` fails the
test with the reason, never skips it: CI without them must be red.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from paths import REPO

from leasecheck.histories import read_history
from leasecheck.run.runner import RunOptions, RunResult, run
from leasecheck.servers.base import EnvironmentFailure, LocalServer, free_port
from leasecheck.servers.redis import RedisServer
from leasecheck.servers.tools import INSTALL_COMMAND, find_toxiproxy

EXAMPLES = REPO / "examples" / "exec-targets"
GO_EXAMPLE = EXAMPLES / "go-redis-fenced"
NODE_SCRIPT = EXAMPLES / "node-trusts-queue" / "main.js"

#: how long a child may take for its hello or one answer (its own Redis timeout is 2 s)
ANSWER_S = 15.0
#: a lease nobody outlives in these conversations
LONG_TTL_MS = 60_000


def _tool(name: str, why: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not on PATH: it is needed to {why} (CI machines have it preinstalled)", pytrace=False)
    return found


@pytest.fixture(scope="session")
def go_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/exec-targets/go-redis-fenced built with ``go build``, into a temporary folder."""
    go = _tool("go", "build examples/exec-targets/go-redis-fenced")
    out = tmp_path_factory.mktemp("go-bin") / "go-redis-fenced"
    built = subprocess.run(
        # -buildvcs=false: a checkout owned by another user makes go's git stamping fail the build
        [go, "build", "-buildvcs=false", "-o", str(out), "."], cwd=GO_EXAMPLE, capture_output=True, text=True, timeout=900,
    )
    if built.returncode != 0:
        pytest.fail(f"go build of {GO_EXAMPLE} failed ({built.returncode}):\n{built.stderr}", pytrace=False)
    return out


@pytest.fixture(scope="session")
def node() -> str:
    return _tool("node", "run examples/exec-targets/node-trusts-queue")


@dataclass
class Child:
    """An exec target driven the way leasecheck drives it: JSON Lines, one request at a time."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)
    next_id: int = 0

    def __post_init__(self) -> None:
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # end of output

    def line(self) -> dict[str, Any]:
        """The child's next line, as JSON."""
        try:
            line = self.lines.get(timeout=ANSWER_S)
        except queue.Empty:
            raise AssertionError(f"no line from the child within {ANSWER_S:g} s") from None
        assert line is not None, f"the child exited ({self.proc.wait()}): {self.stderr()}"
        return json.loads(line)

    def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request, return its answer without the id (checked to be the request's)."""
        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": self.next_id, "op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        answer = self.line()
        assert answer.pop("id") == self.next_id, answer
        return answer

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


def start(command: list[str], url: str, ttl_ms: int = LONG_TTL_MS) -> Child:
    env = {**os.environ, "LEASECHECK_URL": url, "LEASECHECK_TTL_MS": str(ttl_ms)}
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return Child(proc)


@pytest.fixture
def spawn() -> Iterator[Any]:
    """``spawn(command, url)``: a started child; every one is stopped when the test ends."""
    children: list[Child] = []

    def make(command: list[str], url: str, ttl_ms: int = LONG_TTL_MS) -> Child:
        child = start(command, url, ttl_ms)
        children.append(child)
        return child

    yield make
    for child in children:
        if child.proc.poll() is None:
            child.proc.kill()
        child.proc.wait()
        for pipe in (child.proc.stdin, child.proc.stdout, child.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def commands(go_binary: Path, node: str) -> dict[str, list[str]]:
    return {"go-redis-fenced": [str(go_binary)], "node-trusts-queue": [node, str(NODE_SCRIPT)]}


def new_node() -> str:
    return f"run-{uuid.uuid4().hex[:8]}/deploy"


HELLO = {
    "go-redis-fenced": {"leasecheck": 1, "name": "go-redis-fenced", "fenced": True, "resource": True},
    "node-trusts-queue": {"leasecheck": 1, "name": "node-trusts-queue", "fenced": True, "resource": True},
}

# ---------------------------------------------------------------- 1. the protocol, child by child


def test_go_fenced_lease_conversation(spawn: Any, commands: dict[str, list[str]], redis_server: LocalServer) -> None:
    """Every rule of the fenced lease, one answer at a time: held, stale, terminal, and the record."""
    child = spawn(commands["go-redis-fenced"], redis_server.url)
    assert child.line() == HELLO["go-redis-fenced"]
    n = new_node()
    assert child.ask("setup") == {"ok": True}
    assert child.ask("add_nodes", nodes=[n]) == {"ok": True}

    first = child.ask("claim", node=n, owner="w1", ttl_ms=LONG_TTL_MS)
    assert first["ok"] is True and isinstance(first["epoch"], int) and first["epoch"] > 0, first
    e1 = first["epoch"]
    assert child.ask("claim", node=n, owner="w2", ttl_ms=LONG_TTL_MS) == {"ok": False, "reason": "held"}
    lease1 = {"node": n, "epoch": e1, "token": None}
    assert child.ask("renew", **lease1, ttl_ms=LONG_TTL_MS) == {"ok": True}
    assert child.ask("effect", **lease1, payload="p1") == {"ok": True}
    assert child.ask("read", node=n) == {"ok": True, "status": "RUNNING", "epoch": e1, "owner": "w1", "result": None}

    # w1 gives the lease back; w2 takes it with a larger epoch, and w1 is now stale everywhere
    assert child.ask("release", **lease1) == {"ok": True}
    second = child.ask("claim", node=n, owner="w2", ttl_ms=LONG_TTL_MS)
    assert second["ok"] is True and second["epoch"] > e1, second
    e2 = second["epoch"]
    lease2 = {"node": n, "epoch": e2, "token": None}
    for op, extra in (("renew", {"ttl_ms": LONG_TTL_MS}), ("effect", {"payload": "p-zombie"}), ("commit", {"result": "r-zombie"})):
        answer = child.ask(op, **lease1, **extra)
        assert answer["ok"] is False and answer["reason"] == "stale", (op, answer)

    assert child.ask("effect", **lease2, payload="p2") == {"ok": True}
    # the resource, read back: both accepted effects in order, the zombie's refused one absent, fenced at e2
    assert child.ask("read_resource", node=n) == {
        "ok": True, "fence": e2, "accepted": [{"epoch": e1, "payload": "p1"}, {"epoch": e2, "payload": "p2"}]}
    assert child.ask("commit", **lease2, result="r2") == {"ok": True}
    assert child.ask("read", node=n) == {"ok": True, "status": "SUCCEEDED", "epoch": e2, "owner": "w2", "result": "r2"}
    assert child.ask("claim", node=n, owner="w3", ttl_ms=LONG_TTL_MS) == {"ok": False, "reason": "terminal"}
    assert child.ask("renew", **lease2, ttl_ms=LONG_TTL_MS) == {"ok": False, "reason": "terminal"}
    # a node nobody added reads as READY at epoch 0
    assert child.ask("read", node=new_node()) == {"ok": True, "status": "READY", "epoch": 0, "owner": None, "result": None}


def test_go_lease_expires_by_the_servers_clock(spawn: Any, commands: dict[str, list[str]], redis_server: LocalServer) -> None:
    """A 1 ms lease runs out: its renew is refused ``expired``, and then another claim takes the node."""
    child = spawn(commands["go-redis-fenced"], redis_server.url, ttl_ms=1)  # the ttl from LEASECHECK_TTL_MS
    assert child.line() == HELLO["go-redis-fenced"]
    n = new_node()
    assert child.ask("add_nodes", nodes=[n]) == {"ok": True}
    e1 = child.ask("claim", node=n, owner="w1")["epoch"]
    # each granted renew extends the lease by 1 ms; one arriving later than that is refused
    for _ in range(10_000):
        answer = child.ask("renew", node=n, epoch=e1, token=None)
        if answer != {"ok": True}:
            break
    assert answer == {"ok": False, "reason": "expired"}, answer
    second = child.ask("claim", node=n, owner="w2", ttl_ms=LONG_TTL_MS)
    assert second["ok"] is True and second["epoch"] > e1, second
    assert child.ask("renew", node=n, epoch=e1, token=None)["reason"] == "stale"


def test_node_trusting_lease_conversation(spawn: Any, commands: dict[str, list[str]], redis_server: LocalServer) -> None:
    """The broken lease answers every request, and grants what a fenced lease refuses: that is its bug."""
    child = spawn(commands["node-trusts-queue"], redis_server.url)
    hello = child.line()
    assert {k: hello[k] for k in ("leasecheck", "name", "fenced", "resource")} == HELLO["node-trusts-queue"]
    assert "overlapping-lease" in hello["expected"], hello
    n = new_node()
    assert child.ask("setup") == {"ok": True}
    assert child.ask("add_nodes", nodes=[n]) == {"ok": True}

    first = child.ask("claim", node=n, owner="w1", ttl_ms=LONG_TTL_MS)
    assert first["ok"] is True and isinstance(first["epoch"], int), first
    e1 = first["epoch"]
    # the bug: a second delivery of the node is granted while w1's lease is live (a fenced lease says held)
    second = child.ask("claim", node=n, owner="w2", ttl_ms=LONG_TTL_MS)
    assert second["ok"] is True and second["epoch"] > e1, second
    e2 = second["epoch"]
    lease1 = {"node": n, "epoch": e1, "token": None}
    lease2 = {"node": n, "epoch": e2, "token": None}
    assert child.ask("read", node=n) == {"ok": True, "status": "RUNNING", "epoch": e2, "owner": "w2", "result": None}
    # ... and the stale holder is not fenced off: renew, effect and commit of epoch e1 all succeed
    assert child.ask("renew", **lease1, ttl_ms=LONG_TTL_MS) == {"ok": True}
    assert child.ask("effect", **lease1, payload="p1") == {"ok": True}
    assert child.ask("renew", **lease2, ttl_ms=LONG_TTL_MS) == {"ok": True}
    assert child.ask("effect", **lease2, payload="p2") == {"ok": True}
    assert child.ask("commit", **lease2, result="r2") == {"ok": True}
    assert child.ask("commit", **lease1, result="r1") == {"ok": True}  # duplicate, stale commit: accepted
    # its resource keeps no fence (null) and holds both owners' writes, in the order they landed
    assert child.ask("read_resource", node=n) == {
        "ok": True, "fence": None, "accepted": [{"epoch": e1, "payload": "p1"}, {"epoch": e2, "payload": "p2"}]}
    assert child.ask("read", node=n) == {"ok": True, "status": "SUCCEEDED", "epoch": e2, "owner": "w2", "result": "r1"}
    # only a finished node is refused
    assert child.ask("claim", node=n, owner="w3", ttl_ms=LONG_TTL_MS) == {"ok": False, "reason": "terminal"}
    assert child.ask("renew", **lease1, ttl_ms=LONG_TTL_MS) == {"ok": False, "reason": "terminal"}
    assert child.ask("release", **lease2) == {"ok": False, "reason": "terminal"}


# ---------------------------------------------------------------- 2. the store's failures, as the protocol names them


@pytest.mark.parametrize("example", ["go-redis-fenced", "node-trusts-queue"])
def test_unreachable_redis_is_unavailable(spawn: Any, commands: dict[str, list[str]], example: str) -> None:
    """Nothing listens on the port: nothing was sent, so the op definitely did not happen."""
    child = spawn(commands[example], f"redis://127.0.0.1:{free_port()}/0")
    assert child.line()["name"] == example
    answer = child.ask("claim", node=new_node(), owner="w1", ttl_ms=LONG_TTL_MS)
    assert answer["error"] == "unavailable" and answer["message"], answer
    assert "ok" not in answer


@pytest.mark.parametrize("example", ["go-redis-fenced", "node-trusts-queue"])
def test_a_paused_redis_makes_the_op_indeterminate(
    spawn: Any, commands: dict[str, list[str]], example: str, tmp_path: Path
) -> None:
    """The claim reached a server that stopped answering: it may run on resume, so its outcome is unknown."""
    try:
        server = RedisServer(tmp_path / "redis").start()
    except EnvironmentFailure as e:
        pytest.fail(f"cannot start redis: {e}", pytrace=False)
    try:
        child = spawn(commands[example], server.url)
        assert child.line()["name"] == example
        n = new_node()
        assert child.ask("add_nodes", nodes=[n]) == {"ok": True}  # connected
        server.pause()
        try:
            answer = child.ask("claim", node=n, owner="w1", ttl_ms=LONG_TTL_MS)
        finally:
            server.resume()
        assert answer["error"] == "indeterminate" and answer["message"], answer
        # the child goes on: the next op reconnects and is answered
        assert child.ask("read", node=n)["ok"] is True
    finally:
        server.stop()


@pytest.mark.parametrize("example", ["go-redis-fenced", "node-trusts-queue"])
@pytest.mark.parametrize("line", ["not json", '{"op": "read", "node": "x"}'])
def test_a_line_that_is_not_a_request_ends_the_child_with_a_message(
    spawn: Any, commands: dict[str, list[str]], redis_server: LocalServer, example: str, line: str
) -> None:
    """A garbled request is leasecheck's bug, not a store's answer: the child says so on stderr and exits 2."""
    child = spawn(commands[example], redis_server.url)
    assert child.line()["name"] == example
    assert child.proc.stdin is not None
    child.proc.stdin.write(line + "\n")
    child.proc.stdin.flush()
    assert child.proc.wait(timeout=ANSWER_S) == 2
    assert example in child.stderr()


@pytest.mark.parametrize("example", ["go-redis-fenced", "node-trusts-queue"])
def test_no_url_ends_the_child_before_its_hello(commands: dict[str, list[str]], example: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LEASECHECK_URL"}
    done = subprocess.run(commands[example], input="", capture_output=True, text=True, env=env, timeout=ANSWER_S)
    assert done.returncode == 2 and done.stdout == "", done
    assert "LEASECHECK_URL" in done.stderr


# ---------------------------------------------------------------- 3. end to end: leasecheck run --target exec:COMMAND

TTL_MS = 300
#: how long past its time limit a run may go on while it still lacks what the run verdict needs
#: (contention, every fault started and healed): a loaded machine does less per second
EVIDENCE_WAIT_S = 90.0
#: what the Node example's README promises leasecheck finds under duplicate delivery
NODE_KINDS = {"overlapping-lease", "stale-commit", "duplicate-commit", "stale-effect", "stale-renew", "lost-commit", "non-linearizable"}


def run_exec(tmp_path: Path, command: list[str], **kw: Any) -> RunResult:
    opts = RunOptions(
        target="exec:" + shlex.join(command), exec_store="redis", store=str(tmp_path / "store"),
        ttl_ms=TTL_MS, nemesis_interval=1.0, concurrency=5, nodes=10, **kw,
    )
    return run(opts)


def test_go_fenced_lease_is_valid_under_pause_kill_and_partition(commands: dict[str, list[str]], tmp_path: Path) -> None:
    """The fenced Go lease passes the real runner's faults, and the run verdict proves it was really tested.

    ``valid`` from the run verdict means: no anomaly, an ok claim, renew, effect and
    commit, a contended claim, and every fault started and healed. The partitions
    must also have reached the child's client: ops it answered ``unavailable`` or
    ``indeterminate``.
    """
    if find_toxiproxy() is None:
        pytest.fail(f"toxiproxy-server not found: `{INSTALL_COMMAND}` builds it (.ci/run does)", pytrace=False)
    result = run_exec(tmp_path, commands["go-redis-fenced"], nemesis=("pause", "kill", "partition"), seed=21,
                      time_limit=10.0, evidence_wait_s=EVIDENCE_WAIT_S)
    assert result.verdict.valid is True, (result.reason, [a.to_json() for a in result.verdict.anomalies[:5]])
    header, ops, reader = read_history(result.run_dir / "history.jsonl")
    assert {e.f for e in reader.nemesis} >= {"pause", "resume", "kill", "partition", "heal"}
    # its hello says "resource": true, so its protected resource was read back, by the workers and the final phase
    assert header.meta["resource_read"] is True and result.stats["resource_read"] is True
    assert sum(op.f == "read-resource" and op.type == "ok" for op in ops) >= len({op.node for op in ops if op.f == "claim"})
    cut_off = [op for op in ops if op.type == "info" or op.result.get("reason") == "unavailable"]
    assert cut_off, "no op of the Go child ever met the partition"
    assert "started " + str(commands["go-redis-fenced"][0]) in (result.run_dir / "exec.log").read_text()


def test_node_trusting_lease_is_caught_under_duplicate_delivery(commands: dict[str, list[str]], tmp_path: Path) -> None:
    """Two deliveries of one node, two granted leases: leasecheck proves the bug with the kinds the README names."""
    result = run_exec(tmp_path, commands["node-trusts-queue"], nemesis=(), dup_rate=0.4, seed=22, time_limit=8.0)
    kinds = Counter(a.kind for a in result.verdict.anomalies)
    assert result.verdict.valid is False, f"node-trusts-queue passed: {result.reason}"
    assert result.exit_code == 1
    assert kinds.keys() <= NODE_KINDS, f"kinds its README does not name: {dict(kinds)}"
    assert {"overlapping-lease", "duplicate-commit"} <= kinds.keys(), dict(kinds)
