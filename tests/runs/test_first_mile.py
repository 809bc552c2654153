"""The README's first command, exactly as a newcomer types it, in a fresh virtualenv.

Why this test exists: CI installs leasecheck editable, and an editable install's
import hook maps ``leasecheck.checker`` and the other folders whatever the current
directory holds. A user's ``pip install . && leasecheck run`` from a fresh clone's
root is a real, non-editable install, and the forkserver that forks the workers
started with the current directory first on its ``sys.path``: it imported the source
folder ``leasecheck/`` instead of the installed package, and every worker died of
``No module named 'leasecheck.checker'`` (exit 4), while the same command from any
other directory was valid.

So this builds what a clone holds (every tracked file, and any new file not yet
committed, from this working tree), makes a virtualenv that sees nothing of the test
environment (no system site-packages: the dependencies come from PyPI, as a user's
do), runs the README's install command in the clone's root, then ``leasecheck run``
there and in an empty directory. The README's first code block is held here word for
word: changing it fails this test until the test is changed with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from paths import REPO

#: the README's first code block, word for word: the commands a newcomer runs first
FIRST_BLOCK = """\
pip install . && leasecheck run    # SQLite reference backend, 5 workers, process pauses, 30 s
"""
#: the README's second code block, the contributor's: the suite as CI runs it (.ci/run)
SECOND_BLOCK = """\
bash .ci/run                       # installs everything the tests need (apt + pip), runs the whole suite
"""
#: what this test runs of its first line: the install as written, then the run it starts, cut to 5 s; a busy
#: machine (CI's, with two other test processes) may not reach the pause's ``claim-after-expiry`` in 5 s, and
#: a run that lacks it is rightly ``unknown`` (exit 2): so the cut run goes on while its evidence is missing
INSTALL_AND_RUN = "pip install . && leasecheck run"
SHORT = ["--time-limit", "5", "--evidence-wait", "60"]


def code_blocks(readme: str) -> list[str]:
    """The texts of ``readme``'s fenced code blocks, in order."""
    lines = readme.splitlines(keepends=True)
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    return ["".join(lines[start + 1:end]) for start, end in zip(fences[::2], fences[1::2])]


def first_code_block(readme: str) -> str:
    """The text of the first fenced code block of ``readme``."""
    return code_blocks(readme)[0]


def test_the_readme_starts_with_the_quick_start_alone_then_the_contributors_command() -> None:
    """The first block is what a newcomer runs (held word for word, and run below); the suite's command comes right
    after what a newcomer needs to read about it, in a block of its own, and is what .ci/run is."""
    readme = (REPO / "README.md").read_text()
    block = first_code_block(readme)
    assert block == FIRST_BLOCK, "the README's first code block changed: change tests/runs/test_first_mile.py with it"
    assert block.splitlines()[0].split("#")[0].strip() == INSTALL_AND_RUN
    bash_blocks = [b for b in code_blocks(readme) if b.startswith(("pip ", "bash "))]
    assert bash_blocks[:2] == [FIRST_BLOCK, SECOND_BLOCK]
    assert (REPO / ".ci" / "run").is_file()
    # the performance table comes after what a newcomer needs: the examples and the map of the docs
    assert readme.index("## Quick start") < readme.index("## One example of each job") < readme.index("## Documentation") \
        < readme.index("## Performance")


def _clone(dest: Path) -> None:
    """What ``git clone`` of this tree would hold once committed: tracked files and new ones not ignored."""
    if (REPO / ".git").exists():
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, check=True).stdout.decode().split("\0")
        for name in filter(None, listed):
            source = REPO / name
            if source.is_symlink() or source.is_file():  # a tracked file deleted in the working tree is not there
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / name, follow_symlinks=False)
    else:  # an unpacked source archive
        shutil.copytree(REPO, dest, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".cache", "__pycache__", "*.egg-info", "build", "dist", "store"))


def _user_env(venv: Path, home: Path) -> dict[str, str]:
    """A shell's environment with the venv activated and nothing of this test run's Python set-up."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "PYTEST", "VIRTUAL_ENV", "COV_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["HOME"] = os.environ.get("HOME", str(home))  # pip's download cache, as the user's own
    return env


def _verdict(store: Path) -> dict[str, object]:
    runs = sorted(store.glob("sqlite/*/results.json"))
    assert len(runs) == 1, f"expected one run folder under {store}: {runs}"
    results: dict[str, object] = json.loads(runs[0].read_text())
    return results


def test_the_readme_first_command_works_from_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "leasecheck"
    clone.mkdir()
    _clone(clone)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    env = _user_env(venv, tmp_path)

    # from the clone's root, the line as written (cut to 5 s): this failed with exit 4 before the fix
    line = f"{INSTALL_AND_RUN} {' '.join(SHORT)}"
    done = subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{line!r} in the clone's root exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert _verdict(clone / "store")["valid"] is True

    # it is the venv's own leasecheck, not the source folder nor the test environment's
    where = subprocess.run(["python", "-I", "-c", "import leasecheck.checker, sys; print(leasecheck.checker.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(venv), where

    # and from an empty directory
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(["leasecheck", "run", *SHORT], cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"leasecheck run in an empty directory exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert _verdict(empty / "store")["valid"] is True
