"""How a conformance scenario drives a backend's clients: fresh nodes, patient claims, worker processes.

The plumbing every scenario shares, apart from what they judge: node names no
other run used (scenarios share a team's store), how long a successor keeps
trying and how long a lease must outlive a probe, clients closed however a
scenario ends, and worker processes (spawned, so each is a fresh client) whose
reports are awaited by polling with a deadline, never by sleeping and hoping.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from leasecheck.targets.base import Lease, Target
from leasecheck.targets.registry import TargetSpec
from leasecheck.waiting import poll


def claim_until_granted(t: Target, node: str, owner: str, timeout: float) -> Lease | None:
    """Claim ``node`` until the store grants it, for up to ``timeout`` s; None if it never did."""

    def attempt() -> Lease | None:
        r = t.try_claim(node, owner)
        return r if isinstance(r, Lease) else None

    return poll(attempt, timeout)


def fresh_node(scenario: str) -> str:
    """A node name no other run of any scenario used: scenarios share one store (a team's LEASECHECK_URL, run
    after run and from several CI machines at once: the random part keeps two machines' names apart)."""
    return f"{scenario}-{os.getpid()}-{time.monotonic_ns()}-{secrets.token_hex(4)}"


def takeover_timeout(spec: TargetSpec) -> float:
    """How long a successor keeps trying to claim: ten ttls, plus slack for a slow store."""
    return 10 * spec.config.ttl_ms / 1000 + 5


def patient_ttl_ms(spec: TargetSpec) -> int:
    """A lease that outlives any probe of it: ten ttls, and at least 10 s."""
    return max(10 * spec.config.ttl_ms, 10_000)


@contextmanager
def closing(*clients: Target) -> Iterator[None]:
    """Close every client however the scenario ends (a refused step returns early)."""
    try:
        yield
    finally:
        for c in clients:
            c.close()


def spawn_context() -> mp.context.SpawnContext:
    """Worker processes are spawned, never forked: each makes its own client, as a real worker would."""
    return mp.get_context("spawn")


class WorkerDied(Exception):
    """A scenario's worker process exited before it reported."""


def next_report(out: Any, procs: list[Any], timeout: float = 120.0) -> Any:
    """The next report from a worker process; raises WorkerDied if they all exited without one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return out.get(timeout=0.5)
        except queue.Empty:
            if all(p.exitcode is not None for p in procs):
                codes = [p.exitcode for p in procs]
                raise WorkerDied(f"worker processes exited (codes {codes}) before reporting") from None
            if time.monotonic() > deadline:
                raise WorkerDied(f"no report from the worker processes within {timeout:g} s") from None


def read_or_none(t: Target, node: str) -> Any:
    """The node as the store reads it, or None while the store does not answer (it is restarting)."""
    try:
        return t.read(node)
    except Exception:
        return None
