"""A list of names, as every option that takes one reads it: items neither empty nor named twice.

``--nemesis pause,kill``, ``leasecheck audit --seeds 1,2,3``, a matrix spec's
``targets`` and nemesis sets, ``leasecheck_run(nemesis=[...], seeds=[...])``,
repeated flags such as ``--require``: each is a list whose items mean one thing
each. An empty item (``pause,,``: a variable that expanded to nothing) or one named
twice (``pause,pause``: a typo for another fault) is a mistake the run would hide
(dropped, or run once), so it is refused here, before anything starts, in one line
that names the option and the item (exit 3 on the command line). Every reader of
such a list calls :func:`names` (comma text) or :func:`distinct` (items given one by
one), so they refuse alike and say it alike.

Imports only :mod:`leasecheck.errors` (a bad list is bad input, exit 3): the CLI, the run, the matrix and the
pytest plugin all take it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from leasecheck.errors import BadInput

T = TypeVar("T")


class BadList(BadInput):
    """A list with an empty or repeated item; ``str()`` is one line: ``OPTION VALUE: why``."""

    def __init__(self, option: str, shown: str, why: str) -> None:
        super().__init__(f"{option} {shown}: {why}")
        self.option, self.shown, self.why = option, shown, why


def ordinal(n: int) -> str:
    """``1`` -> ``1st``, ``2`` -> ``2nd``, ``11`` -> ``11th``, ``23`` -> ``23rd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def distinct(items: Sequence[T], option: str, shown: str | None = None) -> tuple[T, ...]:
    """``items`` as a tuple, refused (:class:`BadList`) if one is empty (a blank string) or equals an earlier one.

    ``shown`` is how the user wrote the list (default: the items joined by commas).
    """
    text = shown if shown is not None else ",".join(map(str, items))
    seen: set[T] = set()
    for i, item in enumerate(items, 1):
        if isinstance(item, str) and not item.strip():
            raise BadList(option, text, f"an empty item (the {ordinal(i)})")
        if item in seen:
            raise BadList(option, text, f"{item} is named twice")
        seen.add(item)
    return tuple(items)


def names(value: str, option: str) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")``: comma-separated names, each stripped; empty text, an empty item or one named twice
    is refused (:class:`BadList`)."""
    if not value.strip():
        raise BadList(option, repr(value), "names nothing")
    return distinct([item.strip() for item in value.split(",")], option, value)


def repeated(items: Sequence[str], option: str) -> tuple[str, ...]:
    """A repeatable flag's values (``--require A --require B``): :func:`distinct`, shown as the user typed them."""
    shown = " ".join(f"{option} {item if item.strip() else repr(item)}" for item in items)
    return distinct(items, option, shown.removeprefix(f"{option} "))


__all__ = ["BadList", "distinct", "names", "ordinal", "repeated"]
