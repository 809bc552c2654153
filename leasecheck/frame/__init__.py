"""The run frame: the life cycle a lease run and a queue run share, written once below both.

* :mod:`.folder` — one run id (48 random bits), the run folder and its files (test.json, leasecheck.log with the
  ``leasecheck`` logger's handler, faults.json), SIGINT / SIGTERM caught for the run, every fault healed on every exit,
  a failed run's folder marked;
* :mod:`.ending` — the last word of a verdict (an interrupted run keeps its verdict and says it was cut short, a cut
  history is never valid), results.json with ``interrupted`` (null or the signal's name), anomalies.jsonl, report.html,
  and the one result type with its exit code (:mod:`leasecheck.exits`);
* :mod:`.interrupts` — the signals that end a run, one path for both, and the shield worker processes start behind.
* :mod:`.aiming` — the harness's side of a pause or kill aimed at an op (the slot armed, the held workers handed to the
  fault as they come): a lease run's workers hold an op between its round trips, a queue run's task before its write;
* :mod:`.store_server` — the Postgres or Redis server a run starts in its folder (a lease run's store, a queue run's
  broker), with the run's durability profile and, for a power-loss fault, on the power-loss layer.

``leasecheck.run`` (a lease run) and ``leasecheck.queue_run`` (a queue library's own workers) call it and keep only what
differs: how workers start, what drives them, how they wind down. May import: ``report``, ``verdict``, ``rundir``, ``servers``, the
core (``checker``, ``targets``, ``nemesis``, ``histories``), ``exits``, ``errors``. Never ``run``, ``queue_run``, ``ci``,
``kit`` or ``cli``.
"""
