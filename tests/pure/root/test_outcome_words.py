"""A verdict has one word and one exit code, said by one owner (``leasecheck.exits``) for every view.

results.json's ``valid`` becomes a word in the tables, JUnit, the audit rows and the pytest plugin, and an exit
code for every command; before, three functions said the word (one said "error" where the others said "unknown"
for a verdict that could not be read) and the exit code was mapped apart. Each view is held to the one mapping here.
"""

from __future__ import annotations

import pytest

from leasecheck.checker.verdict import Verdict
from leasecheck.ci.plugin_args import EXPECTATIONS
from leasecheck.exits import VERDICTS, Exit, verdict_exit, verdict_word
from leasecheck.verdict.outcomes import EXPECTABLE


@pytest.mark.parametrize("valid, word, code", [(True, "valid", 0), (False, "invalid", 1), ("unknown", "unknown", 2)])
def test_each_verdict_has_one_word_and_one_code(valid: object, word: str, code: int) -> None:
    assert verdict_word(valid) == word and verdict_exit(valid) == code
    assert Verdict(valid, [], {}).exit_code == code  # type: ignore[arg-type]


@pytest.mark.parametrize("unreadable", [None, "valid", 1, "yes"])
def test_a_verdict_that_cannot_be_read_is_an_error_never_a_verdict(unreadable: object) -> None:
    assert verdict_word(unreadable) == "error" and verdict_exit(unreadable) == Exit.UNKNOWN


def test_what_a_user_may_expect_is_the_three_verdicts_everywhere() -> None:
    assert VERDICTS == ("valid", "invalid", "unknown") == EXPECTABLE
    assert (*VERDICTS, "any") == EXPECTATIONS
