"""What people read: the terminal verdict, progress, the HTML run report, plots, JUnit XML.

* :mod:`.terminal`, :mod:`.progress` — rich output for terminals and CI logs;
* :mod:`.html`, :mod:`.inputs`, :mod:`.page_columns`, :mod:`.columns`, ``assets/`` — the self-contained run report;
* :mod:`.plots` — latency and rate over time with the faults as bands, drawn with :mod:`.plot_parts` from the
  numbers :mod:`.plot_data` prepares (numpy, no matplotlib);
* :mod:`.junit` — verdicts in the format every CI system shows as tests.

Renders what it is given. May import ``verdict``, ``rundir`` and the core; never ``run``
(a report is drawn from a finished run folder as well as from a live run), ``ci`` or ``cli``.
"""
