"""``FencedLock``: a lock that hands out fencing tokens."""

from __future__ import annotations

from typing import final

from syncprims._core.fenced import FencedLockCore
from syncprims._core.owners import OwnerId
from syncprims._protocol.timing import Duration
from syncprims.asyncio._decorate import owner_of
from syncprims.asyncio._lock import RLock

__all__ = ["FencedLock"]


@final
class FencedLock(RLock):
    """A reentrant lock that also hands out a fencing token with every acquisition.

    Use it when the lock protects a storage system that can check a number: a lease cannot
    stop a holder that pauses (GC, VM migration, a stopped process) past its lease and then
    writes. Tokens strictly increase across all acquisitions of the lock; give the token to
    the storage and have it refuse writes with a token lower than the highest it has seen.

    Same methods as [`RLock`][syncprims.asyncio.RLock] (every acquisition increments the token),
    plus [`lock_and_get_token`][syncprims.asyncio.FencedLock.lock_and_get_token],
    [`try_lock_and_get_token`][syncprims.asyncio.FencedLock.try_lock_and_get_token] and
    [`get_token`][syncprims.asyncio.FencedLock.get_token].

    Algorithm: Redisson ``RedissonFencedLock`` (counter ``redisson_lock_token:{name}``); see
    also Kleppmann, "How to do distributed locking" (2016).
    """

    __slots__ = ()

    _core: FencedLockCore

    async def lock_and_get_token(
        self, lease_time: Duration | None = None, *, owner: OwnerId | None = None
    ) -> int:
        """Acquire, waiting as long as it takes, and return this acquisition's token.

        Args:
            lease_time: as in [`lock`][syncprims.asyncio.RLock.lock] (honoured, unlike Redisson's).
            owner: as in [`lock`][syncprims.asyncio.RLock.lock].

        Raises:
            TypeError, ValueError: a bad ``lease_time`` (nothing is sent).
        """
        return await self._core.lock_and_get_token(owner_of(owner), lease_time)

    async def try_lock_and_get_token(
        self,
        wait_time: Duration | None = None,
        lease_time: Duration | None = None,
        *,
        owner: OwnerId | None = None,
    ) -> int | None:
        """Acquire within ``wait_time`` (``None``: one attempt) and return the token.

        Args:
            wait_time: as in [`try_lock`][syncprims.asyncio.RLock.try_lock].
            lease_time: as in [`lock`][syncprims.asyncio.RLock.lock].
            owner: as in [`lock`][syncprims.asyncio.RLock.lock].

        Returns:
            The token, or ``None`` when not acquired.
        """
        return await self._core.try_lock_and_get_token(owner_of(owner), wait_time, lease_time)

    async def get_token(self) -> int:
        """The latest token handed out by this lock (0 before any acquisition)."""

        return await self._core.get_token()
