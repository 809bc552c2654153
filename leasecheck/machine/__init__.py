"""This machine as leasecheck finds it and leaves it: its process table, its mounts, the labels of its containers.

* :mod:`.processes` — the /proc process table read (a process, its children, its start time, what works in a
  folder) and signals sent, with a process that went away counted as gone;
* :mod:`.mounts` — the power-loss layers mounted (found in /proc/mounts by their name) and taken off, an orphan's too;
* :mod:`.aim_slot` — the few bytes of shared memory the nemesis arms to aim a fault at an op, which every worker reads
  (a lease run's, and the task a job queue's own workers run);
* :mod:`.labels` — the Docker labels on a run's containers and networks (by run id: this run's, or every run's for
  ``leasecheck heal``).

Facts of the machine, not faults: the faults (``nemesis``), the servers leasecheck starts (``servers``), the run
folder's cleanup (``rundir``), a queue run's workers (``queue_run``) and its task (``targets``) read them, so they sit
below all of those.
May import the standard library and ``leasecheck.errors`` only.
"""
