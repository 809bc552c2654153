"""Reading an inner pytest's summary: which tests of a module failed, how many passed.

The scaffold tests (tests/servers/test_new_target*.py) and the journeys that follow a
page's ``pytest`` command (tests/runs/test_journey*.py) judge a pytest they ran by its output.
"""

from __future__ import annotations

import re


def failed_tests(output: str, test: str = "test_acme_lease.py") -> set[str]:
    """The names of ``test``'s tests that the summary says FAILED."""
    return set(re.findall(rf"^FAILED {re.escape(test)}::(\S+)", output, re.MULTILINE))


def passed_count(output: str) -> int:
    """How many tests passed, from the summary line (0 if it says none)."""
    found = re.search(r"\b(\d+) passed\b", output)
    return int(found.group(1)) if found else 0
