"""leasecheck in a team's CI: the matrix, the summary of run folders, audits, the pytest plugin.

* :mod:`.matrix` — targets × nemesis sets × seeds of a TOML spec, run and judged;
* :mod:`.summary` — any set of run folders as one table, judged against what was expected;
* :mod:`.audit` — a third-party lock library's published plan, run, and what it showed;
* :mod:`.pytest_plugin` — a lease library's own test suite runs leasecheck: the options, marker, fixtures and
  hooks pytest loads; :mod:`.plugin_args` what a call may say (``RUN_FLAGS``) and the command line it becomes,
  :mod:`.plugin_runner` the runs, :mod:`.plugin_results` what they give back and the failure message.

May import ``run``, ``kit``, ``report``, ``verdict``, ``rundir``, ``servers`` and the core; never ``cli``.
"""
