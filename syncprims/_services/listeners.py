"""Object listeners: one client's ``on_expired`` / ``on_deleted`` callbacks, fed by Redis
keyspace notifications (docs/locks.md, "Listening for expiry and deletion"; Redisson's
``RObservable.addListener``).

The algorithm that adds a listener is the core's (``ObjectCore.add_listener``); this module
owns the state: the registered listeners and the delivery of events to them. One channel per
object name, with one subscription reference per listener (:mod:`syncprims._services.pubsub`;
in a cluster, never sharded: ``ExecutorBase.sharded``). Callbacks run on the scheduler the
watchdog uses, never on the pub/sub reader; a listener removed before its turn is not
called. :meth:`ObjectListeners.close` (shutdown) forgets every listener: no callback runs
after it, and no listener can be added.
"""

from __future__ import annotations

import itertools
import logging
import threading

import attrs

from syncprims._protocol.contracts import ObjectCallback, Subscription, WakePolicy
from syncprims._protocol.keyspace import DELETED, EXPIRED, keyspace_channel
from syncprims._services.loop import Scheduler
from syncprims.errors import ClientClosedError

__all__ = ["ObjectListeners"]

log = logging.getLogger("syncprims.listeners")


@attrs.define(eq=False)
class _Listener:
    id: int
    name: str
    channel: str
    sub: Subscription
    on_expired: ObjectCallback | None
    on_deleted: ObjectCallback | None


class ObjectListeners:
    """The object listeners of one client. No method blocks or calls Redis.

    Args:
        scheduler: where callbacks run (the sync face's services loop, or the asyncio face's
            event loop).
        database: the client's database number (0 in a cluster), for channel names.
    """

    def __init__(self, scheduler: Scheduler, *, database: int) -> None:
        self._scheduler = scheduler
        self.database = database
        self._ids = itertools.count(1)
        self._closed = False
        self.forget()

    def forget(self) -> None:
        """The state a new registry starts with; after ``os.fork()``, in the child: the
        parent's subscriptions are not ours."""
        self._mutex = threading.Lock()
        self._listeners: dict[int, _Listener] = {}
        self._by_channel: dict[str, dict[int, _Listener]] = {}

    def channel(self, name: str) -> str:
        """The keyspace channel of the key ``name`` in the client's database."""
        return keyspace_channel(self.database, name)

    def policy(self, channel: str) -> WakePolicy:
        """The pub/sub rule of ``channel``: hand its events to the listeners."""
        return lambda _sub, message: self._on_event(channel, message)

    def register(
        self,
        name: str,
        sub: Subscription,
        on_expired: ObjectCallback | None,
        on_deleted: ObjectCallback | None,
    ) -> int:
        """Register a listener of ``name`` that holds the subscription reference ``sub``.

        Returns:
            The listener's id, unique in this client.

        Raises:
            ClientClosedError: the client is shut down.
        """
        with self._mutex:
            if self._closed:
                raise ClientClosedError(f"the client is shut down (adding a listener to {name!r})")
            listener = _Listener(next(self._ids), name, sub.channel, sub, on_expired, on_deleted)
            self._listeners[listener.id] = listener
            self._by_channel.setdefault(listener.channel, {})[listener.id] = listener
        return listener.id

    def unregister(self, listener_id: int, name: str) -> Subscription | None:
        """Remove the listener ``listener_id`` of ``name``.

        Returns:
            Its subscription reference, to give back; ``None`` when no such listener of
            ``name`` is registered (never was, already removed, or another object's).
        """
        with self._mutex:
            listener = self._listeners.get(listener_id)
            if listener is None or listener.name != name:
                return None
            del self._listeners[listener_id]
            of_channel = self._by_channel[listener.channel]
            del of_channel[listener_id]
            if not of_channel:
                del self._by_channel[listener.channel]
        return listener.sub

    def count(self) -> int:
        """How many listeners are registered."""
        with self._mutex:
            return len(self._listeners)

    def close(self) -> None:
        """Forget every listener (shutdown); later registrations raise ``ClientClosedError``.
        The subscriptions go with the pub/sub registry, closed by the executor."""
        with self._mutex:
            self._closed = True
            self._listeners.clear()
            self._by_channel.clear()

    # -- delivery -------------------------------------------------------------------------

    def _on_event(self, channel: str, event: bytes) -> None:
        """On the pub/sub reader (its table's mutex held): schedule the callbacks."""
        if event not in (DELETED, EXPIRED):
            return
        with self._mutex:
            targets = list(self._by_channel.get(channel, {}).values())
        for listener in targets:
            callback = listener.on_deleted if event == DELETED else listener.on_expired
            if callback is not None:
                self._scheduler.call_soon(self._deliver, listener, event, callback)

    def _deliver(self, listener: _Listener, event: bytes, callback: ObjectCallback) -> None:
        """On the scheduler: call ``callback``, the listener's for ``event``, unless the
        listener was removed meanwhile."""
        with self._mutex:
            if self._listeners.get(listener.id) is not listener:
                return
        try:
            callback(listener.name)
        except Exception:
            log.exception(
                "the %s listener %d of %r raised; later events are delivered as usual",
                "on_deleted" if event == DELETED else "on_expired",
                listener.id,
                listener.name,
            )
