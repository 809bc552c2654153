"""Where the suite's files are, declared once: a test module's own ``__file__`` says only which tier folder it is in.

The tests live a folder or two below ``tests/`` (tests/README.md); what they read
from the checkout (the README, the docs, the example histories, the package)
is found from here.
"""

from __future__ import annotations

from pathlib import Path

#: the suite's helpers (this folder)
SUPPORT = Path(__file__).resolve().parent
#: the suite: tests/
TESTS = SUPPORT.parent
#: the checkout: README.md, docs/, leasecheck/, histories/
REPO = TESTS.parent
#: the hand-written example histories (histories/examples/*.jsonl)
EXAMPLES = REPO / "histories" / "examples"
