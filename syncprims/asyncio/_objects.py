"""``RObject`` and ``RExpirable``: what every syncprims object can do."""

from __future__ import annotations

from datetime import datetime

from syncprims._core.objects import ExpirableCore, ObjectCore
from syncprims._protocol.timing import Duration

__all__ = ["RExpirable", "RObject"]


class RObject:
    """The base of every syncprims object: a name and the keys behind it (Redisson ``RObject``).

    Objects are cheap handles: create them with the client's ``get_*`` methods, as many as you
    like; they hold no connection and no state in Redis until used.
    """

    __slots__ = ("_core",)

    def __init__(self, core: ObjectCore) -> None:
        self._core = core

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._core.name!r}>"

    @property
    def name(self) -> str:
        """The object's name: its main Redis key."""
        return self._core.name

    async def is_exists(self) -> bool:
        """Whether the object's main key exists in Redis.

        Returns:
            ``True`` if the key exists.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.is_exists()

    async def delete(self) -> bool:
        """Delete the object's keys (locks: force-unlock, waking waiters).

        Returns:
            ``True`` if anything was deleted.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.delete()

    async def unlink(self) -> bool:
        """Remove the object's keys with ``UNLINK`` (memory is freed in the background).

        Returns:
            ``True`` if anything was removed.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.unlink()

    async def touch(self) -> bool:
        """Update the last-access time of the object's keys (``TOUCH``).

        Returns:
            ``True`` if any key exists.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.touch()


class RExpirable(RObject):
    """An object whose keys can expire (Redisson ``RExpirable``)."""

    __slots__ = ()

    _core: ExpirableCore

    async def expire(self, ttl: Duration) -> bool:
        """Set a time to live on every key of the object.

        Args:
            ttl: seconds (``int``/``float``, > 0) or a ``timedelta``.

        Returns:
            ``True`` if any key got the TTL (``False``: nothing exists).

        Raises:
            TypeError, ValueError: ``ttl`` is not a positive finite duration.
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.expire(ttl)

    async def expire_at(self, when: datetime) -> bool:
        """Make every key of the object expire at ``when``.

        Args:
            when: an aware ``datetime``; a naive one is taken as local time.

        Returns:
            ``True`` if any key got the expiry.

        Raises:
            TypeError: ``when`` is not a ``datetime``.
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.expire_at(when)

    async def clear_expire(self) -> bool:
        """Remove the time to live of every key of the object.

        Returns:
            ``True`` if any key had one.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.clear_expire()

    async def remain_time_to_live(self) -> float | None:
        """The main key's remaining time to live.

        Returns:
            Seconds, or ``None`` when the key does not exist or never expires.

        Raises:
            TransportError: Redis could not be reached (after retries).
        """
        return await self._core.remain_time_to_live()
