"""leasecheck: a Jepsen-style test suite and checker for claim / lease / heartbeat / fencing code.

The one import name. Its rooms, and the way the arrows point (import-linter checks them,
``[tool.importlinter]`` in ``pyproject.toml``)::

    docgen, cli                          the docs' generated parts, the command line
      ci | auditing                      matrix, summary, pytest plugin | a third-party library's audit, judged
                                         against what leasecheck publishes (AUDITS.md)
        kit                              conformance scenarios, new-target scaffold, simulated store
          run | queue_run                a lease run (options, store, workers, recorder, final reads) | a job
                                         queue's run, its own workers running leasecheck's task
            frame                        the life cycle both share: folder, signals, heal, store server, results
              report                     terminal, progress, the HTML report, plots, JUnit
                verdict                  what a run's history proves: run verdict, windows, outcomes
                  rundir | servers       the run folder's files | store servers leasecheck starts, external tools
                    checker | targets | nemesis
                      hosts | machine    a member's host (ssh, docker exec, a namespace): member faults act through it |
                                         this machine's process table, mounts and containers' labels
                        histories | waiting | lists    history format v1 (nothing of ours below it) | the one poll |
                                                       the one reading of a list of names
                          errors | exits the two ends before a verdict (bad input: 3, a failed environment: 4) |
                                         the exit codes and a verdict's word and code

A room imports only rooms below it; ``report`` never imports ``run``.
"""

__version__ = "0.1.0"
