"""``SpinLock``: a reentrant lock whose waiters poll instead of subscribing."""

from __future__ import annotations

from typing import final

from syncprims.asyncio._lock import RLock

__all__ = ["SpinLock"]


@final
class SpinLock(RLock):
    """A reentrant lock whose waiters re-try with a growing pause instead of using pub/sub.

    Choose it over [`RLock`][syncprims.asyncio.RLock] when waits are many and short (the lock
    is held for milliseconds), in a cluster, or where pub/sub is scarce: a waiter holds no
    subscription and no pub/sub connection, and a release publishes nothing, so nothing is
    lost when pub/sub is slow, and sharded channels are not needed. It costs Redis calls while
    waiting (one attempt per pause) and latency (a waiter notices a release at its next
    attempt, up to ``max_delay`` later), so prefer an ``RLock`` for long waits.

    Same methods and Redis layout as [`RLock`][syncprims.asyncio.RLock] (a spin lock and an
    ``RLock`` of one name exclude each other). The pauses are Redisson's defaults: 1 ms,
    doubling with a jitter of a few ms, at most 128 ms; set them with
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
