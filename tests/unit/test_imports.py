"""The package's layers only point down, and no two subpackages import each other.

docs/design.md, "Layers": protocol leaves -> transport and services (side by side) ->
runtime and core (side by side) -> faces -> tools (CLI, benchmarks). Every ``import`` of a
``syncprims`` module is checked, including those under ``TYPE_CHECKING`` and inside
functions: a type-only import up the stack is still a dependency for the reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "syncprims"

# unit (a subpackage or a top-level module of syncprims) -> its layer
LAYERS: dict[str, int] = {
    "_protocol": 0,
    "errors": 0,
    "_embedded": 0,  # the embedded redis-server (demo, benchmarks, tests): imports nothing
    "_gevent": 1,  # refuses a gevent/eventlet-patched process (the sync face's connect)
    "_observe": 1,  # logging and metrics hooks the core calls
    "config": 1,
    "naming": 1,  # public: lock names per call (Client.synchronized's rules, for integrations)
    "_transport": 2,
    "_services": 3,  # above the transport: the pub/sub reader uses its connection interface
    "_core": 3,
    "_runtime": 4,
    "asyncio": 5,
    "_sync": 5,
    "fencing": 5,  # public: the storage side of fencing, on the application's own client
    "__init__": 6,  # the blocking face's public namespace
    "metrics": 6,  # public: turns the _observe hooks into OpenTelemetry instruments
    "bench": 7,
    "cli": 8,
    "contrib": 8,  # framework integrations: the public API only (test below)
    "__main__": 9,
}


def _unit(path: Path) -> str:
    parts = path.relative_to(ROOT).parts
    return parts[0].removesuffix(".py")


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """(unit imported, line) for every import of a syncprims module in ``path``."""
    package = ".".join(("syncprims", *path.relative_to(ROOT).parts[:-1]))
    return _imports_in(path.read_text("utf-8"), package)


def _imports_in(source: str, package: str) -> Iterator[tuple[str, int]]:
    """(unit imported, line) for every import of a syncprims module in ``source``, a module
    of ``package``."""
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            modules = [".".join([*base, node.module] if node.module else base)]
            if not node.module:  # from . import x: x may be a module
                modules = [f"{modules[0]}.{alias.name}" for alias in node.names]
        elif node.module == "syncprims":  # from syncprims import _observe, __version__
            modules = [
                f"syncprims.{alias.name}"
                if (ROOT / alias.name).is_dir() or (ROOT / f"{alias.name}.py").is_file()
                else "syncprims.__init__"
                for alias in node.names
            ]
        elif node.module:
            modules = [node.module]
        for module in modules:
            parts = module.split(".")
            if parts[0] == "syncprims" and len(parts) > 1:
                yield parts[1], node.lineno


def _graph() -> dict[str, dict[str, str]]:
    """unit -> {unit it imports: where (file:line, first seen)}."""
    graph: dict[str, dict[str, str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        src = _unit(path)
        edges = graph.setdefault(src, {})
        for dst, line in _imports(path):
            if dst != src:
                edges.setdefault(dst, f"{path.relative_to(ROOT.parent)}:{line}")
    return graph


def test_every_unit_has_a_layer() -> None:
    assert set(_graph()) <= set(LAYERS), "give the new module a layer in LAYERS"


def test_imports_only_point_down() -> None:
    upward = [
        f"{where}: {src} (layer {LAYERS[src]}) imports {dst} (layer {LAYERS[dst]})"
        for src, edges in _graph().items()
        for dst, where in edges.items()
        if LAYERS[dst] >= LAYERS[src]
    ]
    assert not upward, "\n".join(upward)


def test_no_cycle_between_units() -> None:
    graph = _graph()

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph.get(start, {}))
        while todo:
            unit = todo.pop()
            if unit not in seen:
                seen.add(unit)
                todo.extend(graph.get(unit, {}))
        return seen

    cycles = sorted(unit for unit in graph if unit in reachable(unit))
    assert not cycles, f"units on an import cycle: {cycles}"


def _modules_imported(source: str, package: str) -> Iterator[tuple[str, int]]:
    """(module, line) for every import of a syncprims module in ``source``, a module of
    ``package``, by its full name (``from . import x`` names ``x`` too: it may be a module)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                module = ".".join([*base[: len(base) - node.level + 1], module]).rstrip(".")
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        yield from ((name, node.lineno) for name in names if name.startswith("syncprims"))


