"""What the face's lock objects share: ``owner=`` arguments, and use as decorators."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, ParamSpec, Self, TypeVar

from syncprims._core.lock.core import LockCore
from syncprims._core.multi import MultiLockCore
from syncprims._core.owners import OwnerId, current_task_owner, explicit_owner
from syncprims._protocol.templates import require_coroutine_function
from syncprims._protocol.timing import Duration

__all__ = ["Guarded", "LockLike", "P", "T", "locked", "owner_of"]

P = ParamSpec("P")
T = TypeVar("T")


def owner_of(owner: OwnerId | None) -> int:
    """The owner id a call acts for: ``owner`` when given, else the current task's.

    The lock and unlock methods of ``RLock`` and ``MultiLock`` (and :class:`LockLike`'s)
    spell it out inline: no call of its own on a lock pair [hot-1]."""
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


class LockLike(Guarded):
    """What ``RLock`` (and its kinds) and ``MultiLock`` (and ``RedLock``) share: the
    ``threading.Lock``-style methods, and ``async with`` for the current task."""

    __slots__ = ()

    _core: LockCore | MultiLockCore

    async def acquire(
        self, blocking: bool = True, timeout: Duration = -1, *, owner: OwnerId | None = None
    ) -> bool:
        """``threading.Lock``-style acquire, with the watchdog lease.

        Args:
            blocking: ``False`` for a single attempt.
            timeout: seconds to wait when blocking; -1 (default) waits forever.
            owner: as in ``lock``: an explicit owner ([`OwnerId`][syncprims.OwnerId])
                instead of the current task.

        Returns:
            ``True`` if the lock is now held.

        Raises:
            ValueError: a timeout with ``blocking=False``, or a negative timeout other
                than -1.
            TransportError: an RLock's Redis could not be reached (a MultiLock counts an
                unreachable server as a failed attempt).
        """
        return await self._core.acquire(
            current_task_owner() if owner is None else explicit_owner(owner), blocking, timeout
        )

    async def release(self, *, owner: OwnerId | None = None) -> None:
        """``threading.Lock``-style release: the same as ``unlock`` (its ``owner`` and
        errors)."""
        await self._core.unlock(current_task_owner() if owner is None else explicit_owner(owner))

    async def locked(self) -> bool:
        """``threading.Lock``-style: the same as ``is_locked``."""
        return await self._core.is_locked()

    async def _enter(self) -> None:
        await self._core.lock(current_task_owner(), None)

    async def _leave(self) -> None:
        await self._core.unlock_on_exit(current_task_owner())
