"""``leasecheck summary``: any set of run folders merged into one table, judged against what was expected.

The nightly matrix runs in shards on several machines; each uploads its
store, and one job downloads them all and asks: what came out, and was it
what we expected? So this module finds run folders wherever they are
(a store, a folder of downloaded stores, single runs), reads each from its
files alone, and renders the same rows for a terminal (rich), Markdown (a CI
job summary), a self-contained HTML page linking each run's ``report.html``,
JSON lines and JUnit. Expectations come from each folder's expected.json
(left by ``leasecheck matrix``) or, with ``--spec``, from the spec itself.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from leasecheck.verdict.outcomes import RESULTS_FILE, Row, nemesis_label, read_run, tally

#: the symlink ``leasecheck run`` points at the newest run (or, in a downloaded artifact, a copy of that run)
LATEST = "latest"


def find_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Every run folder (a folder holding results.json) under ``paths``, each once.

    A run reached both through a symlink (``store/latest``) and by its own path
    is listed once, by its own path; a folder is searched once, however many
    links lead to it (no cycles). A run is not searched inside (its server data
    holds no runs). Raises FileNotFoundError naming a path that is not there.
    """
    found: dict[str, Path] = {}
    seen: set[str] = set()
    stack = []
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if not p.is_dir():
            raise NotADirectoryError(f"{p}: not a directory (give a store or run folders)")
        stack.append(p)
    while stack:
        d = stack.pop()
        real = os.path.realpath(d)
        if (d / RESULTS_FILE).is_file():
            if real not in found or (_through_symlink(found[real]) and not _through_symlink(d)):
                found[real] = d  # the same run by its own path rather than through ``latest``
            continue
        if real in seen:
            continue
        seen.add(real)
        try:
            children = sorted(d.iterdir())
        except OSError:
            continue
        stack.extend(c for c in reversed(children) if c.is_dir())
    return list(found.values())


def _through_symlink(p: Path) -> bool:
    return os.path.realpath(p) != os.path.abspath(p)


def _dedupe(rows: list[Row]) -> list[Row]:
    """One row per run: a ``latest`` folder that a CI artifact turned from a symlink into a copy is the same run.

    Two folders whose results.json name the same run folder hold one run; the
    one not reached through ``latest`` stays.
    """
    by_run: dict[str, Row] = {}
    out: list[Row] = []
    for row in sorted(rows, key=lambda r: LATEST in (r.run_dir.parts if r.run_dir else ())):
        recorded = _recorded_run_dir(row)
        if recorded is None:
            out.append(row)
        elif recorded not in by_run:
            by_run[recorded] = row
            out.append(row)
    return out


