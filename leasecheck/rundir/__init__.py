"""The run folder and the store directory: every file name a run leaves, declared once.

* :mod:`.files` — what a run keeps besides its record, and how a dead harness's leftovers are cleaned;
* :mod:`.storedir` — the store directory, one folder per run that anyone can re-analyse;
* :mod:`.worker_logs` — the per-worker logs that make a history survive a crash of the harness.

May import: ``histories``, ``nemesis``'s process table, ``errors``. Nothing above it.
"""
