"""The shape of the code, held by tools: the arrows of docs/layout.md, no import circle, short modules.

The arrows are import-linter's contracts (``[tool.importlinter]`` in ``pyproject.toml``,
also run by ``.ci/run``); the circles and the module sizes have no such tool, so they
are asserted here on the import graph grimp builds (the one import-linter reads), which
counts imports inside functions too: an import moved into a function to dodge a circle
is still a circle.
"""

from __future__ import annotations

import ast
import functools
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import networkx as nx
from paths import REPO

PACKAGE = REPO / "leasecheck"
#: the most lines a product module may have (issue 21): a longer one holds two concepts
MAX_LINES = 400


def _graph() -> nx.DiGraph:
    g = grimp.build_graph("leasecheck")
    graph = nx.DiGraph()
    for module in g.modules:
        for imported in g.find_modules_directly_imported_by(module):
            graph.add_edge(module, imported)
    return graph


def test_the_import_contracts_hold() -> None:
    """The arrows: each room imports only the rooms below it (the contracts name the rules)."""
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    done = subprocess.run([lint], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_import_circle_in_product_code() -> None:
    circles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert circles == [], "modules that import each other, directly or round a circle: " + "; ".join(
        " <-> ".join(c) for c in circles)


def test_no_product_module_over_the_limit() -> None:
    long = {p.relative_to(REPO).as_posix(): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines (split them by concept): {long}"


def test_every_package_has_a_face() -> None:
    """Each room says in its ``__init__.py`` docstring what it holds and what it may import."""
    import ast

    faceless = []
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if len(doc.split()) < 12:
            faceless.append(init.relative_to(REPO).as_posix())
    assert faceless == [], f"packages whose __init__.py does not say what they hold: {faceless}"


def unnamed_in_face(package: Path) -> list[str]:
    """The modules and subpackages of ``package`` its face does not name: by their name, or by a family it names in
    double backticks (``broken_*``: every module whose name starts so; ``*_queue``: ends so)."""
    import ast
    import fnmatch
    import re

    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    families = [f for f in re.findall(r"``([\w*]+)``", doc) if "*" in f]
    held = sorted(p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__"))
    held += sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file())
    return [m for m in held if not re.search(rf"(?<!\w){re.escape(m)}(?!\w)", doc)
            and not any(fnmatch.fnmatchcase(m, f) for f in families)]


def test_every_face_names_what_its_room_holds() -> None:
    """A contributor finds a module from its room's face: each module and subpackage is named there (or its family)."""
    unnamed = {init.parent.relative_to(REPO).as_posix(): missing for init in PACKAGE.rglob("__init__.py")
               if (missing := unnamed_in_face(init.parent))}
    assert unnamed == {}, f"modules a package's face does not name: {unnamed}"


def test_the_core_folders_are_links_into_the_package() -> None:
    """The user's top-level names stay at the root, as relative links into the one package."""
    for name in ("checker", "histories", "nemesis", "targets"):
        link = REPO / name
        assert link.is_symlink(), f"{name} is not a link"
        assert Path(link.readlink()) == Path("leasecheck") / name, link.readlink()
        assert (PACKAGE / name / "__init__.py").is_file()


@functools.cache
def _product_trees() -> tuple[tuple[str, ast.Module], ...]:
    """Every product module, parsed once for the tests that read its code: (its path from the repository, its tree)."""
    return tuple((str(path.relative_to(REPO)), ast.parse(path.read_text(), str(path)))
                 for path in sorted(PACKAGE.rglob("*.py")))


def _literals(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """The string literals of ``tree`` with their line, docstrings left out."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return ((node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings)


#: literals that share a run-folder file's name but are not that file, each with what it names instead
NOT_THE_RUN_FOLDER = {("leasecheck/report/html.py", "report.html"): "the page's template among the package's assets"}


def test_no_module_but_the_run_folders_owner_spells_a_file_of_it() -> None:
    """Issue 38: the run folder's file names are declared once (``RunFolder``) and every reader and writer names them
    through it; a literal elsewhere is a second owner, which is how two modules each came to declare anomalies.jsonl."""
    from leasecheck.rundir.runfolder import RunFolder

    names = {value for key, value in vars(RunFolder).items() if key.isupper() and isinstance(value, str)}
    assert {"history.jsonl", "results.json", "anomalies.jsonl", "report.html", "faults.json", "test.json"} <= names
    found = [f"{path}:{line}: {value!r}" for path, tree in _product_trees()
             if path != "leasecheck/rundir/runfolder.py" for line, value in _literals(tree)
             if (name := value.rsplit("/", 1)[-1]) in names and (path, name) not in NOT_THE_RUN_FOLDER]
    assert not found, "run-folder file names spelled outside leasecheck/rundir/runfolder.py:\n" + "\n".join(found)


def test_no_module_but_the_exit_codes_owner_exits_with_a_number() -> None:
    """Issue 38: an exit code is docs/contracts/exit-codes.md's, named once (``leasecheck.exits.Exit``); a command that
    exits with a bare 1 or 4 is a second mapping, free to drift from the contract. (A child process's own ``os._exit``
    code is a word between it and its parent, not a command's exit code.)"""
    found = [f"{path}:{node.lineno}: {ast.unparse(node)}" for path, tree in _product_trees()
             if path != "leasecheck/exits.py" for node in ast.walk(tree)
             if isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "SystemExit", "exit", "ctx.exit")
             and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int)
             and node.args[0].value != 0]
    assert not found, "exit codes spelled as numbers outside leasecheck/exits.py:\n" + "\n".join(found)
