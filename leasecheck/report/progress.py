"""What ``leasecheck run`` shows while it runs: the seed first, then progress.

On a terminal, one live line redrawn four times a second (rich's Live). Off a
terminal (a CI log, a pipe), a redrawn line is either nothing (it only appears
at the end) or noise (every redraw kept), so a plain line is printed every
:data:`PLAIN_INTERVAL_S` seconds instead. The seed is printed before anything
starts in both cases: a run that hangs, is killed or crashes can still be
replayed with ``--seed``.

The ``ops`` of a progress line are the workers' ops completed so far; the
verdict's ``ops`` at the end also counts the final reads and the ops that
never completed, so it is never smaller.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

#: seconds between two progress lines off a terminal
PLAIN_INTERVAL_S = 5.0


def start_line(opts: Any, seed: int) -> Text:
    """``leasecheck run: target sqlite, nemesis pause, 30 s, 5 workers, seed 42 (replay with --seed 42)``."""
    nemesis = ",".join(opts.nemesis) or "none"
    return Text.assemble(
        ("leasecheck run: ", "bold"), f"target {opts.target}, nemesis {nemesis}, {opts.time_limit:g} s, ",
        f"{opts.concurrency} workers, ", *_store_config(opts), ("seed ", "bold"), (str(seed), "bold"),
        f" (replay with --seed {seed})",
    )


def _store_config(opts: Any) -> tuple[str, ...]:
    """``store config fast, `` when the run names a profile other than the one leasecheck always ran with."""
    profile = getattr(opts, "store_config", "durable")
    return () if profile == "durable" else (f"store config {profile}, ",)


def progress_line(s: dict[str, Any], opts: Any) -> Text:
    """One snapshot of the runner: elapsed, ops so far and their outcomes, rate, workers, active faults."""
    faults = ", ".join(s.get("faults", ())) or "none"
    return Text.assemble(
        f"{s.get('elapsed', 0.0):5.1f}/{opts.time_limit:g} s  ", f"ops so far {s.get('ops', 0):,} (",
        ("ok ", "green"), f"{s.get('ok', 0):,}, ", ("fail ", "yellow"), f"{s.get('fail', 0):,}, ",
        ("info ", "magenta"), f"{s.get('info', 0):,})  ", f"{s.get('ops_per_s', 0.0):,.1f} ops/s  ",
        f"workers {s.get('workers', 0)}  faults: {faults}",
    )


class LiveProgress:
    """On a terminal: the start line, then a live line redrawn in place (gone at the end)."""

    def __init__(self, console: Console, opts: Any, seed: int) -> None:
        self.console = console
        self.opts = opts
        self.seed = seed
        self.live = Live(Text("starting…"), console=console, refresh_per_second=4, transient=True)

    def __enter__(self) -> LiveProgress:
        self.console.print(start_line(self.opts, self.seed))
        self.live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.live.__exit__(kind, exc, tb)

    def update(self, s: dict[str, Any]) -> None:
        self.live.update(progress_line(s, self.opts))


class PlainProgress:
    """Off a terminal: the start line, then a plain progress line at the first update and every few seconds."""

    def __init__(self, console: Console, opts: Any, seed: int, interval_s: float = PLAIN_INTERVAL_S) -> None:
        self.console = console
        self.opts = opts
        self.seed = seed
        self.interval_s = interval_s
        self._next = 0.0

    def __enter__(self) -> PlainProgress:
        self.console.print(start_line(self.opts, self.seed))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def update(self, s: dict[str, Any]) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval_s
            self.console.print(progress_line(s, self.opts))


def progress_for(console: Console, opts: Any, seed: int) -> LiveProgress | PlainProgress:
    """The live display on a terminal, plain lines anywhere else."""
    return LiveProgress(console, opts, seed) if console.is_terminal else PlainProgress(console, opts, seed)
