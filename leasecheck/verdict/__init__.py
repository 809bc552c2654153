"""What a run's history proves, beyond the checker's verdict on its ops.

* :mod:`.run_verdict` — did the run test anything at all (evidence, the faults' windows, the run verdict);
* :mod:`.situations` — which coverage situations apply to a run, which it must reach, and ``--until-covered``'s goal;
* :mod:`.tails` — a history watched as it grows (its evidence and coverage so far, while the run goes on);
* :mod:`.read_back` — every node read back: which nodes the history never read cleanly once their last write was done;
* :mod:`.attribution` — the fault windows and their victims the checker's attribution takes;
* :mod:`.outcomes` — a run's outcome against what was expected (the row CI shares);
* :mod:`.covered` — what a run covered, in one line from its results.json (standard library only: the pytest plugin reads it).

Pure functions of histories and verdicts. May import the core (``checker``, ``nemesis``'s
catalogue, ``histories``); never ``run``, ``report``, ``ci`` or ``cli``.
"""
