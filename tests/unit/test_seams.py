"""The core's seams stay where they are (issue 40): no code in ``syncprims/_core`` reaches
into another module's private attributes, and its functions stay small.

The private-attribute rule, read from the source (the check cannot know types):

* a private name is an attribute name with one leading underscore (``_ex``; not a dunder);
* a module *defines* it when one of its classes does (``self._x = ...`` or ``cls._x`` in a
  method, ``_x`` assigned or annotated in the class body, named in its ``__slots__``, a method
  ``_x``) or its top level does (a function, class or variable ``_x``);
* in a module of ``_core/``, ``obj._x`` is refused when ``obj`` is not ``self`` or ``cls``,
  some other module of ``_core/`` defines ``_x``, and this module does not (a name that its
  own classes define is taken to be theirs: private to the module, as Python means it).

A part that needs what another class keeps privately is at the wrong seam: that class
gives it a public name (or hands the part what it needs) instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "syncprims" / "_core"

MAX_PARAMETERS = 6  # self and cls not counted
MAX_LINES = 100  # the def line to the last, docstring included


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _assigned(statement: ast.stmt) -> set[str]:
    """The names a top-level or class-body statement binds (``__slots__``' strings too)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    value: ast.expr | None
    if isinstance(statement, ast.Assign):
        targets, value = statement.targets, statement.value
    elif isinstance(statement, ast.AnnAssign):
        targets, value = [statement.target], statement.value
    else:
        return set()
    names = {target.id for target in targets if isinstance(target, ast.Name)}
    if "__slots__" in names and isinstance(value, (ast.Tuple, ast.List)):
        names |= {
            e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        }
    return names


def _defined(tree: ast.Module) -> set[str]:
    """The private names a module defines (module docstring)."""
    names = set().union(*(_assigned(statement) for statement in tree.body))
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        names |= set().union(*(_assigned(statement) for statement in cls.body))
        names |= {
            node.attr
            for node in ast.walk(cls)
            if isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        }
    return {name for name in names if _private(name)}


def _reaches(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, ``obj._x``) for every private attribute read or written on another object."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return found


def private_reaches(sources: dict[str, str]) -> list[str]:
    """Every refused access (module docstring) in ``sources`` (module path -> source)."""
    trees = {path: ast.parse(source) for path, source in sources.items()}
    defined = {path: _defined(tree) for path, tree in trees.items()}
    refused = []
    for path, tree in trees.items():
        elsewhere = set().union(*(names for other, names in defined.items() if other != path))
        for line, text in _reaches(tree):
            name = text.rsplit(".", 1)[1]
            if name in elsewhere and name not in defined[path]:
                refused.append(f"{path}:{line}: {text}")
    return refused


def _core_sources() -> dict[str, str]:
    return {
        str(path.relative_to(CORE.parent)): path.read_text("utf-8")
        for path in sorted(CORE.rglob("*.py"))
    }


def test_no_private_attribute_of_another_module() -> None:
    refused = private_reaches(_core_sources())
    assert not refused, "\n".join(refused)


def test_the_checker_refuses_a_reach_into_another_modules_class() -> None:
    lock = "class LockCore:\n    def __init__(self, ex):\n        self._ex = ex\n"
    part = "class Part:\n    def __init__(self, lock):\n        self.ex = lock._ex\n"
    own = (
        "class Own:\n    __slots__ = ('_ex',)\n    def f(self, other):\n        return other._ex\n"
    )
    sources = {"lock.py": lock, "part.py": part, "own.py": own}
    assert private_reaches(sources) == ["part.py:3: lock._ex"]


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    return [
        (path, node)
        for path, source in _core_sources().items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def test_no_function_takes_more_than_six_parameters() -> None:
    many = []
    for path, node in _functions():
        args = node.args
        names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        if len(names) > MAX_PARAMETERS:
            many.append(f"{path}:{node.lineno}: {node.name} takes {len(names)}")
    assert not many, "\n".join(many)


def test_no_function_is_longer_than_a_hundred_lines() -> None:
    long = [
        f"{path}:{node.lineno}: {node.name} has {lines} lines"
        for path, node in _functions()
        if (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_LINES
    ]
    assert not long, "\n".join(long)
