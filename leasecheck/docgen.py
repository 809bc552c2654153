"""The parts of the docs that are generated from the code: synopses, option tables, the fault table.

A page marks a generated block with two HTML comments (invisible once rendered)::

    <!-- generated: usage run -->
    ...
    <!-- end generated -->

and ``python -m leasecheck.docgen`` rewrites every block of the docs from the CLI
(click's own parameters, so an option added to ``leasecheck run`` is in the docs
the next time this runs) and the fault catalogue (``leasecheck nemeses
--markdown``). ``tests/local/test_docs.py`` regenerates them and fails when a page
differs, so the docs cannot drift from the tool. The blocks:

- ``usage COMMAND``: the command's synopsis, every option with its value, in a code block;
- ``options COMMAND``: a table of the command's options: value, default, what it does;
- ``faults``: the fault table, ``leasecheck nemeses --markdown`` word for word;
- ``cli``: every command, its help, synopsis and options (the command-line reference);
- ``layout``: each room of the package and what its face (its ``__init__.py`` docstring) says it holds and may import,
  so docs/layout.md's map is the rooms' own words (tests/local/test_architecture.py holds each face to name every module);
- ``tests``: tests/README.md's map, each room and the test modules that import it, and what each test module holds.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import click

from leasecheck.cli import main as cli_group
from leasecheck.exits import Exit

BLOCK = re.compile(r"(<!-- generated: (?P<name>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
#: the synopsis is wrapped here (what a page of the site shows without scrolling), continuation lines indented
WIDTH = 80


def command(name: str) -> click.Command:
    """A subcommand of ``leasecheck`` by its name (``hosts check``: a group's subcommand)."""
    cmd: click.Command = cli_group
    for part in name.split():
        sub = cmd.commands.get(part) if isinstance(cmd, click.Group) else None
        if sub is None:
            known = ", ".join(cmd.commands) if isinstance(cmd, click.Group) else "none"
            raise KeyError(f"no command {name!r} (commands: {known})")
        cmd = sub
    return cmd


def _ctx(name: str) -> click.Context:
    return click.Context(command(name), info_name=name)


def _metavar(param: click.Parameter, ctx: click.Context) -> str:
    """What follows an option in the synopsis: its metavar, its choices, or its parameter's name in capitals."""
    if param.metavar:
        return param.metavar
    if isinstance(param.type, click.Choice):
        return "|".join(str(c) for c in param.type.choices)
    if isinstance(param, click.Argument):
        return param.make_metavar(ctx)
    return (param.name or max(param.opts, key=len).lstrip("-")).upper().replace("-", "_")


def _options(name: str) -> list[click.Option]:
    return [p for p in command(name).params if isinstance(p, click.Option) and not p.hidden]


def _item(opt: click.Option, ctx: click.Context) -> str:
    flag = max(opt.opts, key=len)
    return f"[{flag}]" if opt.is_flag else f"[{flag} {_metavar(opt, ctx)}]"


def usage(name: str) -> str:
    """``leasecheck NAME`` with every option and argument, wrapped at :data:`WIDTH` columns."""
    ctx = _ctx(name)
    items = [_item(o, ctx) for o in _options(name)]
    items += [_metavar(a, ctx) for a in command(name).params if isinstance(a, click.Argument)]
    lines: list[str] = []
    line = f"leasecheck {name}"
    for item in items:
        if len(line) + 1 + len(item) > WIDTH:
            lines.append(line)
            line = "    " + item
        else:
            line += " " + item
    lines.append(line)
    return "```text\n" + "\n".join(lines) + "\n```"


def _value(opt: click.Option, ctx: click.Context) -> str:
    """What an option takes, from its click type."""
    t = opt.type
    if opt.is_flag:
        return "flag"
    if isinstance(t, click.Choice):
        return ", ".join(f"`{c}`" for c in t.choices)
    if isinstance(t, click.types._NumberRangeBase):
        kind = "integer" if isinstance(t, click.IntRange) else "seconds (or 90s, 30m, 8h)" if t.name == "duration" else "number"
        low = None if t.min is None else f"{t.min:g}" + (" (excluded)" if t.min_open else "")
        high = None if t.max is None else f"{t.max:g}" + (" (excluded)" if t.max_open else "")
        if low is not None and high is not None:
            return f"{kind} from {low} to {high}"
        if low is not None:
            return f"{kind}, at least {low}" if not t.min_open else f"{kind} above {t.min:g}"
        return f"{kind}, at most {high}"
    if t == click.INT:
        return "integer"
    if t == click.FLOAT:
        return "number"
    return f"`{_metavar(opt, ctx)}`"


def _default(opt: click.Option) -> str:
    if opt.is_flag:
        return "off"
    if opt.default is None or opt.default == () or (opt.multiple and not opt.default):
        return "-"
    return f"`{opt.default}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def options(name: str) -> str:
    """A Markdown table of ``leasecheck NAME``'s options."""
    ctx = _ctx(name)
    rows = ["| option | value | default | what it does |", "|---|---|---|---|"]
    for opt in _options(name):
        flags = ", ".join(f"`{o}`" for o in opt.opts + opt.secondary_opts)
        rows.append(f"| {flags} | {_cell(_value(opt, ctx))} | {_cell(_default(opt))} | {_cell(opt.help or '')} |")
    return "\n".join(rows)


def faults(command: str = "nemeses") -> str:
    """The fault table: ``leasecheck nemeses --markdown``, exactly (or another catalogue's: ``clusters``)."""
    from click.testing import CliRunner

    result = CliRunner().invoke(cli_group, [command, "--markdown"], catch_exceptions=False)
    if result.exit_code != Exit.VALID:
        raise RuntimeError(f"leasecheck {command} --markdown exited {result.exit_code}: {result.output}")
    return result.output.rstrip("\n")


def _help(cmd: click.Command) -> str:
    text = inspect.cleandoc(cmd.help or "")
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b")


def cli() -> str:
    """Every command of ``leasecheck``: its help text, synopsis and options, in the CLI's order."""
    parts: list[str] = []
    every = [(f"{name} {sub}".strip(), each) for name, cmd in cli_group.commands.items()  # a group: its subcommands
             for sub, each in (cmd.commands.items() if isinstance(cmd, click.Group) else [("", cmd)])]
    for name, cmd in every:
        if cmd.hidden:
            continue
        parts.append(f"## `leasecheck {name}`")
        parts.append(_help(cmd))
        parts.append(usage(name))
        if _options(name):
            parts.append(options(name))
    return "\n\n".join(parts)


#: a Sphinx cross-reference in a face (``:mod:`.base```, ``:class:`~leasecheck.x.Y```): its last name, as code
_ROLE = re.compile(r":(?:mod|class|func|data|meth|attr):`~?([\w.]+)`")


def layout() -> str:
    """One row per room below the package's root (whose face is the diagram of docs/layout.md's rule): its folder, and
    its face in one paragraph (cross-references as code, ``|`` escaped)."""
    import ast

    import leasecheck

    root = Path(leasecheck.__file__).parent
    rows = ["| room | what it holds and may import (its face, `__init__.py`) |", "|---|---|"]
    for init in sorted(root.rglob("__init__.py")):
        if init.parent == root or "__pycache__" in init.parts:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        doc = re.sub(r"^\* ", "• ", doc, flags=re.M)  # a face's list, as marks inside one cell
        text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1] or m.group(1)}`", " ".join(doc.split()))
        text = text.replace("``", "`").replace("|", "\\|")
        rows.append(f"| `leasecheck/{init.parent.relative_to(root).as_posix()}/` | {text} |")
    return "\n".join(rows)


