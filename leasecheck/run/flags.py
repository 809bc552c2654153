"""``leasecheck run``'s options, declared once, with the :class:`~.options.RunOptions` field each one sets.

Three readers take a run's options by their flags, and must never disagree on a
flag's name, type, default or meaning: the CLI's ``run`` command takes them
(:data:`FLAGS`), ``leasecheck matrix`` checks a spec's keys against them and
parses each cell with them (:func:`parse`, :func:`run_options`), and the pytest
plugin passes ``leasecheck_run(**options)`` on as them. The report's replay
command is built from the same table (:func:`replay_flags`).

Loading this module loads click and nothing of a run: ``leasecheck check --json``
starts without the run's modules (tests/local/test_startup.py), so :func:`run_options`
imports :mod:`.options` only when it builds one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import click

from leasecheck.lists import BadList, names, repeated
from leasecheck.report.inputs import ReplayFlag
from leasecheck.run.clusters import CLUSTERS

if TYPE_CHECKING:
    from leasecheck.run.options import RunOptions


class Finite(click.FloatRange):
    """A float range that also refuses nan and inf: ``--time-limit inf`` or ``nan`` would run forever, not fail."""

    name = "finite number"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv


class Seconds(Finite):
    """A duration: seconds, or a number with ``s``, ``m`` or ``h`` (``--time-limit 8h`` for a night's soak)."""

    name = "duration"
    UNITS: ClassVar[dict[str, float]] = {"s": 1.0, "m": 60.0, "h": 3600.0}

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, str) and value.strip()[-1:].lower() in self.UNITS:
            text = value.strip()
            try:
                value = float(text[:-1]) * self.UNITS[text[-1].lower()]
            except ValueError:
                self.fail(f"{text!r} is not a duration (seconds, or a number with s, m or h: 90, 90s, 30m, 8h)", param, ctx)
        return super().convert(value, param, ctx)


def output_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An output file option (--junit, --html): refused before anything runs if it cannot be written (exit 3)."""
    if value is not None:
        from leasecheck.report.junit import unwritable

        why = unwritable(value)
        if why:
            raise click.BadParameter(why, ctx=ctx, param=param)
    return value


def faults(nemesis: str) -> tuple[str, ...]:
    """``--nemesis``: fault names, or ``none``. Empty is refused: an unset CI variable must not mean a fault-free run;
    so is an empty or repeated item (:func:`leasecheck.lists.names`)."""
    if nemesis.strip().lower() == "none":
        return ()
    if not nemesis.replace(",", "").strip():  # "", ",": nothing named at all
        raise click.BadParameter(f"{nemesis!r} names no fault: give faults (see `leasecheck nemeses`), or 'none' for a run without faults",
                                 param_hint="'--nemesis'")
    try:
        return names(nemesis, "--nemesis")
    except BadList as e:
        raise click.UsageError(str(e)) from None


def requirements(values: tuple[str, ...]) -> tuple[str, ...]:
    """``--require``'s values, none empty or given twice (:func:`leasecheck.lists.repeated`)."""
    try:
        return repeated(values, "--require")
    except BadList as e:
        raise click.UsageError(str(e)) from None


@dataclass(frozen=True)
class RunFlag:
    """One option of ``leasecheck run``: its click option, and the :class:`~.options.RunOptions` field it sets."""

    option: click.Option
    #: the field its value goes to (``workload.rate``: a field of the run's workload); None for how the
    #: command reports (``--json``, ``--coverage``, ``--junit``), which is no part of the run
    field: str | None
    #: turns the parsed value into the field's (``--nemesis pause,kill`` -> ``("pause", "kill")``)
    convert: Callable[[Any], Any] | None = None

    @property
    def name(self) -> str:
        """The long flag without its dashes: ``time-limit``."""
        return next(o for o in self.option.opts if o.startswith("--"))[2:]

    @property
    def param(self) -> str:
        """Where click puts its value (``ctx.params``): ``time_limit``, ``evidence_wait_s``."""
        assert self.option.name is not None
        return self.option.name


def _flag(*decls: str, field: str | None, convert: Callable[[Any], Any] | None = None, **attrs: Any) -> RunFlag:
    return RunFlag(click.Option(decls, **attrs), field, convert)


