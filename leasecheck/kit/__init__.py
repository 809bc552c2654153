"""A team's own adapter, tested: the conformance scenarios, the ``new-target`` scaffold, test helpers.

* :mod:`.conformance` — the seed's verification table as deterministic scenarios against any backend: the table;
  the scenarios by the promise they test (:mod:`.scenarios_ownership`, :mod:`.scenarios_zombies`,
  :mod:`.scenarios_liveness`, :mod:`.scenarios_restarts`, :mod:`.scenarios_clocks`), what they find
  (:mod:`.scenario_outcomes`) and how they drive clients (:mod:`.scenario_clients`);
  and the protected resource's scenario (:mod:`.scenarios_resource`);
* :mod:`.scaffold` — ``leasecheck new-target NAME``: an adapter to edit and the test that holds it (its files as
  templates: :mod:`.scaffold_templates`);
  :mod:`.scaffold_queue` — ``new-target --queue LIBRARY``: a job queue's adapter and its test, of
  :mod:`.queue_conformance` (one short queue run: a job executed, a stalled execution redelivered, the identity);
* :mod:`.testing` — throwaway stores as ``leasecheck run`` starts them, and a method probe;
* :mod:`.simstore` — a simulated correct lease store, the ground truth of generated histories.

May import ``run`` (the store environment), ``queue_run`` (the queue conformance's run), ``servers``, ``targets``, ``histories``, ``errors``,
``waiting``; never ``ci`` or ``cli``.
"""