#: the modules of the package's root, one room in the map of the tests
_ROOT_MODULES = ("errors", "exits", "lists", "waiting", "docgen")


def _rooms_imported(tree: object) -> set[str]:
    """The rooms a test module imports (``leasecheck.checker.core`` -> ``checker``; the root's modules as one)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(tree):  # type: ignore[arg-type]
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    rooms = set()
    for name in names:
        parts = name.split(".")
        if parts[0] == "leasecheck" and len(parts) > 1:
            rooms.add("root" if parts[1] in _ROOT_MODULES else parts[1] + ("/" + parts[2] if parts[1] == "targets"
                      and len(parts) > 2 and parts[2] in ("queues", "locks") else ""))
    return rooms


def tests_map() -> str:
    """tests/README.md's map: each room of the package and the test modules that import it, then each test module's
    tier (its folder: tests/support/tiers.py) and first docstring line (a source checkout's tests/; nothing when there
    is none)."""
    import ast

    import leasecheck

    tests = Path(leasecheck.__file__).resolve().parent.parent / "tests"
    by_room: dict[str, list[str]] = {}
    said: list[str] = []
    for path in sorted(tests.rglob("*.py"), key=lambda p: p.relative_to(tests).parts):
        name = path.relative_to(tests).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for room in _rooms_imported(tree):
            by_room.setdefault(room, []).append(name.removesuffix(".py"))
        first = (ast.get_docstring(tree) or "").split("\n\n")[0]
        tier = name.split("/")[0] if path.name.startswith("test_") else "helper"
        said.append(f"| `{name}` | {tier} | {' '.join(first.split()).replace('|', chr(92) + '|') or '-'} |")
    rows = ["| room | its tests (the modules that import it) |", "|---|---|"]
    rows += [f"| `{room}` | {', '.join(f'`{t}`' for t in sorted(found))} |" for room, found in sorted(by_room.items())]
    return "\n".join([*rows, "", "| test module | tier | what it holds |", "|---|---|---|", *said])


def render(name: str) -> str:
    """The text of one generated block, by its marker's name (``usage run``, ``faults``, ...)."""
    what, _, arg = name.partition(" ")
    if what == "usage":
        return usage(arg)
    if what == "options":
        return options(arg)
    if what == "faults" and not arg:
        return faults()
    if what == "clusters" and not arg:
        return faults("clusters")
    if what == "cli" and not arg:
        return cli()
    if what == "layout" and not arg:
        return layout()
    if what == "tests" and not arg:
        return tests_map()
    raise KeyError(f"unknown generated block {name!r} (usage COMMAND, options COMMAND, faults, clusters, cli, layout, tests)")


