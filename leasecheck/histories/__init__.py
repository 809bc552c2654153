"""History format v1: the one contract every part of leasecheck shares.

A history is what a test run leaves behind: a header line and one event per line,
each an invoke or a completion of a worker's operation, or a nemesis fault. This
package reads (validating, streaming: :mod:`~leasecheck.histories.reader`, and in byte ranges side by side:
:mod:`~leasecheck.histories.chunks`) and writes (append-only, flushed: :mod:`~leasecheck.histories.writer`) that
format, and nothing else: it knows no checker, no backend and no fault. Its
:mod:`~leasecheck.histories.vocabulary` declares the words everyone shares (op
names, fail reasons, statuses, anomaly kinds).

See ``docs/contracts/history-format.md`` for the normative rules (and ``FORMAT.md`` here).
"""

from leasecheck.histories.format import FORMAT_NAME, FORMAT_VERSION, NEMESIS, Event, Header, Op, make_op, named_epoch
from leasecheck.histories.reader import HistoryReader, read_history
from leasecheck.histories.rules import HistoryError
from leasecheck.histories.vocabulary import CLIENT_FUNCTIONS, FAIL_REASONS, READ_STATUSES
from leasecheck.histories.writer import HistoryWriter

__all__ = [
    "CLIENT_FUNCTIONS",
    "FAIL_REASONS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "NEMESIS",
    "READ_STATUSES",
    "Event",
    "Header",
    "HistoryError",
    "HistoryReader",
    "HistoryWriter",
    "Op",
    "make_op",
    "named_epoch",
    "read_history",
]
