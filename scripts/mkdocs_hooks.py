"""mkdocs hooks: fail the build on markup that would reach readers raw.

The reference is rendered by mkdocstrings from Google-style docstrings written in Markdown;
a Sphinx role (``:class:`Config```, ``:meth:`unlock```) or a literal-block marker
(``Example::``) is not understood there and would reach readers as is. This hook scans every
page's Markdown and the HTML rendered from it (which includes the docstrings) and raises, so
that ``mkdocs build`` fails. ``tests/unit/test_docstrings.py`` runs the same check on the
docstrings themselves, without building the site.

A snippet marker (``--8<-- "docs/examples/x.py"``) that pymdownx.snippets did not replace
shows as text too: one written off its syntax, or mangled by a code formatter (``ruff format``
formats the Python blocks of Markdown files and makes it ``--8 < --"docs/examples/x.py"``
unless the block sits between ``<!-- fmt: off -->`` and ``<!-- fmt: on -->``). Snippets are
replaced while the Markdown is converted, so the check runs on the rendered HTML, where any
marker left is one that was not resolved.
"""

from __future__ import annotations

import html
import re
from typing import Any

from mkdocs.exceptions import PluginError

ROLE = re.compile(r":(?:class|meth|func|attr|exc|mod|data|obj|py:\w+):(?=[`~\w])")
"""A Sphinx cross-reference role (in rendered HTML its backticks have become a code tag)."""

LITERAL_BLOCK = re.compile(r"[\w)]::(?=[ \t]*(?:\n|$))", re.MULTILINE)
"""An reST literal-block marker at the end of a line (``Example::``, ``as follows::``)."""

SNIPPET = re.compile(r"-+[ \t]*8[ \t]*\\?<[ \t]*-+")
"""A snippet marker, well-formed (``--8<--``) or mangled (``--8 < --``, ``--8\\<--``)."""

TAG = re.compile(r"<[^>]+>")


def find_raw_markup(text: str) -> list[str]:
    """The raw reST roles and literal-block markers in ``text``, each with some context."""
    found = []
    for pattern in (ROLE, LITERAL_BLOCK):
        for match in pattern.finditer(text):
            start = max(0, match.start() - 30)
            found.append(text[start : match.end() + 30].replace("\n", "\\n"))
    return found


def find_unresolved_snippets(text: str) -> list[str]:
    """The snippet markers in rendered ``text`` (none is left once each is resolved), each
    with some context."""
    return [
        text[max(0, match.start() - 30) : match.end() + 50].replace("\n", "\\n")
        for match in SNIPPET.finditer(text)
    ]


def _check(where: str, text: str) -> None:
    found = find_raw_markup(text)
    if found:
        raise PluginError(
            f"{where}: reStructuredText markup that Markdown shows raw (use "
            f"[Name][syncprims.Name] cross-references and fenced code): {found}"
        )


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    _check(page.file.src_path, markdown)
    return markdown


def on_page_content(content: str, page: Any, **kwargs: Any) -> str:
    text = html.unescape(TAG.sub("", content))
    where = f"{page.file.src_path} (rendered, with its docstrings)"
    _check(where, text)
    snippets = find_unresolved_snippets(text)
    if snippets:
        raise PluginError(
            f'{where}: a snippet marker was not resolved (write it as --8<-- "path" on a '
            f"line of its own, its code block between <!-- fmt: off --> and <!-- fmt: on -->): "
            f"{snippets}"
        )
    return content
