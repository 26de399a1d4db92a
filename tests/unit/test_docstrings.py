"""The public docstrings and the docs pages are Markdown, not reStructuredText.

mkdocstrings renders Google-style docstrings as Markdown: a Sphinx role (``:class:`X```) or
a literal-block marker (``Example::``) would reach readers raw. The docs build fails on them
too (``scripts/mkdocs_hooks.py``); this test finds them without building the site.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import syncprims
import syncprims.asyncio
import syncprims.config
import syncprims.errors
import syncprims.metrics

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
assert _spec is not None and _spec.loader is not None
_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hooks)
find_raw_markup: Callable[[str], list[str]] = _hooks.find_raw_markup
find_unresolved_snippets: Callable[[str], list[str]] = _hooks.find_unresolved_snippets

PUBLIC: list[ModuleType] = [
    syncprims,
    syncprims.asyncio,
    syncprims.config,
    syncprims.errors,
    syncprims.metrics,
]


def _docstrings() -> Iterator[tuple[str, str]]:
    seen: set[int] = set()
    for module in PUBLIC:
        yield module.__name__, module.__doc__ or ""
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            yield f"{module.__name__}.{name}", inspect.getdoc(obj) or ""
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__call__":
                        continue
                    target = member.fget if isinstance(member, property) else member
                    doc = getattr(target, "__doc__", None)
                    if isinstance(doc, str):
                        yield f"{module.__name__}.{name}.{attr}", doc


def test_the_checker_finds_raw_markup() -> None:
    assert find_raw_markup("see :class:`Config` and :meth:`unlock`")
    assert find_raw_markup("Example::\n\n    lock.lock()\n")
    assert find_raw_markup("as follows::")
    assert not find_raw_markup("see [Config][syncprims.Config]; ::: syncprims.RLock")
    assert not find_raw_markup("Example:\n    ```python\n    x[::2]\n    ```")


def test_public_docstrings_have_no_rest_markup() -> None:
    found = {where: raw for where, doc in _docstrings() if (raw := find_raw_markup(doc))}
    assert found == {}


def test_public_docstrings_are_found() -> None:
    names = {where for where, _ in _docstrings()}
    assert "syncprims.asyncio.RLock.hold_or_cancel" in names
    assert "syncprims.Client.synchronized" in names
    assert "syncprims.LockError" in names


def test_docs_pages_have_no_rest_markup() -> None:
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages
    found = {page.name: raw for page in pages if (raw := find_raw_markup(page.read_text("utf-8")))}
    assert found == {}


def test_the_checker_finds_unresolved_snippets() -> None:
    assert find_unresolved_snippets('--8 < --"docs/examples/object_listeners.py"')  # ruff's
    assert find_unresolved_snippets('text\n--8<--"docs/examples/x.py"\n')  # no space
    assert find_unresolved_snippets('--8<-- "docs/examples/x.py" ')  # a space after it
    assert find_unresolved_snippets("--8\\<-- 'x.py'")
    assert not find_unresolved_snippets("a -> b, x <- y, 8 < 9, -- and <!-- fmt: off -->")


def test_docs_pages_snippet_markers_resolve() -> None:
    """Each snippet marker in a page is pymdownx.snippets' inline form, names a file that
    exists, and sits in a code block that ``ruff format`` leaves alone (it formats the Python
    blocks of Markdown files, and made one ``--8 < --"..."``)."""
    inline = re.compile(r'--8<-- "([^"]+)"')
    markers = 0
    for page in sorted((ROOT / "docs").glob("*.md")):
        lines = page.read_text("utf-8").splitlines()
        for number, line in enumerate(lines):
            if not find_unresolved_snippets(line):
                continue
            markers += 1
            where = f"{page.name}:{number + 1}: {line!r}"
            match = inline.fullmatch(line)
            assert match, where
            assert (ROOT / match.group(1)).is_file(), where
            assert lines[number - 2 : number] == ["<!-- fmt: off -->", "```python"], where
            assert lines[number + 1 : number + 3] == ["```", "<!-- fmt: on -->"], where
    assert markers


def test_examples_are_fenced() -> None:
    """A Google-style ``Example:`` section holds fenced code, not an indented block."""
    for where, doc in _docstrings():
        for match in re.finditer(r"^( *)Examples?:\n", doc, re.MULTILINE):
            following = doc[match.end() :].lstrip("\n").splitlines()
            assert following, where
            assert following[0].strip().startswith("```"), f"{where}: {following[0]!r}"
