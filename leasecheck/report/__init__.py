"""What people read: the terminal verdict, progress, the HTML run report, plots, JUnit XML.

* :mod:`.terminal`, :mod:`.progress` — rich output for terminals and CI logs;
* :mod:`.live` — the anomaly lines a run says while it goes, one per kind and node;
* :mod:`.figures`, :mod:`.refusals` — a run's figures (ops, worker processes, seconds, refusals by reason and
  by the fault that explains them) worded once for the terminal, the report and pytest's line;
* :mod:`.html`, :mod:`.inputs`, :mod:`.page_columns`, :mod:`.columns`, ``assets/`` — the self-contained run report;
* :mod:`.plots` — latency and rate over time with the faults as bands, drawn with :mod:`.plot_parts` from the
  numbers :mod:`.plot_data` prepares (numpy, no matplotlib);
* :mod:`.junit` — verdicts in the format every CI system shows as tests.

Renders what it is given. May import ``verdict``, ``rundir`` and the core; never ``run``
(a report is drawn from a finished run folder as well as from a live run), ``ci`` or ``cli``.
"""
