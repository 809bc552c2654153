"""How durably each store keeps what it acknowledged: three profiles per store, as data, in one place.

A store that acknowledges a write before it fsyncs it loses that write at a power cut
(the ``power-loss`` fault), never at a process kill: the kernel keeps what the process
wrote. Which a store does is its configuration, so a run names one of three profiles and
every party reads the settings here: the servers leasecheck starts (Redis, Postgres:
:mod:`leasecheck.servers`) and the embedded store's backend (SQLite:
:mod:`leasecheck.targets.sqlite_lease`, through its config option :data:`OPTION`).

* ``durable``: every acknowledged write is on the disk before the reply (what leasecheck
  always ran with, and the default: a lost commit is then the backend's doing);
* ``default``: the store as shipped, nothing set;
* ``fast``: the store acknowledges before it fsyncs (Redis' ``appendfsync everysec``,
  Postgres' ``synchronous_commit = off``, SQLite's WAL with ``synchronous = NORMAL``).

Here, beside the backends, because the servers sit above the targets and both read it.
"""

from __future__ import annotations

from collections.abc import Mapping

from leasecheck.errors import BadInput

#: the profiles, most durable first
PROFILES: tuple[str, ...] = ("durable", "default", "fast")
#: what a store runs with when nobody names a profile
DEFAULT_PROFILE = "durable"
#: the key of a backend's config options (``TargetConfig.options``) that names the profile of an embedded store
OPTION = "store_config"

#: redis-server's arguments: the append-only file fsynced before every reply, or every second; no RDB snapshots
#: beside it (a snapshot would make the loss depend on when it last ran). ``default``: the shipped config (RDB
#: snapshots on their schedule, no append-only file)
REDIS: Mapping[str, tuple[str, ...]] = {
    "durable": ("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
    "default": (),
    "fast": ("--appendonly", "yes", "--appendfsync", "everysec", "--save", ""),
}

#: postgresql.conf settings. ``default``: the shipped ones (fsync and synchronous_commit are on there too, but
#: nothing is said: a distribution's own config decides)
POSTGRES: Mapping[str, Mapping[str, str]] = {
    "durable": {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"},
    "default": {},
    "fast": {"synchronous_commit": "off"},
}

#: the PRAGMAs a SQLite connection runs first. ``default``: SQLite's own (a rollback journal, ``synchronous =
#: FULL``); in WAL mode ``NORMAL`` syncs the WAL only at a checkpoint, so a commit since is lost at a power cut
SQLITE: Mapping[str, tuple[str, ...]] = {
    "durable": ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"),
    "default": (),
    "fast": ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL"),
}

#: every store's table, by the store kind a backend declares (``Target.store``)
STORES: Mapping[str, Mapping[str, object]] = {"redis": REDIS, "postgres": POSTGRES, "sqlite": SQLITE}


class UnknownProfile(BadInput):
    """A profile name none of :data:`PROFILES`; ``str()`` names them."""


def check_profile(profile: str) -> str:
    """``profile`` if it is one of :data:`PROFILES`; UnknownProfile naming them otherwise."""
    if profile not in PROFILES:
        raise UnknownProfile(f"unknown store config {profile!r} (one of {', '.join(PROFILES)})")
    return profile


def settings(store: str | None, profile: str) -> list[str]:
    """``profile``'s settings of ``store`` in the words of its own configuration (``appendfsync always``,
    ``synchronous_commit = off``, ``PRAGMA synchronous=NORMAL``): what the run's header and report say it ran with.
    ``["as shipped"]`` for the ``default`` profile, nothing for a store without profiles."""
    if store not in STORES:
        return []
    if store == "redis":
        args = REDIS[profile]
        said = [f"{k.removeprefix('--')} {v or chr(39) * 2}" for k, v in zip(args[::2], args[1::2], strict=True)]
    elif store == "postgres":
        said = [f"{k} = {v}" for k, v in POSTGRES[profile].items()]
    else:
        said = list(SQLITE[profile])
    return said or ["as shipped"]
