"""``ReadWriteLock`` and its two sides, ``ReadLock`` and ``WriteLock``."""

from __future__ import annotations

from typing import final

from syncprims._core.rwlock import ReadWriteLockCore
from syncprims._protocol.info import LockInfo
from syncprims._protocol.statistics import LockStatistics
from syncprims.asyncio._lock import RLock
from syncprims.asyncio._objects import RExpirable

__all__ = ["ReadLock", "ReadWriteLock", "WriteLock"]


@final
class ReadLock(RLock):
    """The read side of a [`ReadWriteLock`][syncprims.asyncio.ReadWriteLock]: shared by any number
    of readers.

    Same methods as [`RLock`][syncprims.asyncio.RLock]. ``is_locked()`` is true while any reader
    holds it (also a writer that took read holds). Read holds taken without ``lease_time`` are
    renewed by the watchdog for this client's readers only, so readers of a crashed process expire.
    """

    __slots__ = ()


@final
class WriteLock(RLock):
    """The write side of a [`ReadWriteLock`][syncprims.asyncio.ReadWriteLock]: excludes readers and
    other writers.

    Same methods as [`RLock`][syncprims.asyncio.RLock]. Its owner may also take the read side
    (downgrade); an owner holding only read locks cannot upgrade, its write request waiting
    for its own read holds too (docs/rw-lock.md).
    """

    __slots__ = ()


@final
class ReadWriteLock(RExpirable):
    """A pair of locks on one name: many readers at once, or one writer.

    Choose it when reads dominate and may run together, while writes must run alone. It is
    Redisson's ``RReadWriteLock`` (same hash, fields, lease keys and channel). The object
    itself is an expirable handle on the shared hash; take the sides with
    [`read_lock`][syncprims.asyncio.ReadWriteLock.read_lock] and
    [`write_lock`][syncprims.asyncio.ReadWriteLock.write_lock].

    Example:
        ```python
        rw = client.get_read_write_lock("catalog")
        async with rw.read_lock():
            ...                       # with other readers
        async with rw.write_lock():
            ...                       # alone
        ```

    Writers have no preference unless asked for (``writer_preference=True``): a stream of
    overlapping readers can delay them.
    """

    __slots__ = ("_read", "_write")

    _core: ReadWriteLockCore

    def __init__(self, core: ReadWriteLockCore) -> None:
        super().__init__(core)
        self._read = ReadLock(core.read_side)
        self._write = WriteLock(core.write_side)

    def read_lock(self) -> ReadLock:
        """The read side (the same object on every call)."""
        return self._read

    def write_lock(self) -> WriteLock:
        """The write side (the same object on every call)."""
        return self._write

    async def statistics(self) -> tuple[LockStatistics, LockStatistics]:
        """Snapshots of both sides for the current task: ``(read side, write side)``.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return (await self._read.statistics(), await self._write.statistics())

    async def info(self) -> LockInfo:
        """What the lock keeps in Redis now: its mode, each reader (with its longest lease)
        and the writer, the TTL, the waiting writers (``writer_preference=True``) and the
        subscribers of its channel; the same as either side's
        [`info`][syncprims.asyncio.RLock.info].

        Returns:
            A [`LockInfo`][syncprims.LockInfo] (a few reads, not atomic together).

        Raises:
            TransportError: Redis could not be reached (after retries).
            ServerReplyError: Redis refused to read the lock's keys (an ACL).
        """
        return await self._core.info()
