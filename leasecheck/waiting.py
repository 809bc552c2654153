"""Waiting for something to become true: poll a condition against a deadline.

Why one helper: the harness, the conformance scenarios and the tests all wait
for events they cannot be told about (a server answering, a lease expiring on
the store's clock, a backend blocking on a lock). Polling a condition with a
deadline is the one honest way; sleeping a fixed time and hoping is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition a caller had to see did not come true in time.

    An AssertionError, so that in a test it reads as the test's failure, not as an error of the harness.
    """


def poll(condition: Callable[[], T | None], timeout: float, every: float = 0.01) -> T | None:
    """Call ``condition`` until it returns something truthy and return that; None at the deadline.

    It is called at least once, and once more at the deadline, however long each call takes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(every)


def wait_for(condition: Callable[[], T | None], timeout: float, every: float = 0.01, what: str = "the condition") -> T:
    """As :func:`poll`, but the deadline is a failure: raise :class:`WaitTimeout` naming ``what``."""
    value = poll(condition, timeout, every)
    if value is None:
        raise WaitTimeout(f"{what} not met within {timeout:g} s")
    return value
