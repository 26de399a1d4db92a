"""``CountDownLatch``."""

from __future__ import annotations

from typing import final

from syncprims._core.latch import CountDownLatchCore
from syncprims._protocol.info import LatchInfo
from syncprims._protocol.statistics import LatchStatistics
from syncprims._protocol.timing import Duration
from syncprims.asyncio._objects import RObject

__all__ = ["CountDownLatch"]


@final
class CountDownLatch(RObject):
    """A latch that opens when N events have happened (counted down by any process).

    Use it to wait for a set of workers to finish, or for a fleet to be ready. The count is
    set once with [`try_set_count`][syncprims.asyncio.CountDownLatch.try_set_count];
    [`count_down`][syncprims.asyncio.CountDownLatch.count_down] decrements it; at 0 the latch opens
    and every waiter is released.

    Example:
        ```python
        latch = client.get_count_down_latch("batch:7")
        await latch.try_set_count(3)
        ...                                   # three workers call count_down()
        if await latch.wait(timeout=60):
            ...
        ```

    ``wait()`` is Redisson's ``await()`` (a Python keyword; ``await latch.wait()`` reads like
    ``asyncio.Event``); ``await_`` is an alias. Algorithm: Redisson ``RedissonCountDownLatch``.
    """

    __slots__ = ()

    _core: CountDownLatchCore

    async def try_set_count(self, count: int) -> bool:
        """Set the count if the latch is not set (open).

        Args:
            count: >= 0.

        Returns:
            ``True`` if set.

        Raises:
            TypeError, ValueError: a bad count (nothing is sent).
        """
        return await self._core.try_set_count(count)

    async def count_down(self) -> None:
        """Decrement the count; at 0 the latch opens and releases every waiter."""
        await self._core.count_down()

    async def get_count(self) -> int:
        """The count now (0: open)."""
        return await self._core.get_count()

    async def wait(self, timeout: Duration | None = None) -> bool:
        """Wait until the count reaches 0.

        Args:
            timeout: seconds or ``timedelta``; ``None`` waits as long as it takes.

        Returns:
            ``True`` when open, ``False`` when ``timeout`` ran out.

        Raises:
            TypeError, ValueError: a bad timeout (nothing is sent).
        """
        return await self._core.wait(timeout)

    async def await_(self, timeout: Duration | None = None) -> bool:
        """Redisson's name for [`wait`][syncprims.asyncio.CountDownLatch.wait]."""
        return await self._core.wait(timeout)

    async def delete(self) -> bool:
        """Delete the latch: it opens and releases its waiters.

        Returns:
            ``True`` if it existed.
        """
        return await self._core.delete()

    async def statistics(self) -> LatchStatistics:
        """A snapshot for debugging: the count left and this client's waiters.

        Returns:
            A [`LatchStatistics`][syncprims.LatchStatistics].

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.statistics()

    async def info(self) -> LatchInfo:
        """What the latch keeps in Redis now: the count, the TTL and the subscribers of its
        channel (its waiters).

        Returns:
            A [`LatchInfo`][syncprims.LatchInfo] (a few reads, not atomic together).

        Raises:
            TransportError: Redis could not be reached (after retries).
            ServerReplyError: Redis refused to read the latch's key (an ACL).
        """
        return await self._core.info()
