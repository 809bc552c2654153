"""Faults: every one recorded, every one undone.

A fault is a small object with ``start`` and ``heal`` (:class:`~leasecheck.nemesis.protocol.Fault`);
:mod:`~leasecheck.nemesis.catalogue` lists every kind of fault, one row each, and
the :class:`~leasecheck.nemesis.schedule.Nemesis` runs them on a seeded schedule
and heals everything still active on any exit. This package knows processes,
signals, clocks, proxies and containers — never a backend or the runner (arrows
point one way).

Modules: ``catalogue`` (the rows), ``protocol`` (what a fault is), ``context`` (what a factory may look at),
``schedule``, ``heal`` (undo records), and one per fault family: ``faults``
(process pause / kill), ``clock`` (worker clocks bumped / strobed, on
``worker_clocks``), ``store_clock`` (libfaketime), ``network`` (Toxiproxy
toxics, on ``proxies`` and the ``toxiproxy`` client), ``container`` (Docker),
``power`` (the power cuts of the store and of a cluster's members, through ``PowerLossServer`` and ``PowerLossCluster``);
``inside`` aims a pause or kill inside an op (the kinds of op armed, the workers holding them between round
trips); ``host_clock`` watches the host's wall clock for a step nobody scheduled;
``timepatch`` bends a worker process's ``time.time`` for third-party code. The machine's process table,
its mounts and its containers' labels are :mod:`leasecheck.machine`'s (below this package: the servers read them too).
"""
