"""Lock objects as decorators: the call runs while the lock is held."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import ParamSpec, TypeVar

from syncprims._protocol.templates import require_coroutine_function

__all__ = ["P", "T", "locked"]

P = ParamSpec("P")
T = TypeVar("T")


def locked(
    lock: AbstractAsyncContextManager[object], func: Callable[P, Awaitable[T]]
) -> Callable[P, Coroutine[object, object, T]]:
    """``func`` wrapped in ``async with lock:``.

    Raises:
        TypeError: ``func`` is not an ``async def`` function (of the sync face: is one).
    """
    require_coroutine_function(func)

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        async with lock:
            return await func(*args, **kwargs)

    return wrapper
