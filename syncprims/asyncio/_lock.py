"""``RLock``: the reentrant distributed lock, and its kinds that add no method of their own."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Self, final

from syncprims._core.lock import LockCore
from syncprims._core.owners import OwnerId
from syncprims._core.owners import current_task_owner as _owner
from syncprims._core.owners import explicit_owner as _explicit
from syncprims._protocol.info import LockInfo
from syncprims._protocol.loss import LossReason
from syncprims._protocol.statistics import LockStatistics
from syncprims._protocol.timing import Duration, clock
from syncprims.asyncio._decorate import LockLike, owner_of
from syncprims.asyncio._objects import RExpirable
from syncprims.errors import LockLostError, LockNotHeldError, TransportError

__all__ = ["FairLock", "NonReentrantFairLock", "NonReentrantLock", "RLock", "SpinLock"]


class RLock(RExpirable, LockLike):
    """A reentrant lock held by one owner at a time, across processes and hosts.

    Use it to make one critical section run at a time anywhere in a fleet. It is Redisson's
    ``RLock`` (same keys, fields and messages, so Java and Python clients exclude each
    other). The owner is the current asyncio task; the owner may acquire again (reentrancy)
    and must release as many times.

    Without ``lease_time`` the client's watchdog renews the lease until ``unlock()``, and
    the lock of a process that died frees itself within ``Config.lock_watchdog_timeout``
    (30 s); with ``lease_time`` the lock expires after it, held or not (docs/locks.md,
    "Leases and the watchdog").

    Example:
        ```python
        lock = client.get_lock("orders:42")
        async with lock:
            ...                               # one owner at a time
        if await lock.try_lock(wait_time=5, lease_time=30):
            try:
                ...
            finally:
                await lock.unlock()

        @lock                                 # a decorator: held during each call
        async def rebuild_cache() -> None: ...
        ```

    Algorithm: Redisson ``RedissonLock`` (hash + ``HINCRBY`` + ``PEXPIRE`` in one script;
    unlock publishes on ``redisson_lock__channel:{name}``).
    """

    __slots__ = ()

    _core: LockCore

    async def lock(
        self,
        lease_time: Duration | None = None,
        *,
        max_hold: Duration | None = None,
        owner: OwnerId | None = None,
    ) -> None:
        """Acquire the lock, waiting as long as it takes.

        Args:
            lease_time: seconds (> 0) or ``timedelta`` after which the lock expires by itself;
                ``None`` (default) to have the watchdog renew it until
                [`unlock`][syncprims.asyncio.RLock.unlock].
            max_hold: with the watchdog (``lease_time=None``), the longest the hold may
                last, seconds or ``timedelta``: renewed as usual, but the last renewal sets
                the lease to end ``max_hold`` after the grant, and then the holder is told
                through ``on_lost`` (reason ``LossReason.MAX_HOLD``; ``is_lost`` turns
                true). A reentrant acquire keeps the earliest bound. ``None`` (default):
                renewed until unlocked.
            owner: an explicit owner ([`OwnerId`][syncprims.OwnerId], from
                ``client.new_owner()``) instead of the current task: the hold may then be
                released, renewed and checked from any thread or task that passes it.

        Raises:
            TypeError, ValueError: a bad ``lease_time``, ``max_hold`` or ``owner``, or both
                durations given (nothing is sent).
            TransportError: Redis could not be reached.
        """
        await self._core.lock(_owner() if owner is None else _explicit(owner), lease_time, max_hold)

    async def try_lock(
        self,
        wait_time: Duration | None = None,
        lease_time: Duration | None = None,
        *,
        max_hold: Duration | None = None,
        owner: OwnerId | None = None,
    ) -> bool:
        """Acquire the lock if it can be done within ``wait_time``.

        Args:
            wait_time: the longest wait, seconds or ``timedelta``; ``None`` or 0 for a single
                attempt; ``math.inf`` to wait forever.
            lease_time: as in [`lock`][syncprims.asyncio.RLock.lock].
            max_hold: as in [`lock`][syncprims.asyncio.RLock.lock].
            owner: as in [`lock`][syncprims.asyncio.RLock.lock].

        Returns:
            ``True`` if the lock is now held by the current task (or ``owner``).

        Raises:
            TypeError, ValueError: a bad duration (nothing is sent).
            TransportError: Redis could not be reached.
        """
        return await self._core.try_lock(
            _owner() if owner is None else _explicit(owner), wait_time, lease_time, max_hold
        )

    async def unlock(self, *, owner: OwnerId | None = None) -> None:
        """Release one hold; the last one deletes the lock and wakes a waiter.

        Args:
            owner: as in [`lock`][syncprims.asyncio.RLock.lock].

        Raises:
            LockNotHeldError: the current task does not hold the lock (it never did, or the
                lease ran out). It is a ``RuntimeError``, as for ``threading.Lock``.
            TransportError: Redis could not be reached after retries (the lock then expires
                by its lease; renewal has stopped).
        """
        await self._core.unlock(_owner() if owner is None else _explicit(owner))

    async def force_unlock(self) -> bool:
        """Release the lock whoever holds it, and wake its waiters.

        Returns:
            ``True`` if the lock was held.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """

        return await self._core.force_unlock()

    async def is_locked(self) -> bool:
        """Whether any owner holds the lock now.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """

        return await self._core.is_locked()

    async def is_held_by_current_thread(self) -> bool:
        """Whether the current task holds the lock (owners are tasks in the asyncio face).

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.is_held_by(_owner())

    async def is_held_by_thread(self, thread_id: int | OwnerId) -> bool:
        """Whether the owner ``thread_id`` of this client holds the lock.

        Args:
            thread_id: an owner id of this client (a thread ident in the sync face), or an
                [`OwnerId`][syncprims.OwnerId].

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        if isinstance(thread_id, OwnerId):
            thread_id = thread_id.value
        elif type(thread_id) is not int:
            raise TypeError(f"thread_id must be an int or OwnerId, not {type(thread_id).__name__}")
        return await self._core.is_held_by(thread_id)

    async def get_hold_count(self, *, owner: OwnerId | None = None) -> int:
        """How many times the current task holds the lock (0 when it does not).

        Args:
            owner: as in [`lock`][syncprims.asyncio.RLock.lock].

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.get_hold_count(owner_of(owner))

    @property
    def is_lost(self) -> bool:
        """Whether the current task's hold is known to be lost (no Redis call is made).

        True after the watchdog found the lock gone or could not renew it before its lease
        ran out, or once an explicit ``lease_time`` has passed; False again after the next
        acquire or unlock. Use [`ensure_held`][syncprims.asyncio.RLock.ensure_held] to check with
        Redis.
        """
        return self._core.holds.lost_reason(_owner()) is not None

    async def ensure_held(self, *, owner: OwnerId | None = None) -> None:
        """Check, with Redis, that the current task still holds the lock.

        Args:
            owner: as in [`lock`][syncprims.asyncio.RLock.lock].

        Raises:
            LockLostError: the hold was lost (the watchdog saw it go, its lease ran out, or
                Redis no longer has it).
            LockNotHeldError: the current task never acquired it, or released it.
            TransportError: Redis could not be reached (after retries).
        """
        await self._core.ensure_held(owner_of(owner))

    # unasync: remove (a thread cannot be cancelled from outside)
    @contextlib.asynccontextmanager
    async def hold_or_cancel(self, lease_time: Duration | None = None) -> AsyncIterator[Self]:
        """Hold the lock for a block, and cancel the block if the lock is lost meanwhile.

        Acquires like [`lock`][syncprims.asyncio.RLock.lock]. If the watchdog finds the lock gone,
        or cannot renew it before its lease runs out, or an explicit ``lease_time`` passes, the task
        running the block is cancelled and the block ends with ``LockLostError`` (instead of going
        on unprotected). Otherwise the lock is released when the block ends. Only in the asyncio
        face: a thread cannot be cancelled from outside.

        Example:
            ```python
            async with lock.hold_or_cancel():
                await copy_the_files()    # cancelled if the lock is lost
            ```

        Raises:
            LockLostError: the lock was lost during the block.
            TypeError, ValueError: a bad ``lease_time``.
        """
        owner = _owner()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("hold_or_cancel() must run inside an asyncio task")
        loop = asyncio.get_running_loop()
        lost: list[LossReason] = []
        active = [True]

        def cancel_if_active() -> None:
            if active[0]:
                task.cancel()

        def on_loss(reason: LossReason) -> None:  # the services thread, or this loop (lease timer)
            if not lost:
                lost.append(reason)
                loop.call_soon_threadsafe(cancel_if_active)

        await self._core.lock(owner, lease_time)
        self._core.holds.add_loss_listener(owner, on_loss)
        end = self._core.holds.lease_end(owner)
        timer = None
        if end is not None:
            timer = loop.call_later(max(0.0, end - clock()), on_loss, LossReason.LEASE_EXPIRED)
        try:
            try:
                yield self
            finally:
                active[0] = False
                self._core.holds.remove_loss_listener(owner, on_loss)
                if timer is not None:
                    timer.cancel()
        except asyncio.CancelledError:
            if lost and task.uncancel() == 0:
                await self._give_back_lost(owner)
                raise self._lost_error(owner, lost[0]) from None
            if not lost:
                await self._core.unlock(owner)
            raise
        except BaseException:
            if not lost:
                await self._core.unlock(owner)
            raise
        if lost:
            if task.cancelling():
                task.uncancel()
            await self._give_back_lost(owner)
            raise self._lost_error(owner, lost[0])
        await self._core.unlock(owner)

    # unasync: remove
    async def _give_back_lost(self, owner: int) -> None:
        """After a loss seen here: release the block's hold should Redis still have it (a
        lease is counted as ended slightly before Redis expires it), so that the next
        acquire does not re-enter a hold that is about to vanish."""
        with contextlib.suppress(LockNotHeldError, TransportError):
            await self._core.unlock(owner)

    # unasync: remove
    def _lost_error(self, owner: int, reason: LossReason) -> LockLostError:
        return LockLostError(
            f"{self._core.kind} {self.name!r} was lost while held: {reason}",
            name=self.name,
            owner=self._core.field(owner),
        )

    async def statistics(self, *, owner: OwnerId | None = None) -> LockStatistics:
        """A snapshot of the lock for debugging: holder, hold count, lease, local waiters.

        Args:
            owner: as in [`lock`][syncprims.asyncio.RLock.lock].

        Returns:
            A [`LockStatistics`][syncprims.LockStatistics] for the current task (three reads,
            not atomic together).

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.statistics(owner_of(owner))

    async def info(self) -> LockInfo:
        """What the lock keeps in Redis now, whoever holds it: for health checks, admin pages
        and tests (``syncprims inspect NAME`` prints the same).

        Reads (never writes) the holders, the TTL, the waiters Redis records, a fenced
        lock's token and the channels' subscribers, each holder and waiter with its process
        (docs/locks.md, "Who holds it"). A read-write lock's sides both show the whole lock.

        Returns:
            A [`LockInfo`][syncprims.LockInfo] (a few reads, not atomic together: it may be
            stale as soon as it is returned).

        Raises:
            TransportError: Redis could not be reached (after retries).
            ServerReplyError: Redis refused to read the lock's keys (an ACL). A refused
                subscriber count or client record is reported as unknown (``None``)
                instead.
        """
        return await self._core.info()


@final
class FairLock(RLock):
    """A reentrant lock that waiters get in the order they asked for it (FIFO).

    Choose it over [`RLock`][syncprims.asyncio.RLock] when starvation matters: under contention an
    ``RLock`` goes to whoever asks first after a release (often the releaser itself), a ``FairLock``
    to the waiter that has waited longest. A dead waiter holds the queue up for at most its wait
    time, or ``Config.fair_lock_wait_timeout`` (300 s) when it waits without a limit.

    Same methods as [`RLock`][syncprims.asyncio.RLock]; where they differ from Redisson's:
    docs/fair-lock.md, "Decisions".

    Algorithm: Redisson ``RedissonFairLock`` (list ``redisson_lock_queue:{name}``, zset
    ``redisson_lock_timeout:{name}``, channel ``redisson_lock__channel:{name}:<owner>``).
    """

    __slots__ = ()


@final
class NonReentrantLock(RLock):
    """A lock that its owner cannot acquire again while holding it (not reentrant).

    Choose it over [`RLock`][syncprims.asyncio.RLock] when a second acquire by the same
    task is a bug you want to hear about: ``lock()``, ``try_lock()`` and ``acquire()`` by an
    owner that holds it raise [`LockReentryError`][syncprims.LockReentryError] at once (the
    hold it has is kept), and one ``unlock()`` releases it.

    Same methods and keys as [`RLock`][syncprims.asyncio.RLock]; ``get_hold_count()`` is 0
    or 1 (docs/locks.md, "Non-reentrant locks").

    Example:
        ```python
        lock = client.get_non_reentrant_lock("reports:nightly")
        async with lock:
            ...
            await lock.lock()        # LockReentryError: the task holds it already
        ```

    Algorithm: Redisson 4.4 ``RedissonNonReentrantLock`` (the RLock's hash; the acquire
    script answers the error ``NON_REENTRANT_REACQUIRE`` to an owner that holds the lock).
    """

    __slots__ = ()


@final
class NonReentrantFairLock(RLock):
    """A first-come, first-served lock that its owner cannot acquire again while holding it.

    [`FairLock`][syncprims.asyncio.FairLock]'s queue and deadlines, with
    [`NonReentrantLock`][syncprims.asyncio.NonReentrantLock]'s refusal: an acquire by an
    owner that holds it raises [`LockReentryError`][syncprims.LockReentryError] at once
    (it neither counts a hold nor joins the queue). Same keys as a ``FairLock`` of the name.

    Algorithm: Redisson 4.4 ``RedissonNonReentrantFairLock`` (``RedissonFairLock``'s layout;
    the acquire script answers ``NON_REENTRANT_REACQUIRE`` to an owner that holds the lock).
    """

    __slots__ = ()


@final
class SpinLock(RLock):
    """A reentrant lock whose waiters re-try with a growing pause instead of using pub/sub.

    Choose it over [`RLock`][syncprims.asyncio.RLock] when waits are many and short (the lock
    is held for milliseconds), in a cluster, or where pub/sub is scarce; prefer an ``RLock``
    for long waits (a waiter notices a release up to ``max_delay`` late): docs/locks.md,
    "Spin locks".

    Same methods and Redis layout as [`RLock`][syncprims.asyncio.RLock] (a spin lock and an
    ``RLock`` of one name exclude each other); the pauses are set with
    [`get_spin_lock`][syncprims.asyncio.Client.get_spin_lock].

    Example:
        ```python
        lock = client.get_spin_lock("counters:7")
        async with lock:
            ...                      # a short critical section
        ```

    Algorithm: Redisson ``RedissonSpinLock`` with ``LockOptions.ExponentialBackOff``.
    """

    __slots__ = ()
