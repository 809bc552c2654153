"""The broken-backend runs, generated from each variant's own ``bug``, ``expected`` and ``exposed_by``.

Two test modules run the deliberately broken variants under what exposes them:
``test_run.py`` (end to end: verdict, exit code, store directory: every variant a process
fault or duplicate delivery exposes) and ``test_detection.py`` (the detection matrix: the
variants exposed by other faults too). Both tables come from here, and here
from the variants' class attributes through the registry, so adding a variant
(one class, one entry point) adds its tests. What differs between the two modules
(which faults they run, duplicate-delivery rates, seeds, time limits) is written
once, below, as a :class:`Suite` each.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from leasecheck.targets.base import Target
from leasecheck.targets.registry import available, load

#: the ``exposed_by_workload`` condition that is no nemesis fault but the at-least-once
#: queue handing one node to two workers (the run's duplicate-delivery rate). Every
#: ``exposed_by`` entry is a fault of the catalogue that the variant's store accepts
#: (tests/local/test_targets.py holds them to it), so it goes to ``--nemesis`` as it is.
DUPLICATE_DELIVERY = "duplicate-delivery"


@dataclass(frozen=True)
class Suite:
    """How one test module runs the variants: every number that is not the variant's own."""

    #: the faults and workload conditions this module brings about; a variant exposed by none is left out
    exposers: frozenset[str]
    seed: int
    #: duplicate-delivery rate of a run, and of one that duplicate delivery exposes
    dup_rate: float
    exposing_dup_rate: float
    #: time limit of a run with nemesis faults, and of one exposed by duplicate delivery alone: the most a run may
    #: take, never what it takes, for each run stops at its first proof (``fail_fast``, as the pytest plugin's gate)
    seconds: float
    dup_only_seconds: float
    #: exposers another module runs every variant under already: a variant exposed by nothing else is left out
    covered_elsewhere: frozenset[str] = frozenset()


#: tests/runs/test_run.py: quick runs on process faults only (its module docstring says why)
END_TO_END = Suite(
    exposers=frozenset({"pause", "kill", DUPLICATE_DELIVERY}),
    seed=1, dup_rate=0.1, exposing_dup_rate=0.5, seconds=20.0, dup_only_seconds=12.0,
)

#: tests/detection/test_detection.py: every variant exposed by a fault test_run.py does not bring about, under every fault that
#: exposes it and its store can get (a variant that only pauses, kills or duplicate delivery expose is test_run.py's:
#: running it twice proved nothing more, and cost the suite's time)
DETECTION = Suite(
    exposers=frozenset({"pause", "kill", "kill-store", "partition", "clock-bump", DUPLICATE_DELIVERY}),
    seed=21, dup_rate=0.1, exposing_dup_rate=0.3, seconds=30.0, dup_only_seconds=30.0,
    covered_elsewhere=END_TO_END.exposers,
)


@dataclass(frozen=True)
class VariantRun:
    """One run of a broken variant: it must come back invalid with one of ``expected``."""

    variant: str
    nemesis: tuple[str, ...]
    dup_rate: float
    seed: int
    seconds: float
    bug: str
    expected: tuple[str, ...]


def broken_variants() -> list[type[Target]]:
    """Every registered backend that declares a bug, by name."""
    classes = (load(name) for name in available())
    return [cls for cls in classes if cls.bug]


def variant_run(cls: type[Target], suite: Suite) -> VariantRun | None:
    """``cls``'s run in ``suite``: the faults its ``exposed_by`` names and the duplicate rate its
    ``exposed_by_workload`` asks for, as far as the suite brings them about; None when it brings about none."""
    nemesis = tuple(f for f in cls.exposed_by if f in suite.exposers)
    duplicated = DUPLICATE_DELIVERY in cls.exposed_by_workload and DUPLICATE_DELIVERY in suite.exposers
    if not nemesis and not duplicated:
        return None
    if {*cls.exposed_by, *cls.exposed_by_workload} <= suite.covered_elsewhere:
        return None
    return VariantRun(
        variant=cls.name,
        nemesis=nemesis,
        dup_rate=suite.exposing_dup_rate if duplicated else suite.dup_rate,
        seed=suite.seed,
        seconds=suite.seconds if nemesis else suite.dup_only_seconds,
        bug=cls.bug,
        expected=cls.expected,
    )


def variant_params(suite: Suite) -> list[object]:
    """``pytest.param(VariantRun)`` per variant the suite can expose, with the variant's name as id."""
    runs = [r for r in (variant_run(cls, suite) for cls in broken_variants()) if r is not None]
    return [pytest.param(r, id=r.variant) for r in runs]