def _back_to_the_lock_core(source: str) -> list[int]:
    """The lines of a part of ``_core/lock/`` that import ``core.py`` or the package."""
    core = "syncprims._core.lock.core"
    return sorted(
        {
            line
            for module, line in _modules_imported(source, "syncprims._core.lock")
            if module in ("syncprims._core.lock", core) or module.startswith(f"{core}.")
        }
    )


LOCK = ROOT / "_core" / "lock"


def test_the_lock_parts_never_import_its_core() -> None:
    """Inside the RLock's package (``_core/lock/``) the arrows point from ``core.py`` to its
    parts, never back: a part sees the lock through ``view.py``'s Protocol and imports
    neither ``core.py`` nor the package itself (whose ``__init__`` imports ``core.py``)."""
    back = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in sorted(LOCK.glob("*.py"))
        if path.name not in ("core.py", "__init__.py")
        for line in _back_to_the_lock_core(path.read_text("utf-8"))
    ]
    assert not back, "a part imports the lock's core:\n" + "\n".join(back)


def test_the_lock_part_checker_sees_every_way_back() -> None:
    source = """
from typing import TYPE_CHECKING
from syncprims._core.lock.view import LockView
from syncprims._core.lock import wakeup
from .core import LockCore
from . import core
if TYPE_CHECKING:
    from syncprims._core.lock.core import LockCore
def f() -> None:
    import syncprims._core.lock.core
"""
    assert _back_to_the_lock_core(source) == [4, 5, 6, 8, 10]


def _private_reaches(source: str) -> list[int]:
    """Lines where ``source`` reads another object's private attribute (``x._name``, ``x``
    not ``self`` or ``cls``) that no class of ``source`` itself defines: a reach into a
    class of another module."""
    tree = ast.parse(source)
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)  # self._x = ..., also in __init__
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)  # _x = ... in a class body (or a slot's name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            own.add(node.value)  # __slots__ = ("_x", ...)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        and node.attr not in own
    )


def test_the_core_reads_no_private_attribute_of_another_module() -> None:
    """In ``_core/``, an object's private attributes are read only by its own module: the
    parts of a lock see it through ``view.py``'s Protocol, never through ``lock._ex``."""
    reaches = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in sorted((ROOT / "_core").rglob("*.py"))
        for line in _private_reaches(path.read_text("utf-8"))
    ]
    assert not reaches, "private attributes read across modules:\n" + "\n".join(reaches)


def test_the_private_reach_checker_sees_a_reach() -> None:
    source = """
class Part:
    __slots__ = ("_slot",)
    def __init__(self, lock: object) -> None:
        self._mine = 1
    def f(self, other: "Part", lock: object) -> object:
        return other._mine, other._slot, lock._ex, self._ex, lock.executor
"""
    assert _private_reaches(source) == [7]


def test_contrib_uses_the_public_api_only() -> None:
    """``syncprims.contrib`` builds on the public API, so that the internals can move
    under it: no module of syncprims whose path has a private part, but its own."""
    private = [
        f"{path.relative_to(ROOT.parent)}:{node.lineno}: {module}"
        for path in sorted((ROOT / "contrib").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.ImportFrom | ast.Import)
        for module in (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
        )
        if module.startswith("syncprims")
        and not module.startswith("syncprims.contrib")
        and any(part.startswith("_") for part in module.split("."))
    ]
    assert not private, "\n".join(private)


def test_the_checker_sees_relative_type_only_and_local_imports() -> None:
    source = """
from typing import TYPE_CHECKING
from . import retry
from ..errors import LockError
from syncprims import _observe
if TYPE_CHECKING:
    from syncprims.config import Config
def f() -> None:
    import syncprims.cli.demo
"""
    found = {unit for unit, _ in _imports_in(source, "syncprims._core")}
    assert found == {"_core", "errors", "_observe", "config", "cli"}
