"""What ``statistics()`` returns: frozen snapshots of a primitive, for debugging and metrics.

A snapshot is read from Redis (a few reads, not atomic together) plus this client's own
book-keeping (its waiters); it may be stale as soon as it is returned. Pure values: no I/O.
"""

from __future__ import annotations

import attrs

__all__ = ["LatchStatistics", "LockStatistics", "SemaphoreStatistics"]


@attrs.frozen
class LockStatistics:
    """A lock's state as seen by the caller (`RLock.statistics()` and every other lock kind).

    Attributes:
        name: the lock's name.
        kind: ``"lock"``, ``"fair lock"``, ``"fenced lock"``, ``"spin lock"``, ``"read lock"``
            or ``"write lock"``.
        locked: whether any owner holds it.
        owner: the caller's owner field (``<client id>:<thread or task id>``).
        hold_count: how many times the caller holds it (0: not held by the caller).
        lease_remaining: seconds until the lock's key expires (``None``: not held, or no TTL).
        waiters: callers of this client waiting for it now.
    """

    name: str
    kind: str
    locked: bool
    owner: str
    hold_count: int
    lease_remaining: float | None
    waiters: int


@attrs.frozen
class SemaphoreStatistics:
    """A semaphore's state (`Semaphore.statistics()`, `PermitExpirableSemaphore.statistics()`).

    Attributes:
        name: the semaphore's name.
        available_permits: permits that can be acquired now.
        acquired_permits: permits held now (``None`` for a plain semaphore: its permits belong
            to nobody, so nothing counts them).
        waiters: callers of this client waiting for permits now.
    """

    name: str
    available_permits: int
    acquired_permits: int | None
    waiters: int


@attrs.frozen
class LatchStatistics:
    """A count-down latch's state (`CountDownLatch.statistics()`).

    Attributes:
        name: the latch's name.
        count: the count left (0: open, or the latch does not exist).
        waiters: callers of this client waiting for it to open now.
    """

    name: str
    count: int
    waiters: int
