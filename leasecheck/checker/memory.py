"""How the checker holds millions of ops without the cyclic garbage collector rescanning them."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_gc() -> Iterator[None]:
    """Millions of small acyclic objects: the cyclic GC would only rescan them, again and again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