def _recorded_run_dir(row: Row) -> str | None:
    """The run folder results.json names (where the run was made), with target and seed: the run's identity."""
    if row.run_dir is None:
        return None
    try:
        obj = json.loads((row.run_dir / RESULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    where = obj.get("run_dir") if isinstance(obj, dict) else None
    return f"{where}\0{row.target}\0{row.seed}" if isinstance(where, str) else None


def collect(paths: list[Path]) -> list[Row]:
    """The rows of every run under ``paths``, each judged by its own expected.json, in the matrix's canonical order."""
    rows = _dedupe([read_run(d) for d in find_run_dirs(paths)])
    return sorted(rows, key=lambda r: r.sort_key)


# ------------------------------------------------------------------ rendering

COLUMNS = ("target", "nemesis", "seed", "verdict", "expected", "match", "kinds", "first anomaly", "seconds", "run folder")
_VERDICT_STYLE = {"valid": "green", "invalid": "red", "unknown": "yellow", "error": "bold red", "missing": "bold red",
                  "skipped": "dim"}


def _cells(row: Row, where: str) -> list[str]:
    """The row as plain strings, in :data:`COLUMNS` order."""
    judged = row.judge()
    first = row.first_anomaly
    expected = row.expected.describe() + (" (default)" if row.expected.source == "default" else "")
    return [
        row.target, nemesis_label(row.nemesis), "" if row.seed is None else str(row.seed), row.verdict, expected,
        "yes" if judged.match else "NO", ", ".join(row.kinds),
        f"{first['kind']} {first['node']} ops {', '.join(map(str, first['ops']))}" if first else "",
        f"{row.seconds:.1f}" if row.seconds is not None else "", where,
    ]


def _where(row: Row) -> str:
    return str(row.run_dir) if row.run_dir is not None else ""


def print_table(console: Console, rows: list[Row], title: str = "runs") -> None:
    """The terminal table; a row that does not match says why under it."""
    table = Table(title=title, title_justify="left", caption=tally(rows), caption_justify="left")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in ("seed", "seconds") else "left", overflow="fold")
    for row in rows:
        cells = _cells(row, _where(row))
        judged = row.judge()
        styled: list[Text | str] = list(cells)
        styled[3] = Text(cells[3], style=_VERDICT_STYLE.get(row.verdict, ""))
        styled[5] = Text(cells[5], style="green" if judged.match else "bold red")
        table.add_row(*styled)
    console.print(table)
    for row in rows:
        judged = row.judge()
        if not judged.match:
            console.print(Text.assemble((f"{row.label}: ", "bold"), (judged.message, "red")), highlight=False)


def _md(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[Row], title: str | None = None) -> str:
    """A GitHub-flavoured Markdown table (for ``$GITHUB_STEP_SUMMARY``), mismatches listed under it."""
    lines = [f"### {title}", ""] if title else []
    lines.append(tally(rows))
    lines.append("")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "|".join("---:" if c in ("seed", "seconds") else "---" for c in COLUMNS) + "|")
    for row in rows:
        cells = _cells(row, _where(row))
        if not row.judge().match:
            cells[5] = "**NO**"
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    bad = [r for r in rows if not r.judge().match]
    if bad:
        lines += ["", "Not as expected:", ""]
        lines += [f"- `{_md(r.label)}`: {_md(r.judge().message)}" for r in bad]
    return "\n".join(lines) + "\n"


def _href(target: Path, page: Path) -> str:
    """A link from the page to ``target``: relative where one exists (an artifact moved as a whole keeps working)."""
    try:
        rel = os.path.relpath(target.absolute(), page.absolute().parent)
    except ValueError:  # another drive: no relative path
        return target.absolute().as_uri()
    return "/".join(html.escape(part, quote=True) for part in Path(rel).parts)


