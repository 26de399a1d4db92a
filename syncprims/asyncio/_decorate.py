"""What the face's lock objects share: ``owner=`` arguments, and use as decorators."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, ParamSpec, Self, TypeVar

from syncprims._core.owners import OwnerId, current_task_owner, explicit_owner
from syncprims._protocol.templates import require_coroutine_function

__all__ = ["Guarded", "P", "T", "locked", "owner_of"]

P = ParamSpec("P")
T = TypeVar("T")


def owner_of(owner: OwnerId | None) -> int:
    """The owner id a call acts for: ``owner`` when given, else the current task's.

    The acquire and release methods of ``RLock`` and ``MultiLock`` spell it out inline: no
    call of its own on a lock pair [hot-1]."""
    return current_task_owner() if owner is None else explicit_owner(owner)


def locked(
    hold: Callable[[tuple[Any, ...], dict[str, Any]], AbstractAsyncContextManager[object]],
    func: Callable[P, Awaitable[T]],
) -> Callable[P, Coroutine[object, object, T]]:
    """``func`` wrapped in ``async with hold(args, kwargs):``, ``args`` and ``kwargs`` being
    each call's (a lock object, or a lock named after the call).

    Raises:
        TypeError: ``func`` is not an ``async def`` function (of the sync face: is one).
    """
    require_coroutine_function(func)

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        async with hold(args, kwargs):
            return await func(*args, **kwargs)

    return wrapper


class Guarded:
    """``async with obj:`` and ``@obj`` for the face's lock-like objects (the RLock and its
    kinds, MultiLock and RedLock, the Semaphore): entering takes it for the current task
    (:meth:`_enter`), leaving gives it back (:meth:`_leave`), and as a decorator each call of
    the function runs inside that block."""

    __slots__ = ()

    async def _enter(self) -> None:
        raise NotImplementedError

    async def _leave(self) -> None:
        raise NotImplementedError

    def __call__(
        self, func: Callable[P, Awaitable[T]]
    ) -> Callable[P, Coroutine[object, object, T]]:
        """Use the lock as a decorator: each call of ``func`` runs inside ``async with lock:``.

        Raises:
            TypeError: ``func`` is not an ``async def`` function (of the sync face: is one).
        """
        return locked(lambda args, kwargs: self, func)

    async def __aenter__(self) -> Self:
        await self._enter()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._leave()
