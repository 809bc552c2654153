"""Job queues and durable-execution runtimes, audited with their own workers running leasecheck's task.

Holds the protocol a queue library's adapter follows (:mod:`.base`), the task
body every library's workers run (:mod:`.task`: it records what it did and writes
the protected resource, :mod:`.resource`), the registry of audited libraries
(:mod:`.registry`: leasecheck's own by name, a third party's by the entry point group
``leasecheck.queues`` or ``module:Class``) and one module per library (``*_queue``, RQ's :mod:`.rq`), with the
tasks its workers import where the library needs them in a module of their own (``*_tasks``). The protocol is
public: :class:`QueueLibrary`, :class:`QueueConfig` and :class:`JobState` are here for
an adapter of one's own. It may import
``leasecheck.histories`` and ``leasecheck.targets`` (the audit plans); never the
harness that starts the workers (``leasecheck.queue_run``), which imports it.
"""

from leasecheck.targets.queues.base import JobState, Mode, QueueConfig, QueueLibrary

__all__ = ["JobState", "Mode", "QueueConfig", "QueueLibrary"]
