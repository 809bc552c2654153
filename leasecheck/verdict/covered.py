"""What a run covered, in one line, from its results.json: the words a green gate says about what it tested.

One owner for the line, so the terminal's summary, the pytest plugin's line per run and the JUnit properties say the
same thing in the same words. It reads results.json's ``coverage`` object (docs/contracts/store-directory.md), not a
live run, and imports only the standard library: the pytest plugin, which every pytest session of a project with
leasecheck installed loads, may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def covered_line(coverage: object) -> str:
    """``coverage: 20/20 situations reached, each at least 3 times (after 24.2 s)``, or what stayed short and never happened.

    ``coverage``: results.json's ``coverage`` (counts, applicable, missing, and with ``--until-covered`` its ``goal``).
    """
    if not isinstance(coverage, Mapping):
        return "coverage: not counted"
    applicable = [s for s in coverage.get("applicable") or () if isinstance(s, str)]
    missing = [s for s in coverage.get("missing") or () if isinstance(s, str)]
    line = f"coverage: {len(applicable) - len(missing)}/{len(applicable)} situations reached"
    goal = coverage.get("goal")
    if isinstance(goal, Mapping):
        line += _goal_words(goal)
    if missing:
        line += f"; never: {', '.join(missing)}"
    return line


def _goal_words(goal: Mapping[str, Any]) -> str:
    short = {s: n for s, n in (goal.get("short") or {}).items() if isinstance(n, int)}
    least = goal.get("min_count")
    if not short:
        after = goal.get("covered_after_s")
        return f", each at least {least} times" + (f" (after {after:.1f} s)" if isinstance(after, int | float) else "")
    reached_short = {s: n for s, n in short.items() if n}  # those never reached are said as "never"
    ran, ended_by = goal.get("ran_s"), goal.get("ended_by")
    if ended_by == "max-time" and isinstance(ran, int | float):
        words = f" (the goal of {least} each not met in {ran:.0f} s, the most --max-time allows)"
    elif isinstance(ended_by, str) and ended_by != "covered":
        words = f" (the goal of {least} each not met: stopped by {ended_by})"
    else:
        words = f" (the goal of {least} each not met)"
    if reached_short:
        words += f"; fewer than {least} times: " + ", ".join(f"{s} ({n})" for s, n in reached_short.items())
    return words
