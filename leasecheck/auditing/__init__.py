"""The audits: a third-party lock library or job queue run with its published plan and judged against it (AUDITS.md).

* :mod:`.audit` — a lock library's published plan, run, and what it showed (``leasecheck audit``), and the list of
  every audit (lock libraries and job queues, read without importing them);
* :mod:`.queue_audit` — a job queue's plan, run by its own workers (``leasecheck.queue_run``);
* :mod:`.audited` — what an audit is made of: a plan, a run judged against the publication, AUDITS.md's row;
* :mod:`.findings` — what one run showed for its fault (its verdict, its kinds, its first proof);
* :mod:`.latest` — the published audits on each library's newest release, in a throwaway virtualenv
  (``audit --latest``): what changed.

Why apart from ``ci``: an audit judges someone else's library against what leasecheck publishes; ``ci`` runs a
team's own lease in its CI (the matrix, the summary, the pytest plugin). Neither imports the other. May import
``run``, ``queue_run``, ``rundir``, ``verdict``, the core (``checker``, ``targets``, ``nemesis``, ``histories``),
``exits``, ``errors``, ``lists``; ``cli`` imports it. The plan types themselves are
:mod:`leasecheck.targets.audits` (an adapter declares its plan beside its code).
"""
