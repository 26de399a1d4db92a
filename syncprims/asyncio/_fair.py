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
    to the waiter that has waited longest. A dead waiter holds the queue up for at most its wait
    time, or ``Config.fair_lock_wait_timeout`` (300 s) when it waits without a limit.

    Same methods as [`RLock`][syncprims.asyncio.RLock]; where they differ from Redisson's:
    docs/fair-lock.md, "Decisions".

    Algorithm: Redisson ``RedissonFairLock`` (list ``redisson_lock_queue:{name}``, zset
    ``redisson_lock_timeout:{name}``, channel ``redisson_lock__channel:{name}:<owner>``).
    """

    __slots__ = ()
