"""What a run on a team's own cluster is held to: the kinds a write lost at failover shows as, and the member faults.

Shared by the runs on hosts reached over ssh (tests/runs/test_hosts_runs.py) and the staging journey that
follows a page doing the same (tests/runs/test_journey_staging.py).
"""

from __future__ import annotations

from leasecheck.nemesis.catalogue import FAULTS, Need

#: what a write lost at failover shows as (tests/runs/test_cluster_runs.py's reading)
LOST = {"duplicate-epoch", "epoch-regression", "lost-commit", "overlapping-lease", "stale-effect", "stale-commit", "stale-renew",
        "duplicate-commit", "non-linearizable", "premature-expiry", "lost-effect", "fence-regression"}
#: the faults that act on a cluster's members
MEMBER_FAULTS = {name for name, kind in FAULTS.items() if Need.CLUSTER in kind.needs}
