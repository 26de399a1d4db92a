"""mkdocs hooks: fail the build on reStructuredText markup that Markdown would show raw.

The reference is rendered by mkdocstrings from Google-style docstrings written in Markdown;
a Sphinx role (``:class:`Config```, ``:meth:`unlock```) or a literal-block marker
(``Example::``) is not understood there and would reach readers as is. This hook scans every
page's Markdown and the HTML rendered from it (which includes the docstrings) and raises, so
that ``mkdocs build`` fails. ``tests/unit/test_docstrings.py`` runs the same check on the
docstrings themselves, without building the site.
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

TAG = re.compile(r"<[^>]+>")


def find_raw_markup(text: str) -> list[str]:
    """The raw reST roles and literal-block markers in ``text``, each with some context."""
    found = []
    for pattern in (ROLE, LITERAL_BLOCK):
        for match in pattern.finditer(text):
            start = max(0, match.start() - 30)
            found.append(text[start : match.end() + 30].replace("\n", "\\n"))
    return found


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
    _check(f"{page.file.src_path} (rendered, with its docstrings)", text)
    return content
