"""A run: a backend under concurrent workers and faults, recorded, then judged.

* :mod:`.options` — what defines a run (:class:`~.options.RunOptions`) and what refuses one;
* :mod:`.flags` — ``leasecheck run``'s options, declared once (the CLI, the matrix and the report's replay read them);
* :mod:`.runner` — the run as a short story of phases; :mod:`.environment` — the store it runs against;
  :mod:`.clusters` — the replicated stores ``--cluster`` starts; :mod:`.header` — the history's first line;
* :mod:`.deadline` — when the test proper ends (the time limit, or later while evidence is missing: ``--until-covered``);
  :mod:`.judgement` — the finished run's verdict, results.json and report;
* :mod:`.pool`, :mod:`.zygote`, :mod:`.slots`, :mod:`.workload`, :mod:`.workload_options`, :mod:`.client`,
  :mod:`.worker_pipe`, :mod:`.pipe_words` — the worker processes, their forkserver, their slots, the seed's workload and
  its knobs, one op with its recording, a worker's end of its pipe (it stamps, logs and sends its events), and the words
  said on that pipe (each with its fields; the recorder answers them by a table);
* :mod:`.recorder`, :mod:`.deliveries`, :mod:`.races`, :mod:`.merge`, :mod:`.takeovers`, :mod:`.steering` — the recorder, the
  at-least-once queue, its duplicates raced on purpose, the merged history, what wakes a zombie, what steers the workload
  into the windows coverage counts;
* :mod:`.holds` — an op held between its round trips for a fault aimed inside it (the harness's side, which a queue run
  shares: ``frame.aiming``);
* :mod:`.following`, :mod:`.closing` — the checker that follows the history as it is written, the nodes closed meanwhile;
* :mod:`.final_reads` — the last reads (the proxies: ``servers.store_network``; the folder, the signals and the end a queue
  run shares: ``frame``).

May import: ``frame``, ``verdict``, ``report``, ``rundir``, ``servers``, the core (``checker``,
``targets``, ``nemesis``, ``histories``), ``errors``, ``waiting``. Never ``ci``, ``kit`` or ``cli``.
"""
