"""The ``leasecheck`` command line.

Exit codes are a contract (DESIGN.md): 0 valid, 1 anomalies found, 2 unknown,
3 bad input or usage error. click's own usage errors exit 2, which would read
as "unknown", so :func:`main` maps them to 3.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec
from rich.console import Console

from leasecheck.checker import DEFAULT_BUDGET, check_source
from leasecheck.histories import HistoryError
from leasecheck.report import print_targets, print_verdict
from leasecheck.targets.registry import TargetNotFound, available, load

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_BAD_INPUT = 0, 1, 2, 3
#: the test environment failed (a server would not start, ...): not a verdict on the backend
EXIT_ENVIRONMENT = 4


def history_path(path: str) -> Path:
    """A history file, or a store directory holding ``history.jsonl``."""
    p = Path(path)
    if p.is_dir():
        inner = p / "history.jsonl"
        if not inner.is_file():
            raise HistoryError(path, None, "is a directory with no history.jsonl (not a store directory)")
        return inner
    return p


def _worst(codes: list[int]) -> int:
    """Bad input beats anomalies, which beat unknown, which beats valid."""
    for code in (EXIT_BAD_INPUT, EXIT_INVALID, EXIT_UNKNOWN):
        if code in codes:
            return code
    return EXIT_VALID


class ExitCodeGroup(click.Group):
    """A click group whose usage errors exit 3, as DESIGN.md's contract says (click uses 2)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args, prog_name or "leasecheck", complete_var, standalone_mode=False, **extra)
        except click.ClickException as e:
            e.show()
            sys.exit(EXIT_BAD_INPUT)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=ExitCodeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="leasecheck")
def main() -> None:
    """leasecheck: correctness testing for lease / fencing-token implementations."""


@main.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as one JSON object (one per line for several paths).")
@click.option(
    "--budget", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_BUDGET, show_default=True,
    help="Seconds the linearizability search may spend per history before the verdict is 'unknown'.",
)
@click.option("--explain", is_flag=True, help="Render the chain of ops that proves each anomaly.")
@click.option(
    "--engine", type=click.Choice(["auto", "search"]), default="auto", show_default=True,
    help="'auto' decides from the epoch order and searches only where it must; 'search' always runs the WGL search.",
)
def check(paths: tuple[str, ...], as_json: bool, budget: float, explain: bool, engine: str) -> None:
    """Check histories (files, or store directories holding history.jsonl).

    Exit code: 0 valid, 1 anomalies found, 2 unknown (search budget ran out),
    3 bad input.
    """
    out = Console(highlight=False, soft_wrap=False)
    err = Console(stderr=True, highlight=False, soft_wrap=True)  # warnings name paths: never wrap them
    codes = []
    for path in paths:
        try:
            verdict = check_source(history_path(path), budget=budget, engine=engine)  # type: ignore[arg-type]
        except HistoryError as e:
            click.echo(str(e), err=True)
            codes.append(EXIT_BAD_INPUT)
            continue
        for w in verdict.warnings:
            err.print(f"warning: {w}")
        if as_json:
            obj = verdict.to_json()
            if len(paths) > 1:
                obj = {"history": path, **obj}
            sys.stdout.buffer.write(msgspec.json.encode(obj) + b"\n")
            sys.stdout.flush()
        else:
            print_verdict(out, path, verdict, explain)
        codes.append(verdict.exit_code)
    sys.exit(_worst(codes))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per backend, one per line.")
def targets(as_json: bool) -> None:
    """List the installed lease backends (reference, broken variants, third-party plug-ins)."""
    rows: list[dict[str, object]] = []
    for name, spec in available().items():
        try:
            cls = load(name)
        except TargetNotFound as e:
            rows.append({"name": name, "class": spec, "error": str(e)})
            continue
        rows.append({
            "name": name, "class": spec, "store": cls.store, "fenced": cls.fenced, "summary": cls.summary(),
            "bug": cls.bug, "expected": list(cls.expected), "exposed_by": list(cls.exposed_by),
        })
    if as_json:
        for row in rows:
            sys.stdout.buffer.write(msgspec.json.encode(row) + b"\n")
    else:
        print_targets(Console(highlight=False), rows)


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


