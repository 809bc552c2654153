"""Store servers leasecheck starts for tests and runs: see :mod:`leasecheck.servers.base`.

* :mod:`.base` — :class:`LocalServer`, a server we start, own and stop, as a child process;
* :mod:`.postgres`, :mod:`.redis`, :mod:`.etcd`, :mod:`.zookeeper`, :mod:`.toxiproxy` — the local servers, from the
  machine's binaries; :mod:`.temporal` — Temporal's dev server for queue runs; :mod:`.tools` — external tools
  leasecheck runs, found wherever it is installed;
* :mod:`.store_network` — Toxiproxy in front of the store, one proxy per worker (a lease run's and a queue run's);
* :mod:`.faketime` — Postgres and Redis under libfaketime, their clock skewable;
* :mod:`.docker` — the same stores in containers (``--env docker``), with :mod:`.image`,
  :mod:`.run_network`, :mod:`.container` and :mod:`.container_stores`;
* :mod:`.readiness` — "does this store answer?", asked of local and container servers alike;
* :mod:`.guard` — the program that takes a server's process tree down with the harness;
* :mod:`.powerfs` — the power-loss layer, a FUSE program that loses what was never fsynced (its page cache
  :mod:`.powerfs_cache` over its disk :mod:`.powerfs_disk`, of :mod:`.powerfs_nodes`), mounted by :mod:`.powerfs_layer`.
* :mod:`.hosts`, :mod:`.cluster` — replicated stores: members on hosts of their own (network namespaces) and the
  Cluster base, with one module per kind (:mod:`.redis_sentinel`, :mod:`.postgres_standby`, :mod:`.etcd_cluster`,
  :mod:`.zookeeper_ensemble`); their registry (``--cluster``) is :mod:`leasecheck.run.clusters`, data only.

The package imports nothing on its own (import :mod:`.base` for :class:`LocalServer`): a command line that
never starts a server loads none of it.
"""
