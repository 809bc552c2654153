"""Hypothesis profiles for the whole suite; pick one with HYPOTHESIS_PROFILE.

``dev`` (default) is quick enough to run on every edit; ``ci`` runs many more
examples, derandomized so that a red CI run is reproducible from the commit
alone, and without per-example deadlines (CI machines are slow and noisy).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    max_examples=300,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Real store servers, shared by every test module of a session.
from stores import etcd_server, postgres_server, redis_server, store_for, zookeeper_server  # noqa: E402,F401
