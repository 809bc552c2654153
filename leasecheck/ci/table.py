"""Rows of many runs as one table: for a terminal (rich), Markdown (a CI job summary), and a self-contained HTML page.

``leasecheck matrix`` ends with this table and ``leasecheck summary`` prints
it for any set of run folders: one rendering of :class:`~leasecheck.verdict.outcomes.Row` s,
in one column order, so the two can never show a run differently. Whether a row
matches is the row's own :meth:`~leasecheck.verdict.outcomes.Row.judge`; this
module only shows it.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from leasecheck.rundir.runfolder import RunFolder
from leasecheck.verdict.outcomes import Row, nemesis_label, tally

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
            report = RunFolder(row.run_dir).report
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
