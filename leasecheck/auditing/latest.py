"""``leasecheck audit --latest``: the published audits run again on each library's newest release; what changed.

Audits are of versions: the extras that install the audited libraries pin exactly what
AUDITS.md publishes, so an upstream release never changes what CI runs. An auditor still
wants to know when a release changes a verdict. This makes a throwaway virtualenv beside
the installed leasecheck (``--system-site-packages``: leasecheck and its other
dependencies as installed), upgrades each selected library there to its newest release,
runs that library's published audit in it (``leasecheck audit LIBRARY --as-published
--json``, a process of the virtualenv's own), and compares every run with what was
published: the version (the pin), the verdict and its kinds. A release that no longer
installs is a change too. The virtualenv is removed at the end; the run folders stay.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path
from typing import Any

from leasecheck.auditing.audit import audits
from leasecheck.auditing.queue_audit import QUEUE_PREFIX, queue_name
from leasecheck.errors import EnvironmentFailure
from leasecheck.exits import Exit

#: one pin of leasecheck's requirements: ``filelock==4.3.1; extra == "audit"``
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^;\s]+)")
#: how long one library's newest release may take to install
INSTALL_TIMEOUT_S = 900


def canonical(name: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503): ``Python_Redis.Lock`` is ``python-redis-lock``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def published_versions() -> dict[str, str]:
    """The versions AUDITS.md publishes, as leasecheck's extras pin them (``name==version``), by canonical name."""
    try:
        lines = requires("leasecheck") or []
    except PackageNotFoundError:
        return {}
    return {canonical(m.group(1)): m.group(2) for line in lines if (m := _PIN.match(line))}


@dataclass
class Drift:
    """One library's audit on its newest release: what it installed as, and each run's change from the publication."""

    library: str
    published_version: str | None
    newest: str | None = None
    #: pip's last line when the newest release does not install
    install_error: str | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed_runs(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if not r.get("matches")]

    @property
    def changed(self) -> bool:
        """A verdict or a kind that is not as published, or a release that no longer installs (a version alone is not)."""
        return self.install_error is not None or bool(self.changed_runs)

    def lines(self) -> list[str]:
        """What the report says of this library, one line per finding."""
        head = f"{self.library} {self.published_version or '(no pin)'} -> {self.newest or '?'}"
        if self.install_error is not None:
            return [f"{head}: the newest release does not install: {self.install_error}"]
        if not self.runs:
            return [f"{head}: no run (see above)"]
        out = [f"{head}: {len(self.runs) - len(self.changed_runs)} of {len(self.runs)} runs as published"]
        for r in self.changed_runs:
            published = r["published"]
            kinds = f" ({', '.join(r['kinds'])})" if r["kinds"] else ""
            was = f" ({', '.join(published['kinds'])})" if published["kinds"] else ""
            out.append(f"  changed: {r['target']} [{r['mode']}] {r['nemesis']} seed {r['seed']}: published "
                       f"{published['verdict']}{was}, now {r['verdict']}{kinds}; {r['command']}")
        return out


class LatestEnv:
    """A throwaway virtualenv over this installation, in which libraries are upgraded to their newest releases."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory or tempfile.mkdtemp(prefix="leasecheck-latest-"))
        self.python = self.directory / "bin" / "python"

    def __enter__(self) -> LatestEnv:
        done = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(self.directory)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise EnvironmentFailure(f"audit --latest: cannot make a virtualenv: {_last_line(done.stderr)}")
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def upgrade(self, library: str) -> tuple[str | None, str | None]:
        """Install ``library``'s newest release here: (its version, None), or (None, pip's last line)."""
        try:
            done = subprocess.run([str(self.python), "-m", "pip", "install", "--upgrade", "--quiet",
                                   "--disable-pip-version-check", library], capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"pip install --upgrade {library} did not finish in {INSTALL_TIMEOUT_S} s"
        if done.returncode != 0:
            return None, _last_line(done.stderr or done.stdout)
        asked = subprocess.run([str(self.python), "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))",
                                library], capture_output=True, text=True)
        return (asked.stdout.strip() or None), None

    def audit(self, library: str, args: Sequence[str], out: Path) -> int:
        """``leasecheck audit LIBRARY --as-published --json ARGS`` in the virtualenv, its JSON lines to ``out``."""
        with out.open("w") as f:  # one JSON object per run: into a file, never an unread pipe
            return subprocess.run([str(self.python), "-m", "leasecheck", "audit", library, "--as-published", "--json",
                                   *args], stdout=f, stderr=sys.stderr).returncode


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(nothing said)"


def libraries_of(library: str) -> list[str]:
    """The PyPI names whose audits ``library`` names (a library, an adapter, ``all``, ``queues``), each once, in the
    plans' order: from the plans alone, so a library not installed here (or too old to load) is audited too.
    LookupError naming what is audited if none."""
    found, broken = audits()
    plans = [(a.target, a.plan) for a in found] + [(b.target, b.plan) for b in broken if b.plan is not None]
    chosen = [plan.library for target, plan in plans
              if library in (plan.library, target, queue_name(target), "all")
              or (library == "queues" and target.startswith(QUEUE_PREFIX))]
    if not chosen:
        raise LookupError(f"no audit of {library!r} (see leasecheck audit --list)")
    return list(dict.fromkeys(chosen))


def run_latest(library: str, args: Sequence[str], store: Path, modes: tuple[str, ...] = (),
               say: Any = print) -> list[Drift]:
    """Each library ``library`` selects, upgraded to its newest release and audited as published (``args``: the
    audit's own options); the drift of each, said as it ends."""
    pins = published_versions()
    store.mkdir(parents=True, exist_ok=True)
    drifts = []
    with LatestEnv() as env:
        for name in libraries_of(library):
            drift = Drift(name, pins.get(canonical(name)))
            drift.newest, drift.install_error = env.upgrade(name)
            if drift.install_error is None:
                out = store / f"latest-{canonical(name)}.jsonl"
                env.audit(name, [*args, *(a for m in modes for a in ("--mode", m)), "--store", str(store)], out)
                drift.runs = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
            for line in drift.lines():
                say(line)
            drifts.append(drift)
    return drifts


def exit_code(drifts: Sequence[Drift]) -> int:
    """0: every run as published on the newest releases; 1: a verdict or kind changed, or a release no longer installs
    (what an auditor must look at); 4: a library installed and no run came of it."""
    if any(d.changed for d in drifts):
        return int(Exit.INVALID)
    if any(d.install_error is None and not d.runs for d in drifts):
        return int(Exit.ENVIRONMENT)
    return int(Exit.VALID)
