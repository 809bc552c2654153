"""The Docker labels a run puts on its containers and networks: how this run, or ``leasecheck heal``, finds them again.

Declared here, below both the servers that make the containers and the faults that act on
them (and heal them), so that each reads the one name.
"""

from __future__ import annotations

#: label on every container and network of a run: its run id
RUN_LABEL = "leasecheck.run"
#: label on every container: the name of the run network it belongs on (what a heal reconnects)
NETWORK_LABEL = "leasecheck.network"

def run_label(run_id: str) -> str:
    """The label filter (``key=value``) that selects one run's containers and network."""
    return f"{RUN_LABEL}={run_id}"
