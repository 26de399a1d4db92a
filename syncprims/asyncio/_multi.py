"""``MultiLock`` and ``RedLock``: several locks taken as one."""

from __future__ import annotations

from typing import final

from syncprims._core.multi import MultiLockCore, RedLockCore
from syncprims._core.owners import OwnerId
from syncprims._core.owners import current_task_owner as _owner
from syncprims._core.owners import explicit_owner as _explicit
from syncprims._protocol.contracts import LostCallback
from syncprims._protocol.statistics import LockStatistics
from syncprims._protocol.timing import Duration
from syncprims.asyncio._decorate import LockLike, owner_of
from syncprims.asyncio._lock import RLock

__all__ = ["MultiLock", "RedLock"]


class MultiLock(LockLike):
    """Several locks held as one: all of them, or none.

    Use it to take locks on several resources at once without deadlocks between owners
    that would take them one by one in different orders. Sub-locks may be any lock kind
    (RLock, FairLock, the read or the write side of a ReadWriteLock), from one client or from
    several. One attempt runs every sub-lock's acquire in parallel, so it costs the slowest
    server, not the sum; a failed attempt releases what it took, then tries again after a
    short jittered back-off (or a release message) while the wait time lasts.

    Example:
        ```python
        both = syncprims.asyncio.MultiLock(client.get_lock("a"), client.get_lock("b"))
        async with both:
            ...
        ```

    Algorithm: Redisson ``RedissonMultiLock``, with parallel attempts.
    """

    __slots__ = ("_core", "_locks")

    _core: MultiLockCore
    _core_class: type[MultiLockCore] = MultiLockCore

    def __init__(self, *locks: RLock, on_lost: LostCallback | None = None) -> None:
        """Build one from lock objects of this face.

        Args:
            *locks: the sub-locks (at least one).
            on_lost: called as ``on_lost(name, reason)``, once, when a hold is lost: too
                few of its sub-locks still hold it (a MultiLock: any one lost; a RedLock:
                more than a minority), each sub-lock's loss found by its client's watchdog
                (expiry, a forced delete, failed renewals, a server that lost its data). It
                runs on a client's event loop: keep it short.

        Raises:
            TypeError: an argument is not a lock of this face, or ``on_lost`` not callable.
            ValueError: no lock.
        """
        for lock in locks:
            if not isinstance(lock, RLock):
                raise TypeError(f"expected lock objects of this face, not {type(lock).__name__}")
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        self._locks = locks
        self._core = self._core_class([lock._core for lock in locks])
        self._core.on_lost = on_lost

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._core.name}>"

    @property
    def locks(self) -> tuple[RLock, ...]:
        """The sub-locks."""
        return self._locks

    async def lock(
        self, lease_time: Duration | None = None, *, owner: OwnerId | None = None
    ) -> None:
        """Acquire, waiting as long as it takes.

        Args:
            lease_time: seconds or ``timedelta`` after which each sub-lock expires by itself;
                ``None`` to have each sub-lock's watchdog renew it until
                [`unlock`][syncprims.asyncio.MultiLock.unlock].
            owner: an explicit owner ([`OwnerId`][syncprims.OwnerId], from
                ``client.new_owner()``) instead of the current task.

        Raises:
            TypeError, ValueError: a bad ``lease_time`` (nothing is sent).
        """
        await self._core.lock(_owner() if owner is None else _explicit(owner), lease_time)

    async def try_lock(
        self,
        wait_time: Duration | None = None,
        lease_time: Duration | None = None,
        *,
        owner: OwnerId | None = None,
    ) -> bool:
        """Acquire if it can be done within ``wait_time``.

        Args:
            wait_time: the longest wait, seconds or ``timedelta``; ``None`` or 0 for a single
                attempt; ``math.inf`` to wait forever.
            lease_time: as in [`lock`][syncprims.asyncio.MultiLock.lock].
            owner: as in [`lock`][syncprims.asyncio.MultiLock.lock].

        Returns:
            ``True`` if held now.

        Raises:
            TypeError, ValueError: a bad duration (nothing is sent).
        """
        return await self._core.try_lock(
            _owner() if owner is None else _explicit(owner), wait_time, lease_time
        )

    async def unlock(self, *, owner: OwnerId | None = None) -> None:
        """Release every sub-lock, in parallel.

        Args:
            owner: as in [`lock`][syncprims.asyncio.MultiLock.lock].

        Raises:
            LockNotHeldError: a sub-lock was not held (after releasing the others).
            TransportError: a server could not be reached (after retries).
        """
        await self._core.unlock(_owner() if owner is None else _explicit(owner))

    async def is_held_by_current_thread(self) -> bool:
        """Whether the current task holds the required sub-locks.

        Raises:
            TransportError: never for one unreachable server (it counts as not held).
        """
        return await self._core.is_held_by(_owner())

    async def is_locked(self) -> bool:
        """Whether the required sub-locks are held, by anyone."""
        return await self._core.is_locked()

    @property
    def is_lost(self) -> bool:
        """Whether the current task's hold is known to be lost (no Redis call is made): too
        few of its sub-locks still hold it (losing a minority of a RedLock's is not losing
        it), or its lease ran out; False again after the next acquire or unlock."""
        return self._core.lost_reason(_owner()) is not None

    async def ensure_held(self, *, owner: OwnerId | None = None) -> None:
        """Check, with the servers, that the current task (or ``owner``) still holds the
        required sub-locks.

        Raises:
            LockLostError: the hold was lost (too few sub-locks still hold it).
            LockNotHeldError: it was never acquired, or released.
        """
        await self._core.ensure_held(owner_of(owner))

    def validity_time(self, *, owner: OwnerId | None = None) -> float | None:
        """Seconds left before the earliest sub-lock may expire, for a lock taken with a lease.

        Computed as the lease minus the time the acquire took minus a drift allowance
        (1% of the lease + 2 ms), counted from when the acquire started, on the monotonic
        clock: bound your work by it. ``None`` when the current task holds no lease-bound
        hold (watchdog leases are renewed; see the guarantees page). ``owner``: an
        explicit owner ([`OwnerId`][syncprims.OwnerId]) instead of the current task.
        """
        return self._core.validity_time(owner_of(owner))

    async def statistics(self, *, owner: OwnerId | None = None) -> tuple[LockStatistics, ...]:
        """Each sub-lock's snapshot for the current task (or ``owner``), in the order given.

        Returns:
            One [`LockStatistics`][syncprims.LockStatistics] a sub-lock.

        Raises:
            TransportError: a Redis could not be reached (after retries).
        """
        return await self._core.statistics(owner_of(owner))


@final
class RedLock(MultiLock):
    """One lock on N independent Redis masters, held by a majority (``N // 2 + 1``).

    Use it to keep a lock available when a minority of masters fail, without trusting any
    single master's replication. Give each sub-lock its own client on its own master (see
    ``connect_many``). A failed master costs its client's per-node timeout, not the wait.

    With ``lease_time``, [`validity_time`][syncprims.asyncio.MultiLock.validity_time] tells how long
    the lock is known to be valid (distlock: lease - elapsed - drift); an attempt with no validity
    left counts as failed. ``unlock()`` releases every sub-lock in parallel and ignores a minority
    of failures; it raises when fewer than a majority could be released.

    Safety caveats (restarts without persistence, clock jumps, paused holders) and what to do
    about them: docs/multi-lock.md.

    Algorithm: the Redis distlock "Redlock" algorithm; Redisson ``RedissonRedLock``, with
    parallel attempts.
    """

    __slots__ = ()

    _core_class = RedLockCore