#: every option of ``leasecheck run``, in the order its --help and the docs list them
FLAGS: tuple[RunFlag, ...] = (
    _flag("--target", field="target", default="sqlite", show_default=True,
          help="Backend: a registered name (see `leasecheck targets`), module:Class, or exec:COMMAND (a child process per worker, any language)."),
    _flag("--url", field="url", default=None, help="Use this store (DSN, redis:// URL, SQLite path) instead of starting one."),
    _flag("--exec-store", field="exec_store", type=click.Choice(["none", "sqlite", "postgres", "redis"]), default="none", show_default=True,
          help="With --target exec:COMMAND: the store leasecheck starts for the child (its LEASECHECK_URL; store faults hit it). none: the child's own, given with --url if any."),
    _flag("--nemesis", field="nemesis", convert=faults, default="pause", show_default=True,
          help="Comma-separated faults (see `leasecheck nemeses`); 'none' for none."),
    _flag("--nemesis-interval", field="nemesis_interval", type=Finite(min=0, min_open=True), default=5.0, show_default=True,
          help="Seconds between faults (± half, from the seed)."),
    _flag("--time-limit", field="time_limit", type=Seconds(min=0, min_open=True), default=30.0, show_default=True,
          help="Seconds of workload before the final phase (or 30m, 8h: a soak; the history is checked as it is written, "
               "each node dropped once judged, so memory stays flat)."),
    _flag("--fail-fast", field="fail_fast", is_flag=True,
          help="Stop at the first proven anomaly: heal, record, finish the report, exit 1. Without it (the default) the run "
               "goes on to its time limit, saying each anomaly the moment it is proven. The pytest plugin and the matrix's "
               "cells expected valid fail fast by default."),
    _flag("--snapshot-every", "snapshot_every_s", field="snapshot_every_s", type=Seconds(min=0), default=300.0,
          show_default=True,
          help="Seconds between snapshots of results.json and the report while a run goes (0: none): a soak's verdict so far."),
    _flag("--evidence-wait", "evidence_wait_s", field="evidence_wait_s", type=Finite(min=0), default=0.0, show_default=True,
          help="After --time-limit, go on up to this many seconds more while the run lacks what the run verdict needs (ok claim/renew/effect/commit, a contended claim, every fault started and healed, the situations each fault requires and those of --require)."),
    _flag("--require", "require", field="require", convert=requirements, multiple=True, metavar="SITUATION",
          help="A coverage situation the run must reach (repeatable; see docs/coverage.md): it goes on up to --evidence-wait while one is missing, and is unknown if one never happened."),
    _flag("--until-covered", field="until_covered", is_flag=True,
          help="End on evidence, not on the clock: past --time-limit, go on until every coverage situation that applies to "
               "the run's faults was reached --min-count times (up to --max-time); the summary names any still short. The "
               "pytest plugin and the matrix's cells expected valid do this by default."),
    _flag("--min-count", field="min_count", type=click.IntRange(min=1), default=None,
          help="With --until-covered: how often each applicable situation must be reached [default: 3]."),
    _flag("--max-time", "max_time", field="max_time", type=Seconds(min=0, min_open=True), default=None,
          help="With --until-covered: the most the test proper lasts, however much is short [default: 4x --time-limit]."),
    _flag("--strict-coverage", field="strict_coverage", is_flag=True,
          help="With --until-covered: a situation still short of --min-count at --max-time makes the run unknown (exit 2)."),
    _flag("--concurrency", field="concurrency", type=click.IntRange(min=1), default=5, show_default=True, help="Worker processes."),
    _flag("--ttl", "ttl_ms", field="ttl_ms", type=click.IntRange(min=10), default=1000, show_default=True, help="Lease duration in milliseconds."),
    _flag("--nodes", field="nodes", type=click.IntRange(min=1), default=20, show_default=True, help="Nodes per run (run-N/node-I)."),
    _flag("--dup-rate", field="dup_rate", type=Finite(0, 1), default=0.1, show_default=True, help="Share of deliveries the queue duplicates."),
    _flag("--rate", field="workload.rate", type=Finite(min=0), default=0.0, show_default=True, help="Ops per second per worker at most (0: unlimited)."),
    _flag("--seed", field="seed", type=int, default=None, help="Seed of every random choice (printed; replay a run with it)."),
    _flag("--store", "store_dir", field="store", default="store", show_default=True, help="Folder of run directories."),
    _flag("--clock-uncertainty", "clock_uncertainty_ms", field="clock_uncertainty_ms", type=Finite(min=0), default=10.0, show_default=True,
          help="Most the store's clock can misjudge an interval, ms (recorded in the history)."),
    _flag("--store-skew", "store_skew_ms", field="store_skew_ms", type=Finite(min=0), default=None,
          help="Most the clock-store fault skews the store's clock, ms (default ttl/4; recorded as 2x in the uncertainty)."),
    _flag("--env", "environment", field="env", type=click.Choice(["local", "docker"]), default="local", show_default=True,
          help="Run Postgres / Redis as local processes or as Docker containers."),
    _flag("--cluster", field="cluster", type=click.Choice(list(CLUSTERS)), default=None,
          help="Run the store as a replicated cluster leasecheck starts (see `leasecheck clusters`): members on hosts of their own, faults between them."),
    _flag("--store-config", field="store_config", default="durable", show_default=True, metavar="PROFILE",
          help="How durably the store keeps what it acknowledged: durable (fsync before every reply), default (as shipped), fast (acknowledged before fsync)."),
    _flag("--hosts", "hosts_file", field="hosts", default=None, metavar="FILE",
          help="Fault your own deployment: its members' hosts, reached over ssh:// or docker:// (docs/hosts.md); clients reach it at --url."),
    _flag("--json", "as_json", field=None, is_flag=True, help="Print results.json instead of the summary."),
    _flag("--coverage", "coverage_counts", field=None, is_flag=True,
          help="End the summary with how often the run reached each situation (docs/coverage.md)."),
    _flag("--junit", "junit_file", field=None, default=None, metavar="FILE", callback=output_file,
          help="Also write the verdict as JUnit XML to FILE (anomalies a failure; unknown, interrupted or a failed environment an error)."),
)

