"""leasecheck in a team's CI: the matrix, the summary of run folders, audits, the pytest plugin.

* :mod:`.spec` — a matrix spec: targets × nemesis sets × seeds in TOML, each cell checked and with its expected verdict;
* :mod:`.matrix` — a spec's cells, sharded, run and judged;
* :mod:`.summary` — any set of run folders as one table, judged against what was expected;
* :mod:`.table` — the rows of many runs as one table (terminal, Markdown, HTML), for ``matrix`` and ``summary``;
* :mod:`.audit` — a third-party lock library's published plan, run, and what it showed; :mod:`.audited` what an audit
  is made of (a plan, a run judged against the publication, AUDITS.md's row), :mod:`.findings` what one run showed
  for its fault, :mod:`.queue_audit` a job queue's plan run by its own workers, :mod:`.latest` the published audits
  on each library's newest release (``audit --latest``);
* :mod:`.pytest_plugin` — a lease library's own test suite runs leasecheck: the options, marker, fixtures and
  hooks pytest loads; :mod:`.plugin_args` what a call may say (the run's own flags) and the command line it becomes,
  :mod:`.plugin_runner` the runs, :mod:`.plugin_results` what they give back and the failure message.

May import ``run``, ``kit``, ``report``, ``verdict``, ``rundir``, ``servers`` and the core; never ``cli``.
"""
