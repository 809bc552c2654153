"""``leasecheck new-target --queue LIBRARY``: a job queue's adapter to fill in, and the test that holds it to the
queue conformance (:mod:`leasecheck.kit.queue_conformance`).

The adapter is a :class:`~leasecheck.targets.queues.base.QueueLibrary` whose every method raises
``NotWritten`` with what it must do, with its task (the function the library's workers call, handing each
execution to :func:`leasecheck.targets.queues.task.execute`) and an audit plan; the test fails with one
message per method still to write, then runs the adapter once through the conformance (a job executed, a
stalled execution redelivered, the library's identity recorded), on the broker leasecheck starts for it.
``leasecheck audit MODULE:CLASS`` then audits it.
"""

from __future__ import annotations

import re
from string import Template

#: what each method of a queue adapter must do, as its NotWritten messages say it
QUEUE_DUTIES: dict[str, str] = {
    "setup": "make the broker ready for this run (queues, schema) under names that include self.config.run_id; idempotent",
    "worker_command": "the argv of one of the library's real worker processes, as its docs start it, one job at a time, "
                      "importing this module's task; its recovery (visibility timeout, retry of a lost job) scaled to "
                      "self.config.ttl_ms",
    "enqueue": "enqueue one job per name, the task called with the name (the job's id is its name where the library allows)",
    "state": "the job as the library reports it now: JobState('SUCCEEDED', result), JobState('READY') while it waits, "
             "JobState('FAILED'), or None when the library does not know it",
}

QUEUE_ADAPTER = Template('''"""$library, audited as a job queue: a leasecheck adapter (written by `leasecheck new-target --queue $library`).

The library's own workers run the jobs: this adapter says how to start one
(worker_command), how to enqueue a job (enqueue), and how to read a job as the
library reports it (state). Its task, below, is the function the workers call:
it hands each execution to leasecheck's task body with the library's identity
of that execution (an attempt number, or an execution id), which records what
it did and writes the protected resource. Fill in each method, then run the
test beside this file (it starts the broker, as `leasecheck audit` does):

    python -m pytest -q test_$module.py

and audit the library under faults with the plan below:

    leasecheck audit $module:$cls
"""

from __future__ import annotations

from typing import ClassVar

from leasecheck.targets.queues import JobState, QueueConfig, QueueLibrary
from leasecheck.targets.queues.task import Identity, execute
from leasecheck.targets.audits import AuditPlan, FaultAudit

# import $import_name  # the library under audit, imported where it is used (its import name may differ)


class NotWritten(NotImplementedError):
    """A method of the adapter still to be written; the test names each one."""


def run_job(job: str, attempt: int) -> str:
    """The task the library's workers call: one execution of ``job``. Register it with the library (its decorator),
    and pass what the library hands the execution: Identity(epoch=ATTEMPT) for an attempt number that grows with
    every execution (identity = "attempt"), or Identity(token=EXECUTION_ID) (identity = "id")."""
    return execute(job, Identity(epoch=attempt))


class $cls(QueueLibrary):
    """$library as its docs run it (one line for `leasecheck audit --list`)."""

    name = "$name"
    #: its distribution on PyPI (the audit reports its installed version)
    library = "$library"
    #: the broker leasecheck starts for it: "redis", "postgres" or "temporal"
    broker = "redis"
    #: "attempt" (a number that grows with every execution: the history's epoch) or "id" (an execution id)
    identity = "attempt"
    #: True if the task calls the library's own heartbeat while it works
    heartbeat = False
    #: the import names it needs (found, not imported, when the audits are listed)
    requires: ClassVar[tuple[str, ...]] = ("$import_name",)

    #: what `leasecheck audit $module:$cls` runs: one queue run per fault and seed, judged by the checker.
    #: `expected` is the verdict you claim; once audited, write down what it found (kinds, and a `fix`).
    audits: ClassVar[tuple[AuditPlan, ...]] = (
        AuditPlan(
            library="$library", mode="documented",
            faults=(
                FaultAudit("none", "valid"),  # the task's own stalls past the library's timeout alone
                FaultAudit("pause", "valid"),  # a worker (with its children) SIGSTOPped, then woken
            ),
            seeds=(1, 2, 3), time_limit=20.0,
            options={"ttl_ms": 2000, "workers": 3, "nemesis_interval": 4.0},
        ),
    )

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(config)

$methods

    def close(self) -> None:
        """Release connections."""
''')

QUEUE_METHOD = Template('''    def $signature:
        raise NotWritten("$cls.$method is not written yet: $duty")
''')

QUEUE_SIGNATURES = {
    "setup": "setup(self) -> None",
    "worker_command": "worker_command(self, slot: int) -> list[str]",
    "enqueue": "enqueue(self, jobs: list[str]) -> None",
    "state": "state(self, job: str) -> JobState | None",
}

QUEUE_TEST = Template('''"""$cls (the queue $library) held to the queue conformance (written by `leasecheck new-target --queue $library`).

Each method still to write fails its own test with what it must do; once they are written, one short queue run
on the broker leasecheck starts checks that a job ran and was read back, that a stalled execution was run
again, and that each execution carries the library's identity. Then: leasecheck audit $module:$cls
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from leasecheck.kit.queue_conformance import PROMISES, conform
from leasecheck.targets.queues import QueueConfig

import $module

METHODS = $methods


@pytest.mark.parametrize("method", METHODS)
def test_method_is_written(method: str) -> None:
    source = inspect.getsource(getattr($module.$cls, method))
    if "raise NotWritten" in source:  # what the method must do, whole (it may say JobState(...))
        pytest.fail(source.split('NotWritten("', 1)[1].rsplit('")', 1)[0], pytrace=False)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    unwritten = [m for m in METHODS if "raise NotWritten" in inspect.getsource(getattr($module.$cls, m))]
    if unwritten:
        pytest.skip(f"write {', '.join(unwritten)} first")
    assert $module.$cls(QueueConfig("", 2000)) is not None
    return conform("$module:$cls", Path(tmp_path_factory.mktemp("store")))


@pytest.mark.parametrize("promise", sorted(PROMISES))
def test_queue_conformance(promise: str, broken: dict[str, str]) -> None:
    assert promise not in broken, broken[promise]
''')


def render_queue(module: str, cls: str, name: str, library: str) -> dict[str, str]:
    """A job queue's adapter (with its task and audit plan) and its test, by file name (``library`` checked by the
    caller: its name on PyPI)."""
    methods = "\n".join(QUEUE_METHOD.substitute(signature=QUEUE_SIGNATURES[m], cls=cls, method=m,
                                                duty=duty.replace('"', "'"))
                        for m, duty in QUEUE_DUTIES.items()).rstrip("\n")
    adapter = QUEUE_ADAPTER.substitute(library=library, name=name, module=module, cls=cls, methods=methods,
                                       import_name=re.sub(r"[-.]", "_", library).lower())
    test = QUEUE_TEST.substitute(library=library, module=module, cls=cls, methods=repr(list(QUEUE_DUTIES)))
    return {f"{module}.py": adapter, f"test_{module}.py": test}


__all__ = ["QUEUE_DUTIES", "render_queue"]
