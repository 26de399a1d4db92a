"""``RObject`` and ``RExpirable``: what every syncprims object can do."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from syncprims._core.election import ElectionCore
from syncprims._core.objects import ExpirableCore, ObjectCore
from syncprims._protocol.timing import Duration

__all__ = ["RExpirable", "RObject"]


class _Handle:
    """A named handle on a core object, shared by ``RObject`` and ``LeaderElection``."""

    __slots__ = ("_core",)

    def __init__(self, core: ObjectCore | ElectionCore) -> None:
        self._core = core

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._core.name!r}>"

    @property
    def name(self) -> str:
        """The name it was made with (an ``RObject``'s main Redis key)."""
        return self._core.name


class RObject(_Handle):
    """The base of every syncprims object: a name and the keys behind it (Redisson ``RObject``).

    Objects are cheap handles: create them with the client's ``get_*`` methods, as many as you
    like; they hold no connection and no state in Redis until used.
    """

    __slots__ = ()

    _core: ObjectCore

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

    async def add_listener(
        self,
        *,
        on_expired: Callable[[str], None] | None = None,
        on_deleted: Callable[[str], None] | None = None,
        configure: bool = True,
    ) -> int:
        """Be told when the object's key expires or is deleted, by any client (Redisson
        ``RObservable.addListener`` with an ``ExpiredObjectListener`` /
        ``DeletedObjectListener``).

        Built on Redis keyspace notifications for the main key (``name``) only: its
        ``expired`` and ``del`` events (``DEL``, ``UNLINK``; a lock's last ``unlock()`` and
        ``force_unlock()`` delete it); clusters, ACLs and missed events: docs/locks.md,
        "Listening for expiry and deletion". Each callback is called as ``callback(name)``,
        one at a time, in the order of the events. It runs on the client's event loop: keep
        it short (the watchdog runs there too). One that raises is logged (logger
        ``syncprims.listeners``).

        Args:
            on_expired: called when Redis removes the key because its time to live ran out.
            on_deleted: called when the key is deleted (``DEL``, ``UNLINK``).
            configure: ``True`` (default): first make sure the server publishes the events,
                adding the flags ``K``, ``g`` and ``x`` to ``notify-keyspace-events`` with
                ``CONFIG SET`` on the key's node (keeping the flags already set).
                ``False``: change nothing, for a server that refuses ``CONFIG`` and whose
                operator enabled them (``Kgx`` or ``KA``).

        Returns:
            The listener's id (an ``int``), for ``remove_listener``.

        Raises:
            TypeError: neither callback given, one not callable, or ``configure`` not a
                ``bool``.
            ServerReplyError: Redis refused ``CONFIG GET`` / ``CONFIG SET`` (``code`` is
                Redis's, e.g. ``"NOPERM"``) or the subscription (an ACL without the channel).
            RedisTimeoutError: Redis did not confirm the subscription within
                ``Config.subscription_timeout``.
            TransportError: Redis could not be reached (after retries).
            ClientClosedError: the client is shut down.

        Example:
            ```python
            lock = client.get_lock("orders:42")
            listener = await lock.add_listener(on_deleted=lambda name: print(name, "is free"))
            ...
            lock.remove_listener(listener)
            ```
        """
        return await self._core.add_listener(on_expired, on_deleted, configure=configure)

    def remove_listener(self, listener_id: int) -> bool:
        """Remove a listener added by ``add_listener`` (Redisson
        ``RObservable.removeListener``); no callback of it runs after this returns, except
        one already running. Makes no Redis call and never blocks: the subscription is
        dropped in the background when no listener of the object is left.

        Args:
            listener_id: the id ``add_listener`` returned.

        Returns:
            ``True`` if the listener was registered on this object (``False``: unknown, already
            removed, or another object's).

        Raises:
            TypeError: ``listener_id`` is not an ``int``.
        """
        return self._core.remove_listener(listener_id)


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
