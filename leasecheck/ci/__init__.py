"""leasecheck in a team's CI: the matrix, the summary of run folders, the pytest plugin.

* :mod:`.spec` — a matrix spec: targets × nemesis sets × seeds in TOML, each cell checked and with its expected verdict;
* :mod:`.matrix` — a spec's cells, sharded, run and judged;
* :mod:`.summary` — any set of run folders as one table, judged against what was expected;
* :mod:`.table` — the rows of many runs as one table (terminal, Markdown, HTML), for ``matrix`` and ``summary``;
* :mod:`.pytest_plugin` — a lease library's own test suite runs leasecheck: the options, marker, fixtures and
  hooks pytest loads; :mod:`.plugin_args` what a call may say (the run's own flags) and the command line it becomes,
  :mod:`.plugin_runner` the runs, :mod:`.plugin_results` what they give back and the failure message.

The audits of third-party libraries are a room of their own (``leasecheck.auditing``) beside this one. May import
``run``, ``kit``, ``report``, ``verdict``, ``rundir``, ``servers`` and the core; never ``cli`` or ``auditing``.
"""
