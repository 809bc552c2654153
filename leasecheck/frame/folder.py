"""A run's folder from its creation to its end: its id, its files, its log, its signals, its faults healed.

Both run kinds open their folder here (:class:`RunFrame`), so that a lease run and a
queue run leave the same files the same way: ``test.json`` (the options, the seed, the
run id, the command line), ``leasecheck.log`` (the ``leasecheck`` logger, the run's own
lines and the nemesis'), ``faults.json`` (what ``leasecheck heal`` must undo if the
harness dies now, emptied once every fault is healed), and on an exception the folder
marked failed (never ``latest`` without a history) with the traceback in the log.
"""

from __future__ import annotations

import logging
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from leasecheck.errors import EnvironmentFailure
from leasecheck.frame.interrupts import Interrupts
from leasecheck.nemesis.protocol import Fault
from leasecheck.rundir.runfolder import RunFolder
from leasecheck.rundir.storedir import mark_failed, new_run_dir, save_faults

log = logging.getLogger("leasecheck.frame")
#: what a run's folder logs: the run's own lines and the nemesis' (each fault's aim, what it landed in)
RUN_LOGGER = logging.getLogger("leasecheck")


def new_run_id() -> str:
    """A name for one run, unique among every run that ever shares its store (48 random bits).

    Why: a team points run after run (seeds, matrix cells, CI jobs) at one
    database with ``--url``. With the same node names every time, a second run
    read the first one's SUCCEEDED rows as its own and a correct lease was
    reported non-linearizable. Not from ``--seed``: the same seed run twice on
    one store must not collide either, and the name decides nothing the run does.
    """
    return secrets.token_hex(6)


def log_to(logger: logging.Logger, path: Path) -> logging.Handler:
    """Send the run's log to its folder (the caller removes the handler at the end)."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler


class RunFrame:
    """One run's folder, id and signals; :meth:`opened` around the whole run, :meth:`healed` around its faults."""

    run_dir: Path

    def __init__(self, store: Path, name: str) -> None:
        """``name``: the folder the run goes in under ``store`` (the target's, ``queue-LIBRARY`` for a queue run)."""
        self.store = store
        self.name = name
        #: in every node's (or job's) name: runs that share a store never see each other's
        self.run_id = new_run_id()
        #: SIGINT / SIGTERM while the run is open: its ``event`` ends the runner's loops, its ``name`` is results.json's
        self.interrupts = Interrupts()

    @contextmanager
    def opened(self, options: dict[str, Any], seed: int, on_failure: Callable[[], None] | None = None,
               **more: Any) -> Iterator[Path]:
        """The run folder with its log and test.json, signals caught, for the ``with`` block (the whole run).

        An exception out of it is logged with its traceback, ``on_failure`` is called (what the runner must let go
        of first), the folder is marked failed and the exception goes on up with a note naming the log."""
        self.run_dir = new_run_dir(self.store, self.name)
        handler = log_to(RUN_LOGGER, RunFolder(self.run_dir).log)
        try:
            RunFolder(self.run_dir).write_test({"options": options, "seed": seed, "run_id": self.run_id,
                                                "argv": sys.argv, **more})
            with self.interrupts:
                yield self.run_dir
        except BaseException as e:  # the traceback goes to the run's log; the CLI prints one line (exit 3 or 4)
            self.failed(e, on_failure)
            raise
        finally:
            RUN_LOGGER.removeHandler(handler)
            handler.close()

    def failed(self, e: BaseException, on_failure: Callable[[], None] | None = None) -> None:
        """Log the traceback, mark the run directory failed (storedir: never ``latest`` without a history)."""
        log.error("run failed: %s: %s", type(e).__name__, e, exc_info=e)
        if on_failure is not None:
            on_failure()
        mark_failed(self.run_dir, f"{type(e).__name__}: {e}" if not isinstance(e, EnvironmentFailure) else str(e))
        e.add_note(f"traceback in {RunFolder(self.run_dir).log}")

    def save_faults(self, active: list[Fault]) -> None:
        """Keep faults.json true: what ``leasecheck heal`` must undo if we die now (a nemesis' ``on_change``)."""
        save_faults(self.run_dir, [r for r in (f.undo_record() for f in active) if r is not None])

    @contextmanager
    def healed(self, heal: Callable[[], Sequence[Fault]]) -> Iterator[None]:
        """The test proper: on every way out of it, ``heal`` (every fault the runner's parts made), then faults.json
        left with what it could not heal (a host lost mid-run), for ``leasecheck heal``; empty most times."""
        try:
            yield
        finally:
            self.save_faults(list(heal()))

    @property
    def interrupted(self) -> str | None:
        """``"SIGINT"`` or ``"SIGTERM"`` if a signal cut the run short, else None."""
        return self.interrupts.name

    def say_if_interrupted(self) -> None:
        """A signal cut the test short: say so (the run goes on to heal, record and check what it has)."""
        if self.interrupts.name is not None:
            log.info("%s: winding down", self.interrupts.name)
            print(f"\ninterrupted ({self.interrupts.name}): healing faults and checking what was recorded", file=sys.stderr)


__all__ = ["RUN_LOGGER", "RunFrame", "log_to", "new_run_id"]
