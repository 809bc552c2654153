"""The seed's verification table as deterministic scenarios, runnable against any backend.

Each scenario drives real clients of one backend (in separate OS processes
where the scenario is about concurrency or crashes) through one promise of the
protocol and returns whether it held, with the evidence. The reference
backends must pass every scenario; each broken variant fails the one that
matches its bug. Synchronisation is by events (barriers, queues, polling a
condition with a deadline), never by sleeping a fixed time and hoping.

A lease is judged by what it is, a :class:`Lease` the store granted, never by
the shape of its name: a fenced backend names it by an integer epoch, an
unfenced one by an opaque token (``epoch`` None). Where a scenario compares two
leases it asks :func:`~.scenario_outcomes.supersedes`, which compares epochs when there are epochs
and otherwise only asks for a different token: an unfenced backend orders its
leases by grant time alone, as the checker does.

This module is the table: each scenario by its name (the names a test
parametrizes over and a failure report shows), and which ones restart the
store. The scenarios live by the promise they test (:mod:`.scenarios_ownership`,
:mod:`.scenarios_zombies`, :mod:`.scenarios_liveness`, :mod:`.scenarios_restarts`,
:mod:`.scenarios_clocks`, :mod:`.scenarios_resource`); what they find and how they word it in
:mod:`.scenario_outcomes`; how they drive clients in :mod:`.scenario_clients`.
"""

from __future__ import annotations

from collections.abc import Callable

from leasecheck.kit.scenario_outcomes import Result
from leasecheck.kit.scenarios_clocks import skewed_client, skewed_renew
from leasecheck.kit.scenarios_liveness import heartbeat_never_completes, stuck_lease
from leasecheck.kit.scenarios_ownership import crash_takeover, duplicate_delivery, epochs_increase, race
from leasecheck.kit.scenarios_resource import resource
from leasecheck.kit.scenarios_restarts import durable_commit, expiry_across_restart
from leasecheck.kit.scenarios_zombies import zombie, zombie_after_lapse, zombie_release

SCENARIOS: dict[str, Callable[..., Result]] = {
    "race": race,
    "crash-takeover": crash_takeover,
    "zombie": zombie,
    "zombie-release": zombie_release,
    "zombie-after-lapse": zombie_after_lapse,
    "duplicate-delivery": duplicate_delivery,
    "epochs-increase": epochs_increase,
    "heartbeat": heartbeat_never_completes,
    "stuck-lease": stuck_lease,
    "durable-commit": durable_commit,
    "expiry-across-restart": expiry_across_restart,
    "skewed-client": skewed_client,
    "skewed-renew": skewed_renew,
    "resource": resource,
}

#: the scenarios that restart the store: they take the restart as their second argument
RESTARTING = frozenset({"durable-commit", "expiry-across-restart"})
