"""``NonReentrantLock`` and ``NonReentrantFairLock``: locks an owner cannot take twice."""

from __future__ import annotations

from typing import final

from syncprims.asyncio._lock import RLock

__all__ = ["NonReentrantFairLock", "NonReentrantLock"]


@final
class NonReentrantLock(RLock):
    """A lock that its owner cannot acquire again while holding it (not reentrant).

    Choose it over [`RLock`][syncprims.asyncio.RLock] when a second acquire by the same
    task is a bug you want to hear about (the default semantics of redis-py's ``Lock`` and
    python-redis-lock, and of ``asyncio.Lock``): ``lock()``, ``try_lock()`` and
    ``acquire()`` by an owner that holds it raise
    [`LockReentryError`][syncprims.LockReentryError] at once, instead of counting another
    hold (an ``asyncio.Lock`` would deadlock). The hold it has is kept. Other owners wait or
    fail as for an ``RLock``, and one ``unlock()`` releases it.

    Same methods as [`RLock`][syncprims.asyncio.RLock]; ``get_hold_count()`` is 0 or 1.
    Same keys as an ``RLock`` of the name: Redisson's ``RLock`` and
    ``getNonReentrantLock`` clients exclude it, and it them.

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
