"""Running faults on a seeded schedule, and healing all of them on any exit."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nemesis.faults import EVENTS, Fault

#: record(f, value): write one nemesis event into the history
Record = Callable[[str, Any], None]
#: make(name, rng) -> a fault ready to start, or None when it has no victim now
Make = Callable[[str, random.Random], Fault | None]


@dataclass
class Nemesis:
    """Every ``interval_s`` (± half, from the seed) start one fault, chosen from ``kinds``;
    heal it after ``duration_s(kind, rng)``. ``heal_all()`` undoes whatever is active:
    the runner calls it on normal exit, Ctrl-C and exceptions."""

    kinds: Sequence[str]
    interval_s: float
    duration_s: Callable[[str, random.Random], float]
    make: Make
    record: Record
    rng: random.Random
    active: list[Fault] = field(default_factory=list)
    started: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    error: BaseException | None = None

    def start(self) -> None:
        if not self.kinds:
            return
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.rng.uniform(0.5, 1.5) * self.interval_s):
                kind = self.rng.choice(list(self.kinds))
                with self._lock:
                    if self._stop.is_set():
                        return
                    fault = self.make(kind, self.rng)
                    if fault is None:
                        continue
                    value = fault.start()
                    self.active.append(fault)
                    self.started += 1
                    self.record(EVENTS[kind][0], value)
                if self._stop.wait(self.duration_s(kind, self.rng)):
                    return
                self._heal(fault, kind)
        except BaseException as e:  # reported by the runner, which heals all
            self.error = e

    def _heal(self, fault: Fault, kind: str) -> None:
        with self._lock:
            if fault not in self.active:
                return
            self.active.remove(fault)
            value = fault.heal()
            if value is not None:
                self.record(EVENTS[kind][1], value)

    def active_names(self) -> list[str]:
        with self._lock:
            return [f.name for f in self.active]

    def heal_all(self) -> None:
        """Stop scheduling and undo every active fault (idempotent)."""
        self._stop.set()
        with self._lock:
            faults, self.active = self.active, []
            for fault in faults:
                value = fault.heal()
                if value is not None:
                    self.record(EVENTS.get(fault.name, (fault.name, "heal"))[1], value)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30)
