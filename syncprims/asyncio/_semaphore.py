"""``Semaphore`` and ``PermitExpirableSemaphore``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from syncprims._core.semaphore import PermitExpirableSemaphoreCore, SemaphoreCore
from syncprims._protocol.info import SemaphoreInfo
from syncprims._protocol.statistics import SemaphoreStatistics
from syncprims._protocol.timing import Duration
from syncprims.asyncio._decorate import Guarded
from syncprims.asyncio._objects import RExpirable

__all__ = ["PermitExpirableSemaphore", "Semaphore"]


@final
class Semaphore(RExpirable, Guarded):
    """A counting semaphore: at most N holders at once, across processes and hosts.

    Use it to limit concurrency (calls to a rate-limited API, heavy jobs per cluster). Permits
    belong to nobody: any caller may release, and a holder that dies keeps its permits (use a
    [`PermitExpirableSemaphore`][syncprims.asyncio.PermitExpirableSemaphore] when holders may die).
    Set the number of permits once with
    [`try_set_permits`][syncprims.asyncio.Semaphore.try_set_permits] (a semaphore that does not
    exist has 0).

    Example:
        ```python
        sem = client.get_semaphore("exports")
        await sem.try_set_permits(3)
        async with sem:              # one permit
            ...
        ```

    Algorithm: Redisson ``RedissonSemaphore`` (a counter at the name; the new count is
    published on ``redisson_sc:{name}``).
    """

    __slots__ = ()

    _core: SemaphoreCore

    async def try_set_permits(self, permits: int, ttl: Duration | None = None) -> bool:
        """Set the number of permits if the semaphore does not exist yet.

        Args:
            permits: >= 0.
            ttl: a time to live for the semaphore (seconds or ``timedelta``, > 0), set in
                the same script as the permits (Redisson's ``trySetPermits(permits,
                timeToLive)``); ``None`` (default): none.

        Returns:
            ``True`` if set; ``False`` if the semaphore existed (nothing changes, its TTL
            neither).

        Raises:
            TypeError, ValueError: a bad count or ``ttl`` (nothing is sent).
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.try_set_permits(permits, ttl)

    async def add_permits(self, permits: int) -> int:
        """Add permits; a negative number removes them (the count may go below 0).

        Returns:
            The new number of available permits.

        Raises:
            TypeError: not an ``int``.
        """
        return await self._core.add_permits(permits)

    async def available_permits(self) -> int:
        """The permits available now (0 when the semaphore does not exist)."""
        return await self._core.available_permits()

    async def drain_permits(self) -> int:
        """Take every available permit at once.

        Returns:
            How many permits were taken.
        """
        return await self._core.drain_permits()

    async def acquire(
        self, blocking: bool = True, timeout: Duration = -1, *, permits: int = 1
    ) -> bool:
        """Take permits, with ``threading.Semaphore.acquire``'s protocol.

        Args:
            blocking: ``False`` for a single attempt.
            timeout: when blocking, the longest wait (seconds or ``timedelta``); -1 (default)
                waits as long as it takes (Redisson's ``acquire(permits)``).
            permits: how many (>= 0; 0 succeeds at once without Redis).

        Returns:
            ``True`` if the permits were taken.

        Raises:
            TypeError, ValueError: a bad count or duration, or a timeout with
                ``blocking=False`` (nothing is sent).
            TransportError: Redis could not be reached.
        """
        return await self._core.acquire(permits, blocking, timeout)

    async def try_acquire(self, permits: int = 1, wait_time: Duration | None = None) -> bool:
        """Take ``permits`` if it can be done within ``wait_time``.

        Args:
            permits: >= 0 (0 succeeds at once without Redis).
            wait_time: seconds or ``timedelta``; ``None`` or 0 for one attempt; ``math.inf``
                to wait forever.

        Returns:
            ``True`` if the permits were taken.

        Raises:
            TypeError, ValueError: a bad count or duration (nothing is sent).
        """
        return await self._core.try_acquire(permits, wait_time)

    async def release(self, permits: int = 1) -> None:
        """Give ``permits`` back and wake waiters (0 does nothing).

        Raises:
            TypeError, ValueError: a bad count (nothing is sent).
        """
        await self._core.release(permits)

    async def release_if_exists(self, permits: int = 1) -> bool:
        """Give ``permits`` back only if the semaphore exists (Redisson's
        ``releaseIfExists``): unlike [`release`][syncprims.asyncio.Semaphore.release], a
        semaphore that was deleted or expired is not created again.

        Args:
            permits: >= 0 (0 returns ``False`` at once without Redis, as Redisson).

        Returns:
            ``True`` if the permits were given back; ``False`` if the semaphore does not
            exist (nothing changes).

        Raises:
            TypeError, ValueError: a bad count (nothing is sent).
            TransportError: Redis could not be reached; not re-sent once it may have run.
        """
        return await self._core.release_if_exists(permits)

    async def _enter(self) -> None:
        await self._core.acquire(1, True, -1)

    async def _leave(self) -> None:
        await self._core.release(1)

    async def statistics(self) -> SemaphoreStatistics:
        """A snapshot for debugging: available permits, and this client's waiters.

        Returns:
            A [`SemaphoreStatistics`][syncprims.SemaphoreStatistics].

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.statistics()

    async def info(self) -> SemaphoreInfo:
        """What the semaphore keeps in Redis now: the permits available, the TTL and the
        subscribers of its channel (its waiters).

        Returns:
            A [`SemaphoreInfo`][syncprims.SemaphoreInfo] (a few reads, not atomic together).

        Raises:
            TransportError: Redis could not be reached (after retries).
            ServerReplyError: Redis refused to read the semaphore's key (an ACL).
        """
        return await self._core.info()


@final
class PermitExpirableSemaphore(RExpirable):
    """A semaphore whose permits are leased: a permit comes back when its lease runs out.

    Use it when holders may die (a killed worker's permit returns by itself). Each acquire
    returns a permit id (32 hex characters) to release later; releasing an unknown id raises.
    The ``*_many`` methods lease several at once, all or none, and return a ``list`` of ids.

    Example:
        ```python
        sem = client.get_permit_expirable_semaphore("gpu-slots")
        await sem.try_set_permits(4)
        permit = await sem.acquire(lease_time=60)
        try:
            ...
        finally:
            await sem.release(permit)
        ```

    Algorithm: Redisson ``RedissonPermitExpirableSemaphore`` (ids as 16 raw bytes in the
    sorted set ``{name}:timeout``, scored by lease expiry; expired leases are reclaimed by
    every operation).
    """

    __slots__ = ()

    _core: PermitExpirableSemaphoreCore

    async def acquire(
        self, blocking: bool = True, timeout: Duration = -1, *, lease_time: Duration | None = None
    ) -> str | None:
        """Lease one permit, with ``threading.Semaphore.acquire``'s protocol; the permit's id
        stands for ``True``.

        Args:
            blocking: ``False`` for a single attempt.
            timeout: when blocking, the longest wait (seconds or ``timedelta``); -1 (default)
                waits as long as it takes.
            lease_time: seconds or ``timedelta`` until the permit comes back by itself;
                ``None``: it never does (release it yourself).

        Returns:
            The permit id (a 32-character hex string), or ``None`` when not acquired.

        Raises:
            TypeError, ValueError: a bad duration, or a timeout with ``blocking=False``
                (nothing is sent).
        """
        return await self._core.acquire(blocking, timeout, lease_time)

    async def try_acquire(
        self, wait_time: Duration | None = None, lease_time: Duration | None = None
    ) -> str | None:
        """Lease one permit if it can be done within ``wait_time``.

        Args:
            wait_time: ``None`` or 0 for one attempt; ``math.inf`` to wait forever.
            lease_time: as in [`acquire`][syncprims.asyncio.PermitExpirableSemaphore.acquire].

        Returns:
            The permit id, or ``None``.

        Raises:
            TypeError, ValueError: a bad duration (nothing is sent).
        """
        return await self._core.try_acquire(wait_time, lease_time)

    async def acquire_many(self, permits: int, *, lease_time: Duration | None = None) -> list[str]:
        """Lease ``permits`` permits at once, all or none, waiting as long as it takes
        (Redisson's ``acquire(permits, leaseTime, unit)``).

        Args:
            permits: how many, 0 to 1000 (0 returns ``[]`` at once without Redis).
            lease_time: seconds or ``timedelta`` until the permits come back by themselves
                (the same lease for all); ``None``: they never do (release them yourself).

        Returns:
            The permit ids (32-character hex strings), ``permits`` of them, all distinct.

        Raises:
            TypeError, ValueError: a bad count or duration (nothing is sent).
        """
        return await self._core.acquire_many(permits, lease_time)

    async def try_acquire_many(
        self,
        permits: int,
        wait_time: Duration | None = None,
        lease_time: Duration | None = None,
    ) -> list[str] | None:
        """Lease ``permits`` permits at once, all or none, if it can be done within
        ``wait_time`` (Redisson's ``tryAcquire(permits, waitTime, leaseTime, unit)``).

        Args:
            permits: how many, 0 to 1000 (0 returns ``[]`` at once without Redis).
            wait_time: seconds or ``timedelta``; ``None`` or 0 for one attempt;
                ``math.inf`` to wait forever.
            lease_time: as in
                [`acquire_many`][syncprims.asyncio.PermitExpirableSemaphore.acquire_many].

        Returns:
            The permit ids, or ``None`` when they were not acquired (none was: Redisson
            returns an empty list there).

        Raises:
            TypeError, ValueError: a bad count or duration (nothing is sent).
        """
        return await self._core.try_acquire_many(permits, wait_time, lease_time)

    async def release(self, permit_id: str | Sequence[str]) -> None:
        """Give a permit back, or several at once: all or none.

        Args:
            permit_id: one id, or a list (or tuple) of ids, as returned by
                [`acquire_many`][syncprims.asyncio.PermitExpirableSemaphore.acquire_many]:
                non-empty, without duplicates, at most 1000.

        Raises:
            PermitNotHeldError: an id is unknown, already released, or its lease ran out;
                for a list, nothing was released then (Redisson's ``release(List)``).
            TypeError, ValueError: not a permit id (32 hex characters) or a list of them
                (nothing is sent).
        """
        await self._core.release(permit_id)

    async def try_release(self, permit_id: str | Sequence[str]) -> bool:
        """Give a permit back, or several at once (all or none), as
        [`release`][syncprims.asyncio.PermitExpirableSemaphore.release].

        Returns:
            ``True`` if released; ``False`` when an id is unknown, released or expired (for
            a list, nothing was released: Redisson's ``tryRelease(List)`` returns 0 then, and
            the number of ids otherwise).

        Raises:
            TypeError, ValueError: as ``release`` (nothing is sent).
        """
        return await self._core.try_release(permit_id)

    async def get_lease_time(self, permit_id: str) -> float | None:
        """A leased permit's lease left (Redisson's ``getLeaseTime``).

        Returns:
            Seconds until the permit comes back by itself, or ``None`` when it never does.

        Raises:
            PermitNotHeldError: the id is unknown, already released, or its lease ran out.
            TypeError, ValueError: not a permit id (nothing is sent).
        """
        return await self._core.get_lease_time(permit_id)

    async def update_lease_time(self, permit_id: str, lease_time: Duration | None) -> bool:
        """Give a leased permit a new lease from now (``None``: it never expires).

        Returns:
            ``False`` when the id is unknown (or expired).
        """
        return await self._core.update_lease_time(permit_id, lease_time)

    async def available_permits(self) -> int:
        """Permits available now, after expired leases were given back."""
        return await self._core.available_permits()

    async def acquired_permits(self) -> int:
        """Permits leased now, after expired leases were given back."""
        return await self._core.acquired_permits()

    async def get_permits(self) -> int:
        """All permits, available and leased (Redisson's ``getPermits``), after expired
        leases were given back; 0 when the semaphore does not exist."""
        return await self._core.get_permits()

    async def add_permits(self, permits: int) -> int:
        """Add available permits; a negative number removes them (the count may go below 0).

        Unlike Redisson's ``addPermits``, the TTL is kept (as
        [`Semaphore.add_permits`][syncprims.asyncio.Semaphore.add_permits]) and the call is
        not re-sent once it may have run (a second run would add again).

        Returns:
            The new number of available permits.

        Raises:
            TypeError, ValueError: a bad count (nothing is sent).
            TransportError: Redis could not be reached.
        """
        return await self._core.add_permits(permits)

    async def set_permits(self, permits: int) -> None:
        """Set the total number of permits (available and leased).

        Raises:
            TypeError, ValueError: a bad count (nothing is sent).
        """
        await self._core.set_permits(permits)

    async def try_set_permits(self, permits: int) -> bool:
        """Set the number of permits if the semaphore does not exist yet; ``True`` if set."""
        return await self._core.try_set_permits(permits)

    async def statistics(self) -> SemaphoreStatistics:
        """A snapshot for debugging: available and acquired permits, and this client's waiters;
        returns and raises as [`Semaphore.statistics`][syncprims.asyncio.Semaphore.statistics]."""
        return await self._core.statistics()

    async def info(self) -> SemaphoreInfo:
        """What the semaphore keeps in Redis now, as
        [`Semaphore.info`][syncprims.asyncio.Semaphore.info], with each leased permit and the
        time left on its lease (its returns and errors)."""
        return await self._core.info()
