"""Histories of many nodes: several simulated runs (tests/support/sim.py) side by side, as one history.

What the partitioned checker and the reader's fast loop are held on: nodes and
processes renamed apart, maybe nemesis events at random times, maybe a tail cut
off as a run that died mid-write leaves it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from sim import PLANTERS, dump, parse, sim_histories


def combine(runs: Sequence[list[str]], rng: random.Random, nemesis: int = 0, cut: int = 0) -> bytes:
    """One history of several runs interleaved in time: nodes and processes renamed apart, the first run's header.

    ``nemesis`` more fault events at random times; ``cut`` bytes cut off the end (a run that died mid-write).
    """
    header: dict[str, Any] = {}
    merged: list[tuple[int, int, int, dict[str, Any]]] = []
    for r, lines in enumerate(runs):
        h, events = parse(lines)
        header = header or h
        for i, ev in enumerate(events):
            if isinstance(ev["process"], int):
                ev["process"] += 10_000 * r
            if ev.get("node") is not None:
                ev["node"] = f"run-{r}/{ev['node']}"
            merged.append((ev["time"], r, i, ev))
    end = max((t for t, *_ in merged), default=0)
    for j in range(nemesis):
        victims = [rng.randrange(0, 10_000 * len(runs))]
        merged.append((rng.randint(0, end), -1, j, {"time": 0, "process": "nemesis", "type": "info", "f": "pause", "value": victims}))
    merged.sort(key=lambda m: m[:3])
    events = []
    for t, _, _, ev in merged:
        ev["time"] = t
        events.append(ev)
    data = "".join(dump(header, events)).encode()
    return data[: len(data) - cut] if cut else data


@st.composite
def many_runs(draw: Any) -> bytes:
    """1-5 simulated runs, some with a planted anomaly, maybe nemesis events and a cut tail, as one history."""
    rng = draw(st.randoms(use_true_random=False))
    runs = []
    for _ in range(draw(st.integers(1, 5))):
        lines = draw(sim_histories())
        kind = draw(st.sampled_from([None, None, *sorted(PLANTERS)]))
        if kind is not None and draw(st.booleans()):
            try:
                lines, _ = PLANTERS[kind](lines, rng)
            except Exception:  # the planter found nowhere to plant: keep the run as it is
                pass
        runs.append(lines)
    cut = draw(st.sampled_from([0, 0, 0, 7, 40]))
    return combine(runs, rng, nemesis=draw(st.integers(0, 6)), cut=cut)
