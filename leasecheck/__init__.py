"""leasecheck: a Jepsen-style test suite and checker for claim / lease / heartbeat / fencing code.

The one import name. Its rooms, and the way the arrows point (import-linter checks them,
``[tool.importlinter]`` in ``pyproject.toml``)::

    cli, docgen                          the command line and the docs' generated parts
      ci                                 matrix, summary, audit, pytest plugin
        run                              a run: options, store, workers, recorder, final reads
        kit                              conformance scenarios, new-target scaffold, simulated store
          report                         terminal, progress, the HTML report, plots, JUnit
            verdict                      what a run's history proves: run verdict, windows, outcomes
              rundir                     the run folder's files, the store directory, worker logs
              servers                    store servers leasecheck starts, external tools
                checker / targets / nemesis
                  histories              history format v1: nothing of ours below it
    errors, exits, waiting, lists        the one environment error, the exit codes (the checker's too), the one poll,
                                         the one reading of a list of names

A room imports only rooms below it; ``report`` never imports ``run``.
"""

__version__ = "0.1.0"
