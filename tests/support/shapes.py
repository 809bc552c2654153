"""A line of output made generic: what a page's sample of real output is compared by (tests/local/test_docs.py, the journeys).

A run's output names paths, run ids, numbers and the anomalies it happened to
find; the shape keeps the words and layout every run's line has.
"""

from __future__ import annotations

import re

from leasecheck.histories.vocabulary import FAIL_REASONS, KINDS, SITUATIONS
from leasecheck.nemesis.catalogue import CATALOGUE

#: the words whose choice in a line depends on the run: kinds, fail reasons, faults, situations
_WORDS = sorted({*KINDS, *FAIL_REASONS, *SITUATIONS, *(k.name for k in CATALOGUE), "none"}, key=len, reverse=True)
_WORD = re.compile(r"(?<![\w-])(?:" + "|".join(map(re.escape, _WORDS)) + r")(?![\w-])")
_PATH = re.compile(r"(?<![\w.~])/[^\s'\")\]]+")
_HEX = re.compile(r"\b[0-9a-f]{8,}\b")
_NUM = re.compile(r"\d+(?:[.,]\d+)*")
_LIST = re.compile(r"W(?: x?N)?(?:,\s?W(?: x?N)?)*")
_NUMS = re.compile(r"\bN(?:,\s?N)+\b")
_REPEAT = re.compile(r"([^\w\s])\1+")


#: the end of a coverage line that names the situations a run never reached: which ones varies with the run's timing
_NEVER = re.compile(r"; never: .*$")


def shape(line: str) -> str:
    """A line with what varies from run to run made generic.

    Absolute paths become ``PATH``, run ids ``H``, numbers ``N`` (a list of them, as a
    proof's ops, one ``N``: a duplicate commit is proven by two ops, a stale one by three); the names of
    anomaly kinds, fail reasons, faults and situations (and ``none``), and lists of
    them with their counts, become ``WS``; a run of one punctuation character (a
    table's border, pytest's ``____``) becomes one; spaces are collapsed. What
    stays is the line's words and layout: the shape a tool's line has whatever
    happened in the run.
    """
    s = _PATH.sub("PATH", _NEVER.sub("", line.rstrip()))
    s = _HEX.sub("H", s)
    s = _WORD.sub("W", s)
    s = _NUMS.sub("N", _NUM.sub("N", s))
    s = _LIST.sub("WS", s)
    s = _REPEAT.sub(r"\1", s)
    return " ".join(s.split())


def label(line: str) -> str:
    """A line's first three words, shaped: how a loose sample is compared (an explanation's wording varies with the anomaly)."""
    return " ".join(shape(line).split()[:3])