#: the columns whose text can be long (names, lists, paths): they wrap, anywhere if they must; the others are short
#: words and numbers that never break
_WRAPPED = frozenset({"target", "nemesis", "expected", "kinds", "first anomaly", "run folder"})
#: the page fits the window, whatever its paths: the table takes the page's width, a long cell breaks anywhere
#: (a browser breaks at spaces and hyphens first), run folders are shown from the folder they share
_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; white-space: nowrap; }
td.wrap, td.why { white-space: normal; overflow-wrap: anywhere; }
code.path { overflow-wrap: anywhere; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.num { text-align: right; }
tr.mismatch { background: #fdecea; }
.valid { color: #1a7f37; } .invalid { color: #cf222e; font-weight: bold; } .unknown { color: #9a6700; }
.error, .missing { color: #cf222e; font-weight: bold; } .skipped { color: #777; }
.why { color: #cf222e; }
"""


def shared_folder(rows: list[Row]) -> Path | None:
    """The folder every row's run folder is in (a store, a download of several), or None if they share none.

    The page names it once and each row's run folder from it: the same long
    prefix in every row is what made the table wider than the window.
    """
    dirs = [str(r.run_dir) for r in rows if r.run_dir is not None]
    if not dirs:
        return None
    try:
        common = os.path.commonpath(dirs)
    except ValueError:  # absolute and relative, or two drives
        return None
    if common in dirs:  # one run (or a run holding another): its own folder is no prefix to drop
        common = os.path.dirname(common)
    return Path(common) if common not in ("", os.curdir) else None


def _breakable(text: str, after: str = ",.:/_") -> str:
    """Escaped text with a line-break opportunity after each separator of a name or a list (``after``; a path: ``/``)."""
    return re.sub(f"([{re.escape(after)}])", r"\1<wbr>", html.escape(text))


def html_page(rows: list[Row], page: Path, title: str = "leasecheck summary") -> str:
    """A self-contained page (no script, no network): the table, each run linked to its report.html.

    It fits a 1280 px window: each run folder is shown from the folder they
    all share (named above the table; the full path is the cell's title), and
    a cell breaks anywhere rather than widen the table.
    """
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    base = shared_folder(rows)
    body = []
    for row in rows:
        judged = row.judge()
        cells = [_breakable(c) if i in (0, 1) else html.escape(c) for i, c in enumerate(_cells(row, ""))]
        cells[3] = f'<span class="{html.escape(row.verdict)}">{cells[3]}</span>'
        if row.run_dir is not None:
            report = row.run_dir / "report.html"
            link = report if report.exists() else row.run_dir
            shown = os.path.relpath(row.run_dir, base) if base is not None else str(row.run_dir)
            cells[9] = (f'<a href="{_href(link, page)}">{html.escape("report" if link == report else "run folder")}</a>'
                        f' <code class="path" title="{html.escape(str(row.run_dir), quote=True)}">{_breakable(shown, "/")}</code>')
        if not judged.match:
            cells[5] = f'<span class="why" title="{html.escape(judged.message, quote=True)}">NO</span>'
        tds = "".join(f'<td class="num">{c}</td>' if i in (2, 8) else f'<td class="wrap">{c}</td>' if COLUMNS[i] in _WRAPPED
                      else f"<td>{c}</td>" for i, c in enumerate(cells))
        body.append(f'<tr class="{"match" if judged.match else "mismatch"}">{tds}</tr>')
        if not judged.match:
            body.append(f'<tr class="mismatch"><td colspan="{len(COLUMNS)}" class="why">{html.escape(judged.message)}</td></tr>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(tally(rows))}</p>\n"
        + (f'<p>run folders in <code class="path" id="run-folders">{html.escape(str(base))}</code></p>\n' if base is not None else "")
        + f"<table><thead><tr>{head}</tr></thead><tbody>\n" + "\n".join(body) + "\n</tbody></table>\n</body></html>\n"
    )


def command(paths: tuple[str, ...], markdown_out: bool, html_file: str | None, as_json: bool, junit_file: str | None,
            spec_path: str | None) -> int:
    """``leasecheck summary``: the rows of every run under ``paths``, rendered; the exit code (as ``matrix``'s)."""
    import click

    from leasecheck.ci.matrix import SpecError, judge_against, load_spec
    from leasecheck.report import junit
    from leasecheck.report.terminal import console_for
    from leasecheck.verdict.exits import Exit
    from leasecheck.verdict.outcomes import exit_code

    spec = None
    if spec_path is not None:
        try:
            spec = load_spec(Path(spec_path), check_runs=False)
        except SpecError as e:
            click.echo(f"leasecheck summary: {e}", err=True)
            return Exit.BAD_INPUT
    try:
        rows = collect([Path(p) for p in paths])
    except OSError as e:
        click.echo(f"leasecheck summary: {e}", err=True)
        return Exit.BAD_INPUT
    if spec is not None:
        rows = judge_against(rows, spec.cells)
    if not rows:
        click.echo(f"leasecheck summary: no run folders (folders holding {RESULTS_FILE}) under {', '.join(paths)}", err=True)
        return Exit.BAD_INPUT
    title = f"summary of {spec.name}" if spec is not None else "summary"
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row.to_json()) + "\n")
    elif markdown_out:
        sys.stdout.write(markdown(rows, title))
    else:
        print_table(console_for(), rows, title)
    try:
        if html_file is not None:
            page = Path(html_file)
            page.write_text(html_page(rows, page, f"leasecheck {title}"), encoding="utf-8")
        if junit_file is not None:
            junit.write(junit_file, [junit.Suite(f"leasecheck {title}", rows,
                                                 {"paths": " ".join(paths), **({"spec": spec_path} if spec_path else {})})])
    except OSError as e:
        click.echo(f"leasecheck summary: cannot write {e.filename or 'an output file'}: {e.strerror or e}", err=True)
        return Exit.BAD_INPUT
    return exit_code(rows)