@main.command()
@click.option("--target", default="sqlite", show_default=True, help="Backend: a registered name (see `leasecheck targets`) or module:Class.")
@click.option("--url", default=None, help="Use this store (DSN, redis:// URL, SQLite path) instead of starting one.")
@click.option("--nemesis", default="pause", show_default=True, help="Comma-separated faults (see `leasecheck nemeses`); 'none' for none.")
@click.option("--nemesis-interval", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True, help="Seconds between faults (± half, from the seed).")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True, help="Seconds of workload before the final phase.")
@click.option("--concurrency", type=click.IntRange(min=1), default=5, show_default=True, help="Worker processes.")
@click.option("--ttl", "ttl_ms", type=click.IntRange(min=10), default=1000, show_default=True, help="Lease duration in milliseconds.")
@click.option("--nodes", type=click.IntRange(min=1), default=20, show_default=True, help="Nodes per run (run-N/node-I).")
@click.option("--dup-rate", type=click.FloatRange(0, 1), default=0.1, show_default=True, help="Share of deliveries the queue duplicates.")
@click.option("--rate", type=click.FloatRange(min=0), default=0.0, show_default=True, help="Ops per second per worker at most (0: unlimited).")
@click.option("--seed", type=int, default=None, help="Seed of every random choice (printed; replay a run with it).")
@click.option("--store", "store_dir", default="store", show_default=True, help="Folder of run directories.")
@click.option("--clock-uncertainty", "clock_uncertainty_ms", type=click.FloatRange(min=0), default=10.0, show_default=True, help="Most the store's clock can misjudge an interval, ms (recorded in the history).")
@click.option("--store-skew", "store_skew_ms", type=click.FloatRange(min=0), default=None, help="Most the clock-store fault skews the store's clock, ms (default ttl/4; recorded as 2x in the uncertainty).")
@click.option("--env", "environment", type=click.Choice(["local", "docker"]), default="local", show_default=True, help="Run Postgres / Redis as local processes or as Docker containers.")
@click.option("--json", "as_json", is_flag=True, help="Print results.json instead of the summary.")
def run(target: str, url: str | None, nemesis: str, nemesis_interval: float, time_limit: float, concurrency: int,
        ttl_ms: int, nodes: int, dup_rate: float, rate: float, seed: int | None, store_dir: str,
        clock_uncertainty_ms: float, store_skew_ms: float | None, environment: str, as_json: bool) -> None:
    """Run a backend under concurrent workers and faults, record the history, check it.

    With no options: the SQLite reference backend (no server needed) under
    process pauses for 30 s. Exit code: 0 valid, 1 anomalies, 2 unknown,
    3 bad options, 4 the environment failed.
    """
    from leasecheck.runner import BadOptions, RunOptions
    from leasecheck.runner import run as run_test
    from leasecheck.servers.base import EnvironmentFailure
    from leasecheck.workload import Workload

    faults = () if nemesis.strip().lower() in ("", "none") else _csv(nemesis)
    opts = RunOptions(
        target=target, url=url, nemesis=faults, nemesis_interval=nemesis_interval, time_limit=time_limit,
        concurrency=concurrency, ttl_ms=ttl_ms, nodes=nodes, dup_rate=dup_rate, seed=seed, store=store_dir,
        clock_uncertainty_ms=clock_uncertainty_ms, store_skew_ms=store_skew_ms, env=environment,
        workload=Workload(rate=rate),
    )
    err = Console(stderr=True, highlight=False, soft_wrap=True)  # warnings name paths: never wrap them
    try:
        if as_json:
            result = run_test(opts)
        else:
            from leasecheck.report import LiveProgress

            with LiveProgress(err, opts) as progress:
                result = run_test(opts, progress.update)
    except (BadOptions, TargetNotFound) as e:
        click.echo(f"leasecheck run: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except EnvironmentFailure as e:
        click.echo(f"leasecheck run: the environment failed: {e}", err=True)
        sys.exit(EXIT_ENVIRONMENT)
    if as_json:
        sys.stdout.write((result.run_dir / "results.json").read_text())
    else:
        from leasecheck.report import print_run

        print_run(Console(highlight=False), result)
    sys.exit(result.verdict.exit_code)


@main.command()
@click.argument("path", default="store/latest", metavar="[RUN_DIR]")
def heal(path: str) -> None:
    """Undo the faults a run left active (after the harness itself was killed).

    Reads RUN_DIR/faults.json (default: store/latest), undoes each fault it
    lists — resume paused processes, and, with their nemeses, delete toxics,
    reset clocks, unpause containers — and clears the file.
    """
    from leasecheck.nemesis.catalogue import import_fault_modules
    from leasecheck.nemesis.heal import heal_record
    from leasecheck.storedir import load_faults, save_faults

    import_fault_modules()  # each registers how to undo its records (docker's only if the extra is installed)
    run_dir = Path(path)
    if not run_dir.is_dir():
        click.echo(f"leasecheck heal: {path}: not a run directory", err=True)
        sys.exit(EXIT_BAD_INPUT)
    records = load_faults(run_dir)
    if not records:
        click.echo(f"{run_dir}: no active faults recorded; nothing to heal")
        return
    for rec in records:
        click.echo(f"{rec.get('kind')}: {heal_record(rec)}")
    save_faults(run_dir, [])


@main.command()
@click.option("--markdown", is_flag=True, help="Print a Markdown table with what each fault needs (the README's).")
def nemeses(markdown: bool) -> None:
    """List the faults `leasecheck run --nemesis` knows, one line each (the fault catalogue)."""
    from leasecheck.nemesis.catalogue import CATALOGUE, Need

    if markdown:
        click.echo("| fault | what it does | needs |")
        click.echo("|---|---|---|")
        for kind in CATALOGUE:
            needs = ", ".join(need.value for need in Need if need in kind.needs) or "-"
            click.echo(f"| `{kind.name}` | {kind.description} | {needs} |")
        return
    width = max(len(kind.name) for kind in CATALOGUE)
    for kind in CATALOGUE:
        click.echo(f"{kind.name:<{width}}  {kind.description}")
