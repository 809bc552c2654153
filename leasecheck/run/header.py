"""The first line of a run's history: the lease's terms and what the run was, as its readers need them.

Apart from the runner so the header is a pure function of the run's options and what its backend declared (or, for an
``exec:`` child, said in its hello): ``leasecheck check`` re-reads it from the file alone, the report names the run and
its cluster from it, and the coverage knows from ``resource_read`` whether situations of a ``read-resource`` apply.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from leasecheck.histories import Header
from leasecheck.run.options import RunOptions, profiled
from leasecheck.targets.base import Target, reads_resource
from leasecheck.targets.durability import settings
from leasecheck.targets.exec_target import ExecTarget


def run_header(opts: RunOptions, seed: int, run_id: str, target_cls: type[Target], producer: Target,
               uncertainty_ms: float, cluster: Any = None) -> Header:
    """The header of a run of ``target_cls`` (``producer``: its first client, set up); ``cluster``: the members it runs on."""
    meta: dict[str, Any] = {
        "target": opts.target, "seed": seed, "run_id": run_id, "nemesis": list(opts.nemesis),
        "concurrency": opts.concurrency, "store": target_cls.store, "resource_read": reads_resource(producer),
        **({"cluster": cluster.describe()} if cluster else {}),
        **({"durability": {"profile": opts.store_config, "settings": said}}
           if (said := settings(target_cls.store, opts.store_config)) and profiled(opts, target_cls.store) else {}),
    }
    effect_fence = target_cls.effect_fence
    if isinstance(producer, ExecTarget) and producer.hello is not None:  # an exec: child says it in its hello
        meta["exec"] = asdict(producer.hello)
        effect_fence = producer.hello.effect_fence
    return Header(opts.ttl_ms, uncertainty_ms, meta, effect_fence=effect_fence, lease_expiry=target_cls.lease_expiry)
