"""Lease backends: the protocol every one speaks, and the ones leasecheck ships.

* :mod:`.base` — the protocol (claim, renew, effect, commit, release, read) in one screen;
* :mod:`.registry` — backends found by name (entry points ``leasecheck.targets``) and ``TargetSpec``;
* the reference fenced backends (:mod:`.sqlite_lease`, :mod:`.postgres_lease`, :mod:`.redis_lease`),
  the reference unfenced one (:mod:`.redis_token_lease`), the broken variants (``broken_*``);
* :mod:`.exec_target` — a backend in any language over the exec protocol (its child process: :mod:`.exec_child`);
  :mod:`.urls` — store URLs; :mod:`.redis_address` — one Redis server or the primary a Sentinel names;
  :mod:`.pg_watchdog` — a deadline on every Postgres statement; :mod:`.durability` — each store's durability profiles, as data;
* :mod:`.locks` — third-party lock libraries, as their users use them; :mod:`.queues` — job queues and
  durable-execution runtimes, audited with their own workers; :mod:`.audits` — what an audit of either is (the plan,
  each fault's published verdict, the named kind groups);
* :mod:`.thirdparty` — the lock adapters' old name, kept so that an adapter written before the rename still imports
  (it warns).

May import ``histories`` (its types) and the stores' client libraries; never the checker that
judges it, a fault or the front.
"""
