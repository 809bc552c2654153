"""The queue audit's harness: a job queue's own workers run leasecheck's task under faults, recorded, then checked.

Holds the run (:mod:`.runner`), the faults it takes and what each must bring about (:mod:`.faults`), the library's
worker processes (:mod:`.workers`),
the watcher that reads each job's state from the library (:mod:`.watcher`), its pauses aimed between a task's
heartbeat and its write, lasting until the job ran again (:mod:`.aim_notes`), the
check of the history so far that says each anomaly as it is proven (:mod:`.live`), the
pure assembly of what they recorded into one history (:mod:`.assemble`), the
files it is read from and written to (:mod:`.history`), and what a run is asked
and gives back (:mod:`.options`). It may
import the core (``checker``, ``targets``, ``nemesis``, ``histories``) and
``frame`` (the life cycle it shares with a lease run), ``verdict``, ``report``, ``rundir``, ``servers``;
``ci`` (``leasecheck audit``) and ``cli`` import it. It never imports ``run``: a lease run and a queue run
share their frame and parts, not each other.
"""
