"""The run folder and the store directory: every file name a run leaves, declared once.

* :mod:`.files` — what a run keeps besides its record, and how a dead harness's leftovers are cleaned;
* :mod:`.runfolder` — one run's folder: the name of every file a run leaves, and how its JSON is written (:class:`~.runfolder.RunFolder`);
* :mod:`.storedir` — the store directory, one folder per run that anyone can re-analyse;
* :mod:`.worker_logs` — the per-worker logs that make a history survive a crash of the harness.

May import: ``histories``, ``nemesis``'s process table, ``errors``. Nothing above it.
"""
