"""Adapters for third-party lock and lease libraries, audited by ``leasecheck audit``.

Each module wraps one library the way its README tells users to use it (see
:mod:`.lockbase`), declares the audit it is judged by (:mod:`leasecheck.targets.audits`), and
imports its library only where it calls it: the libraries are optional extras
(``pip install 'leasecheck[audit]'``), named in each adapter's ``requires``.

One module per library: :mod:`.redis_py` (redis-py's ``Lock``), :mod:`.python_redis_lock`, :mod:`.portalocker_redis`,
:mod:`.kazoo_lock`, :mod:`.etcd3_lock`, :mod:`.pg_advisory` (sqlalchemy-dlock), :mod:`.files` (filelock); and the
records each family keeps its jobs in (``*_records``: Redis, etcd, ZooKeeper).
"""
