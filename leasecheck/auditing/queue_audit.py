"""Audits of job queues: a library's plan run by :mod:`leasecheck.queue_run` (its own workers), judged as a lock's.

A job queue is listed among the audits as ``queue:NAME@MODE`` (one plan per
mode); ``leasecheck audit NAME`` (or its PyPI name, or ``queues`` for every one, or
``module:Class`` for a :class:`~leasecheck.targets.queues.base.QueueLibrary` of one's own)
selects it like a lock library, and its runs are queue runs.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from leasecheck.auditing.audited import Audited, AuditResult, Unloadable
from leasecheck.auditing.findings import FaultVerdict, fault_verdict, first_anomaly
from leasecheck.exits import verdict_word
from leasecheck.lists import names
from leasecheck.rundir.runfolder import RunFolder

#: how an audited job queue is named among the audits' targets (``queue:rq``): its runs are queue runs
QUEUE_PREFIX = "queue:"


def queue_audits() -> tuple[list[Audited], list[Unloadable]]:
    """Every audited job queue's plans (one per mode; leasecheck's and the entry points'), and those that cannot run
    here: a queue whose library is missing keeps its plans (read from its class, no library imported)."""
    from leasecheck.targets.queues.registry import QueueNotFound, available, lacking, load_class

    found: list[Audited] = []
    broken: list[Unloadable] = []
    for name in available():
        try:
            cls = load_class(name)
        except QueueNotFound as e:
            broken.append(Unloadable(QUEUE_PREFIX + name, str(e)))
            continue
        why = lacking(cls, name)
        for plan in cls.audits:
            target = f"{QUEUE_PREFIX}{name}@{plan.mode}"
            if why is None:
                found.append(Audited(target, plan))
            else:
                broken.append(Unloadable(target, why, plan))
    return found, broken


def is_queue_class(target: str) -> bool:
    """Does ``module:Class`` name a job queue's adapter (a QueueLibrary) rather than a lock's?"""
    from leasecheck.targets.queues.base import QueueLibrary
    from leasecheck.targets.registry import _search_cwd

    module, _, attr = target.partition(":")
    _search_cwd()
    try:
        obj = getattr(importlib.import_module(module), attr, None)
    except Exception:  # not importable: the lock loader says why
        return False
    return isinstance(obj, type) and issubclass(obj, QueueLibrary)


def queue_plans(target: str, modes: tuple[str, ...] = ()) -> list[Audited]:
    """Every plan of the job queue ``target`` (a name or ``module:Class``, with or without ``queue:``), in ``modes``."""
    from leasecheck.targets.queues.registry import QueueNotFound, load

    name = target.removeprefix(QUEUE_PREFIX).partition("@")[0]
    try:
        plans = load(name).audits
    except QueueNotFound as e:
        raise LookupError(str(e)) from None
    if not plans:
        raise LookupError(f"{name} has no audit plan: give the class one (audits = (AuditPlan(...),))")
    return [Audited(f"{QUEUE_PREFIX}{name}@{p.mode}", p) for p in plans if not modes or p.mode in modes]


def queue_audit(target: str, mode: str | None = None) -> Audited:
    """A job queue's audit: its plan of ``mode`` (``queue:rq@fenced``), or its first (``documented``)."""
    mode = target.removeprefix(QUEUE_PREFIX).partition("@")[2] or mode
    chosen = [a for a in queue_plans(target) if not mode or a.plan.mode == mode]
    if not chosen:
        raise LookupError(f"{target}: no such audit plan")
    return chosen[0]


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
    from leasecheck.queue_run.faults import queue_kinds
    from leasecheck.queue_run.runner import QueueRun, run_queue

    opts = queue_options(audited, nemesis, seed, store, time_limit)
    result = run_queue(opts)
    history = RunFolder(result.run_dir).history
    ops = QueueRun.required_ops(opts.library)
    if nemesis == "none":  # no fault: every anomaly is the run's
        judged = FaultVerdict(verdict_word(result.verdict.valid), result.reason, list(result.verdict.anomalies), [])
    else:
        judged = fault_verdict(result.verdict, result.reason, nemesis, history, queue_kinds(opts.nemesis), ops)
    first_s, proof = first_anomaly(history, result.verdict.cited, judged.anomalies)
    _, without_proof = first_anomaly(history, result.verdict.cited, judged.without_fault)
    return AuditResult(
        target=audited.target, library=audited.plan.library, version=audited.version, mode=audited.plan.mode,
        nemesis=nemesis, seed=seed, verdict=judged.verdict, kinds=tuple(sorted({a.kind for a in judged.anomalies})),
        reason=judged.reason, run_dir=result.run_dir, published=audited.fault(nemesis),
        first_anomaly_s=first_s, proof=proof,
        exit_code=result.exit_code, options=dict(audited.plan.options),  # the run's, as a lock's audit run's
        without_fault=tuple(sorted({a.kind for a in judged.without_fault})),
        without_fault_count=len(judged.without_fault), without_fault_proof=without_proof,
    )
