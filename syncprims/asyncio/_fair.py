"""``FairLock``: the first-come, first-served lock."""

from __future__ import annotations

from typing import final

from syncprims.asyncio._lock import RLock

__all__ = ["FairLock"]


@final
class FairLock(RLock):
    """A reentrant lock that waiters get in the order they asked for it (FIFO).

    Choose it over [`RLock`][syncprims.asyncio.RLock] when starvation matters: under contention an
    ``RLock`` goes to whoever asks first after a release (often the releaser itself), a ``FairLock``
    to the waiter that has waited longest. It costs more: a queue and a deadline set in Redis, one
    channel per waiter, and a dead waiter (a process killed while queued) holds the queue up
    for at most its slot: its wait time, or ``Config.fair_lock_wait_timeout`` (300 s) when it
    waits without a limit. Lower that setting if waiters may die.

    Same methods as [`RLock`][syncprims.asyncio.RLock]. Decisions: ``unlock()`` of a lock that no
    longer exists raises ``LockNotHeldError`` (Redisson returns success) but still wakes the next
    waiter; a waiter that times out or is cancelled leaves the queue; ``delete()`` removes the lock,
    its queue and its deadlines without waking anyone.

    Algorithm: Redisson ``RedissonFairLock`` (list ``redisson_lock_queue:{name}``, zset
    ``redisson_lock_timeout:{name}``, channel ``redisson_lock__channel:{name}:<owner>``).
    """

    __slots__ = ()
