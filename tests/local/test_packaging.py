"""The wheel installs one import name, ``leasecheck``, and everything under it.

The source tree is the package: ``checker/``, ``histories/``, ``nemesis/`` and ``targets/``
live in ``leasecheck/`` (the repository's root links to them) and install as
``leasecheck.checker``, ... (docs/layout.md): a user's own ``targets.py`` or a PyPI
``checker`` must never shadow ours or be shadowed, and the wheel holds the tree's files.
An editable install cannot show that (its import hook maps names whatever the wheel
holds), so this builds the real wheel from a copy of the tree, installs it into a
fresh venv and looks at what landed there.

The venv sees the system's site-packages, so that the runtime dependencies (msgspec,
networkx, ...) import; that also makes the editable ``leasecheck`` of the test
environment visible, so every module imported in the venv is checked to come from
the venv's own site-packages, and the interpreter runs isolated (``-I``: no current
directory, no PYTHONPATH) from a directory outside the repository.
"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from paths import REPO

#: the core folders, linked at the repository's root: subpackages of leasecheck, never top-level names
MAPPED = ("checker", "histories", "nemesis", "targets")
#: what the build needs no copy of: VCS data, caches, generated output, earlier builds
_NOT_COPIED = shutil.ignore_patterns(
    ".git", ".cache", "__pycache__", "*.pyc", "*.egg-info", "build", "dist", "store", "out", "bin", ".hypothesis",
    ".pytest_cache",
)


def _run(*cmd: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _site_packages(venv: Path) -> Path:
    out = _run(venv / "bin" / "python", "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=venv)
    return Path(out.strip())


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, set[str]]:
    """(wheel, venv, top-level names the install added to the venv's site-packages)."""
    base = tmp_path_factory.mktemp("packaging")
    src = base / "src"
    shutil.copytree(REPO, src, ignore=_NOT_COPIED, symlinks=True)  # an in-tree build writes build/ and *.egg-info
    dist = base / "dist"
    _run(sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", dist, cwd=src)
    (wheel,) = dist.glob("leasecheck-*.whl")

    venv = base / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv, cwd=base)
    site = _site_packages(venv)
    before = {p.name for p in site.iterdir()}
    _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q", wheel, cwd=base)
    added = {p.name for p in site.iterdir()} - before
    return wheel, venv, added


def test_the_install_adds_only_leasecheck(installed: tuple[Path, Path, set[str]]) -> None:
    _, _, added = installed
    dist_info = {n for n in added if n.endswith(".dist-info")}
    assert {n.split("-")[0] for n in dist_info} == {"leasecheck"}, added
    assert added - dist_info == {"leasecheck"}, f"top-level names besides leasecheck: {sorted(added - dist_info)}"


def test_the_wheel_holds_no_top_level_folder_of_ours(installed: tuple[Path, Path, set[str]]) -> None:
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert not {n for n in tops if n in MAPPED}, f"top-level folders in the wheel: {sorted(tops)}"
    assert all(t == "leasecheck" or (t.startswith("leasecheck-") and t.endswith(".dist-info")) for t in tops), sorted(tops)
    for folder in MAPPED:  # ... and each of them is there, under leasecheck/
        assert f"leasecheck/{folder}/__init__.py" in names, folder


def test_the_wheel_holds_the_trees_files(installed: tuple[Path, Path, set[str]]) -> None:
    """Every module and asset of ``leasecheck/`` as it stands in the tree, and nothing else of ours."""
    wheel, _, _ = installed
    names = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("leasecheck/")}
    tree = {p.relative_to(REPO).as_posix() for p in (REPO / "leasecheck").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert sorted(tree - names) == [], "in the tree, not in the wheel"
    assert sorted(names - tree) == [], "in the wheel, not in the tree"


def test_the_histories_examples_are_in_the_wheel(installed: tuple[Path, Path, set[str]]) -> None:
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    examples = sorted(p.name for p in (REPO / "histories" / "examples").iterdir() if p.suffix in (".jsonl", ".json"))
    assert examples, "the repository has no examples to ship"
    missing = [e for e in examples if f"leasecheck/histories/examples/{e}" not in names]
    assert not missing, f"examples missing from the wheel: {missing}"


def test_the_target_entry_points_point_into_leasecheck_targets(installed: tuple[Path, Path, set[str]]) -> None:
    wheel, _, _ = installed
    with zipfile.ZipFile(wheel) as z:
        (ep_file,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        eps = configparser.ConfigParser(delimiters=("=",))
        eps.optionxform = str  # type: ignore[assignment,method-assign]  # names are case-sensitive
        eps.read_string(z.read(ep_file).decode())
    targets = dict(eps["leasecheck.targets"])
    assert {"sqlite", "postgres", "redis"} <= set(targets), targets
    wrong = {name: value for name, value in targets.items() if not value.strip().startswith("leasecheck.targets.")}
    assert not wrong, f"entry points outside leasecheck.targets: {wrong}"
    assert eps["console_scripts"]["leasecheck"].strip() == "leasecheck.cli:main"


#: run in the venv: import the subpackages, the registry, and load every registered target
_PROBE = """
import json, sys
import leasecheck.checker, leasecheck.targets.registry, leasecheck.nemesis, leasecheck.histories
from importlib.resources import files
from leasecheck.targets.registry import available
examples = sorted(p.name for p in files("leasecheck.histories").joinpath("examples").iterdir())
mods = {n: getattr(m, "__file__", None) for n, m in sys.modules.items() if n == "leasecheck" or n.startswith("leasecheck.")}
tops = sorted(n for n in ("checker", "histories", "nemesis", "targets") if n in sys.modules)
print(json.dumps({"modules": mods, "targets": available(), "examples": examples, "tops": tops}))
"""


def test_the_installed_package_imports_from_the_venv(installed: tuple[Path, Path, set[str]], tmp_path: Path) -> None:
    _, venv, _ = installed
    site = _site_packages(venv)
    out = json.loads(_run(venv / "bin" / "python", "-I", "-c", _PROBE, cwd=tmp_path))
    mods = out["modules"]
    assert {"leasecheck.checker", "leasecheck.targets.registry", "leasecheck.nemesis", "leasecheck.histories"} <= set(mods)
    elsewhere = {n: f for n, f in mods.items() if f is not None and not Path(f).is_relative_to(site)}
    assert not elsewhere, f"imported from outside the venv's site-packages: {elsewhere}"
    assert out["tops"] == [], f"importing leasecheck also imported top-level {out['tops']}"
    assert out["examples"], "no examples reachable through importlib.resources"
    assert all(v.startswith("leasecheck.targets.") for n, v in out["targets"].items() if n in ("sqlite", "postgres", "redis"))
