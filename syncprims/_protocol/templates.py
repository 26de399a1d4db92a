"""Lock names per call, for ``Client.synchronized``; checks of decorated functions. Pure."""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lock_namer", "require_coroutine_function", "require_plain_function"]

Namer = Callable[[tuple[Any, ...], Mapping[str, Any]], str]
"""The lock name for one call's ``(args, kwargs)``."""


def lock_namer(name: object, func: Callable[..., object]) -> Namer:
    """How to name the lock of each call of ``func``.

    Args:
        name: a ``str.format`` template whose fields name ``func``'s parameters
            (``"orders:{order_id}"``, ``"user:{user.id}"``; defaults apply), or a callable
            taking the same arguments as ``func`` and returning the name.
        func: the decorated function.

    Raises:
        TypeError: ``name`` is neither; a template field that is not a parameter of
            ``func`` or is positional (``{}``, ``{0}``); a malformed template.
    """
    if callable(name):
        namer = name

        def call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
            value = namer(*args, **kwargs)
            if not isinstance(value, str):
                raise TypeError(f"the lock name function returned {type(value).__name__}, not str")
            return value

        return call
    if not isinstance(name, str):
        raise TypeError(f"name must be a str template or a callable, not {type(name).__name__}")
    template = name
    signature = inspect.signature(func)
    try:
        fields = [
            field for _, field, _, _ in string.Formatter().parse(template) if field is not None
        ]
    except ValueError as error:
        raise TypeError(f"bad lock name template {template!r}: {error}") from None
    for field in fields:
        root = field.split(".", 1)[0].split("[", 1)[0]
        if root not in signature.parameters:
            raise TypeError(
                f"lock name template {template!r}: {{{field}}} names no parameter of "
                f"{getattr(func, '__qualname__', func)}{signature} (fields name parameters: "
                "{order_id})"
            )
    if not fields:
        return lambda args, kwargs: template

    def format_call(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return template.format_map(bound.arguments)

    return format_call


def require_coroutine_function(func: object) -> None:
    """The asyncio face decorates ``async def`` functions only.

    Raises:
        TypeError: ``func`` is not a coroutine function.
    """
    if not inspect.iscoroutinefunction(func):
        raise TypeError(
            f"the asyncio face's lock decorators take async functions, not {func!r} "
            "(use the sync face, syncprims, for plain functions)"
        )


def require_plain_function(func: object) -> None:
    """The sync face decorates plain (blocking) functions only.

    Raises:
        TypeError: ``func`` is not callable, or is a coroutine function.
    """
    if not callable(func):
        raise TypeError(f"a lock decorates a function, not {type(func).__name__}")
    if inspect.iscoroutinefunction(func):
        raise TypeError(
            f"the sync face's lock decorators take plain functions, not the coroutine "
            f"function {getattr(func, '__qualname__', func)!r} (use syncprims.asyncio for "
            "async functions)"
        )
