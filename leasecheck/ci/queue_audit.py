"""Audits of job queues: a library's plan run by :mod:`leasecheck.queue_run` (its own workers), judged as a lock's.

A job queue is listed among the audits as ``queue:NAME@MODE`` (one plan per
mode); ``leasecheck audit NAME`` (or its PyPI name, or ``queues`` for every one)
selects it like a lock library, and its runs are queue runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leasecheck.ci.audited import Audited, AuditResult, Unloadable
from leasecheck.ci.findings import FaultVerdict, fault_verdict, first_anomaly, word
from leasecheck.exits import Exit
from leasecheck.lists import names

#: how an audited job queue is named among the audits' targets (``queue:rq``): its runs are queue runs
QUEUE_PREFIX = "queue:"


def queue_audits() -> tuple[list[Audited], list[Unloadable]]:
    """Every audited job queue's plans (one per mode), and the queues whose library is missing."""
    from leasecheck.targets.queues.registry import QUEUES, QueueNotFound, load

    found: list[Audited] = []
    broken: list[Unloadable] = []
    for name in QUEUES:
        try:
            cls = load(name)
        except QueueNotFound as e:
            broken.append(Unloadable(QUEUE_PREFIX + name, str(e)))
            continue
        found.extend(Audited(f"{QUEUE_PREFIX}{name}@{plan.mode}", plan) for plan in cls.audits)
    return found, broken


def queue_audit(target: str, mode: str | None = None) -> Audited:
    """A job queue's audit: its plan of ``mode`` (``queue:rq@fenced``), or its first (``documented``)."""
    from leasecheck.targets.queues.registry import QueueNotFound, load

    name, _, mode = target.removeprefix(QUEUE_PREFIX).partition("@")
    try:
        plans = load(name).audits
    except QueueNotFound as e:
        raise LookupError(str(e)) from None
    chosen = [p for p in plans if not mode or p.mode == mode]
    if not chosen:
        raise LookupError(f"{target}: no such audit plan")
    return Audited(target, chosen[0])


def queue_name(target: str) -> str | None:
    """``rq`` of ``queue:rq@fenced``; None for a lock library's target."""
    return target.removeprefix(QUEUE_PREFIX).partition("@")[0] if target.startswith(QUEUE_PREFIX) else None


def queue_options(audited: Audited, nemesis: str, seed: int, store: Path, time_limit: float | None = None) -> Any:
    """The :class:`~leasecheck.queue_run.runner.QueueOptions` of one run of a job queue's audit (``none``: no fault,
    the task's own stalls alone)."""
    from leasecheck.queue_run.runner import QueueOptions

    plan = audited.plan
    fault = audited.fault(nemesis)
    name = queue_name(audited.target) or audited.target
    return QueueOptions(library=name, mode=plan.mode, seed=seed,  # type: ignore[arg-type]
                        nemesis=() if nemesis == "none" else names(nemesis, "--fault"),
                        time_limit=time_limit if time_limit is not None else plan.time_limit, store=str(store),
                        require=tuple(fault.require), **plan.options)


def run_queue_audit(audited: Audited, nemesis: str, seed: int, store: Path, time_limit: float | None) -> AuditResult:
    """One run of a job queue's audit: the library's own workers (:mod:`leasecheck.queue_run`), judged as a lock's."""
    from leasecheck.queue_run.runner import QueueRun, queue_kinds, run_queue

    opts = queue_options(audited, nemesis, seed, store, time_limit)
    result = run_queue(opts)
    history = result.run_dir / "history.jsonl"
    ops = QueueRun.required_ops(opts.library)
    if nemesis == "none":  # no fault: every anomaly is the run's
        judged = FaultVerdict(word(result.verdict.valid), result.reason, list(result.verdict.anomalies), [])
    else:
        judged = fault_verdict(result.verdict, result.reason, nemesis, history, queue_kinds(opts.nemesis), ops)
    first_s, proof = first_anomaly(history, result.verdict.cited, judged.anomalies)
    _, without_proof = first_anomaly(history, result.verdict.cited, judged.without_fault)
    return AuditResult(
        target=audited.target, library=audited.plan.library, version=audited.version, mode=audited.plan.mode,
        nemesis=nemesis, seed=seed, verdict=judged.verdict, kinds=tuple(sorted({a.kind for a in judged.anomalies})),
        reason=judged.reason, run_dir=result.run_dir, published=audited.fault(nemesis),
        first_anomaly_s=first_s, proof=proof,
        exit_code=result.exit_code if result.interrupted is not None else _exit(judged.verdict), options=dict(audited.plan.options),
        without_fault=tuple(sorted({a.kind for a in judged.without_fault})),
        without_fault_count=len(judged.without_fault), without_fault_proof=without_proof,
    )


def _exit(verdict: str) -> int:
    return int({"valid": Exit.VALID, "invalid": Exit.INVALID}.get(verdict, Exit.UNKNOWN))