def blocks(text: str) -> list[tuple[str, str]]:
    """Each generated block of a page: its name and its text as the page has it."""
    return [(m.group("name"), m.group("body").rstrip("\n")) for m in BLOCK.finditer(text)]


def regenerate(text: str) -> str:
    """The page with every generated block rewritten from the code."""
    return BLOCK.sub(lambda m: f"{m.group(1)}{render(m.group('name'))}\n{m.group(4)}", text)


def pages(root: Path) -> list[Path]:
    """The Markdown files of the repository at ``root`` that may hold generated blocks."""
    return sorted((root / "docs").rglob("*.md")) + [root / "README.md", root / "tests" / "README.md"]


def stale(paths: Iterable[Path]) -> list[Path]:
    """The pages whose generated blocks differ from what the code generates now."""
    return [p for p in paths if regenerate(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasecheck.docgen", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=textwrap.dedent("The pages: docs/**/*.md and README.md under --root."))
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: the current directory)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming every stale page")
    args = parser.parse_args(argv)
    found = [p for p in pages(args.root) if p.is_file()]
    if not found or not (args.root / "docs").is_dir():
        print(f"{args.root}: no docs/ folder here (give the repository with --root)", file=sys.stderr)
        return Exit.BAD_INPUT
    old = stale(found)
    if args.check:
        for p in old:
            print(f"{p}: generated blocks are stale (python -m leasecheck.docgen rewrites them)", file=sys.stderr)
        return Exit.INVALID if old else Exit.VALID
    for p in old:
        p.write_text(regenerate(p.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"rewrote {p}")
    return Exit.VALID


if __name__ == "__main__":
    sys.exit(main())