#: the options' parser alone (the ``run`` command without its body): what :func:`parse` reads a cell's arguments with
_PARSER = click.Command("run", params=[flag.option for flag in FLAGS])


def parse(args: list[str]) -> dict[str, Any]:
    """``args`` parsed exactly as ``leasecheck run`` parses them (``ctx.params``); raises click's usage errors."""
    with _PARSER.make_context("leasecheck run", args) as ctx:
        return dict(ctx.params)


def run_options(params: Mapping[str, Any]) -> RunOptions:
    """The :class:`~.options.RunOptions` of parsed ``leasecheck run`` parameters (``ctx.params``, or :func:`parse`'s).

    Raises :class:`click.BadParameter` for a value only its conversion refuses
    (``--nemesis ""``). A field no flag sets keeps its default.
    """
    from leasecheck.run.options import RunOptions
    from leasecheck.run.workload_options import Workload

    fields: dict[str, Any] = {}
    workload: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.field is None:
            continue
        value = params[flag.param]
        if flag.convert is not None:
            value = flag.convert(value)
        owner, _, name = flag.field.rpartition(".")
        (workload if owner == "workload" else fields)[name] = value
    return RunOptions(**fields, workload=Workload(**workload))


def replay_flags() -> tuple[ReplayFlag, ...]:
    """The flags the report's replay command is built from, each with the default it is left out at.

    The run's own options first, in :data:`FLAGS` order, then its workload's
    (``--rate``): the report (which never imports a run) is given these by
    whoever writes it.
    """
    from leasecheck.run.options import RunOptions

    defaults = RunOptions()
    out = []
    for flag in FLAGS:
        if flag.field is None:
            continue
        value: Any = defaults
        for part in flag.field.split("."):
            value = getattr(value, part)
        out.append(ReplayFlag(flag.field, f"--{flag.name}", value, repeated=bool(flag.option.multiple)))
    return tuple(sorted(out, key=lambda f: "." in f.option))


__all__ = ["FLAGS", "Finite", "RunFlag", "faults", "output_file", "parse", "replay_flags", "requirements", "run_options"]
