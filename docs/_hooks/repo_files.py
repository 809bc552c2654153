"""MkDocs hook: the docs' links to the repository's own files work on the site too.

The pages under ``docs/`` link to files outside it (``histories/FORMAT.md``, ``AUDITS.md``,
``examples/matrix/smoke.toml``, ``targets/base.py``, ...) with ordinary relative links, so
that they work where the Markdown is read (a checkout, a code host). MkDocs only knows
the files under ``docs/`` and would call each such link broken. This hook publishes
every repository file the docs link to (and, for a Markdown file, every file it links
to in turn) under ``repo/`` on the site, mirroring the repository's layout, and points
the docs' links there. A link to a file that does not exist is left alone, so
``mkdocs build --strict`` still fails on it. It also renders ``\\|`` inside a code span
of a table row as GitHub does, as ``|``.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

#: an inline Markdown link's target and anchor: ``[text](target#anchor)``
LINK = re.compile(r"(\]\()([^)\s#<>]+)(#[^)\s]*)?(\))")
#: the site folder the repository's files are published under
MIRROR = "repo"
#: a code span
CODE = re.compile(r"`[^`\n]*`")


def _is_relative(target: str) -> bool:
    return "://" not in target and not target.startswith(("/", "mailto:"))


def _repo_target(repo: Path, page_repo_path: str, target: str) -> str | None:
    """The repository path a link of the page at ``page_repo_path`` names, or None outside the repository."""
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), target))
    if path.startswith("../") or path == "..":
        return None
    return path if (repo / path).exists() else None


def _page_repo_path(src_uri: str) -> str:
    """Where a page of the site lives in the repository."""
    return src_uri[len(MIRROR) + 1:] if src_uri.startswith(MIRROR + "/") else "docs/" + src_uri


def _linked_files(repo: Path, pages: list[str]) -> set[str]:
    """Every repository file outside docs/ the pages link to, and what linked Markdown files link to."""
    found: set[str] = set()
    todo = list(pages)
    while todo:
        page = todo.pop()
        for m in LINK.finditer((repo / page).read_text(encoding="utf-8")):
            if not _is_relative(m.group(2)):
                continue
            path = _repo_target(repo, page, m.group(2))
            if path is None or path.startswith("docs/") or path in found or not (repo / path).is_file():
                continue
            found.add(path)
            if path.endswith(".md"):
                todo.append(path)
    return found


def on_files(files: Files, config: Any) -> Files:
    repo = Path(config["docs_dir"]).resolve().parent
    pages = ["docs/" + f.src_uri for f in files if f.src_uri.endswith(".md")]
    for path in sorted(_linked_files(repo, pages)):
        files.append(File.generated(config, f"{MIRROR}/{path}", abs_src_path=str(repo / path),
                                    inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    repo = Path(config["docs_dir"]).resolve().parent
    src_uri = page.file.src_uri
    here = _page_repo_path(src_uri)

    def rewrite(m: re.Match[str]) -> str:
        target = m.group(2)
        if not _is_relative(target):
            return m.group(0)
        path = _repo_target(repo, here, target)
        if path is None:
            return m.group(0)
        site_path = path[len("docs/"):] if path.startswith("docs/") else f"{MIRROR}/{path}"
        if files.get_file_from_path(site_path) is None:
            return m.group(0)
        new = posixpath.relpath(site_path, posixpath.dirname(src_uri) or ".")
        return f"{m.group(1)}{new}{m.group(3) or ''}{m.group(4)}"

    return _table_code_pipes(LINK.sub(rewrite, markdown))


def _table_code_pipes(markdown: str) -> str:
    """``\\|`` in a code span of a table row is a plain ``|`` (GitHub renders it so; Python-Markdown would keep the backslash)."""
    return "\n".join(
        CODE.sub(lambda m: m.group(0).replace("\\|", "|"), line) if line.lstrip().startswith("|") else line
        for line in markdown.split("\n")
    )
