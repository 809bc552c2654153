"""The lock adapters' old name: ``leasecheck.targets.locks`` now, and ``leasecheck.targets.audits`` for the plan types.

Why it is kept: ``leasecheck new-target --lock`` wrote adapters that import
``leasecheck.targets.thirdparty.audit`` (``AuditPlan``, ``FaultAudit``),
``.lockbase`` and ``.redis_records``, and a team's adapter must not break on an
upgrade. Importing this package warns once (``DeprecationWarning``) and makes
each old module name the new module itself (the same objects, not a second
copy: an adapter's ``LockLease`` is the one leasecheck checks against). Holds
nothing of its own.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings

import leasecheck.targets.locks as _locks

warnings.warn("leasecheck.targets.thirdparty is now leasecheck.targets.locks (the lock adapters) and "
              "leasecheck.targets.audits (AuditPlan, FaultAudit): import them from there",
              DeprecationWarning, stacklevel=2)

#: old module name -> where it lives now (every lock adapter kept its name under ``locks``)
MOVED = {"audit": "leasecheck.targets.audits",
         **{m.name: f"{_locks.__name__}.{m.name}" for m in pkgutil.iter_modules(_locks.__path__)}}

for _old, _new in MOVED.items():
    sys.modules[f"{__name__}.{_old}"] = importlib.import_module(_new)
