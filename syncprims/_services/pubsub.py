"""The pub/sub registry: one subscriber connection per client, subscriptions shared per channel.

Follows Redisson's ``PublishSubscribe`` / ``LockPubSub`` (redisson-spec.md 1.6): local
waiters of one channel share one subscription, counted by reference; each subscription has a
:class:`~syncprims._services.latch.Latch` that messages release according to the
subscription's wake policy. Differences, on purpose:

* A subscription is reported ready only when Redis confirmed *this* SUBSCRIBE: an
  unsubscribe/subscribe race on one channel cannot leave a waiter deaf while it believes it
  listens.
* After the connection drops, the registry reconnects (back-off 50 ms .. 2 s), subscribes
  again, and wakes every waiter so that each re-checks (messages sent meanwhile are lost).
* The connection is PINGed every few seconds; a silent connection is dropped and renewed.

Request threads call :meth:`PubSubRegistry.acquire` / :meth:`release` (non-blocking, under a
mutex); all Redis I/O runs on the services loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from syncprims._services.latch import Latch, Signal
from syncprims._services.loop import ServiceLoop
from syncprims._transport.connections import ConnectionSpec
from syncprims.errors import ClientClosedError

__all__ = ["PubSubRegistry", "Subscription", "WakePolicy", "lock_policy"]

log = logging.getLogger("syncprims.pubsub")

PING_INTERVAL = 5.0
"""Seconds between PINGs on the subscriber connection."""


class Subscription:
    """The local entry of one channel: its waiters' latch and the confirmation signal."""

    __slots__ = ("channel", "latch", "policy", "ready", "refcount")

    def __init__(self, channel: str, policy: WakePolicy) -> None:
        self.channel = channel
        self.policy = policy
        self.refcount = 0
        self.latch = Latch()
        self.ready = Signal()

    def wake_all(self) -> None:
        """Wake every local user of the channel, blocked now or about to wait."""
        n = max(self.refcount, 1)
        self.latch.release(n, cap=n)


WakePolicy = Callable[[Subscription, bytes], None]
"""How a message wakes a subscription's waiters."""


def lock_policy(sub: Subscription, message: bytes) -> None:
    """Lock channels (redisson-spec.md 1.6): ``0`` wakes one waiter, ``1`` wakes them all.

    Unlike Redisson, ``1`` also leaves a permit for each local user that is between two
    attempts, so that none of them sleeps until the TTL on a message it just missed.
    """
    if message == b"1":
        sub.wake_all()
    else:
        n = max(sub.refcount, 1)
        sub.latch.release(1, cap=n)


class PubSubRegistry:
    """Shared, reference-counted subscriptions on one subscriber connection."""

    def __init__(self, services: ServiceLoop, spec: ConnectionSpec, *, timeout: float) -> None:
        self._services = services
        self._spec = spec
        self._timeout = timeout
        self._mutex = threading.Lock()
        self._entries: dict[str, Subscription] = {}
        self._closed = False
        # Loop-only state.
        self._conn: Any = None
        self._pending: dict[str, int] = {}  # channel -> SUBSCRIBE commands not yet confirmed
        self._runner: asyncio.Task[None] | None = None
        self._reconnects = 0

    # -- request threads ------------------------------------------------------------------

    def acquire(self, channel: str, policy: WakePolicy) -> Subscription:
        """Take a reference on ``channel``'s subscription, subscribing if it is new.

        Wait on ``sub.ready`` before relying on messages.

        Raises:
            ClientClosedError: the registry is closed.
        """
        with self._mutex:
            if self._closed:
                raise ClientClosedError("the client is shut down")
            sub = self._entries.get(channel)
            new = sub is None
            if sub is None:
                sub = self._entries[channel] = Subscription(channel, policy)
            sub.refcount += 1
        if new:
            self._services.call_soon(self._want, sub)
        return sub

    def release(self, sub: Subscription) -> None:
        """Drop a reference; the last one unsubscribes."""
        with self._mutex:
            sub.refcount -= 1
            if sub.refcount > 0 or self._entries.get(sub.channel) is not sub:
                return
            del self._entries[sub.channel]
        self._services.call_soon(self._unwant, sub.channel)

    def channels(self) -> list[str]:
        """The channels with local subscribers now."""
        with self._mutex:
            return list(self._entries)

    def _stopping(self) -> bool:
        return self._closed

    @property
    def reconnects(self) -> int:
        """How many times the subscriber connection was re-established."""
        return self._reconnects

    # -- services loop ----------------------------------------------------------------------

    def _current(self, channel: str) -> Subscription | None:
        with self._mutex:
            return self._entries.get(channel)

    def _want(self, sub: Subscription) -> None:
        if self._current(sub.channel) is not sub:
            return  # released before we got to it
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run())
            return  # the runner subscribes every registered channel once connected
        if self._conn is None:
            return  # reconnecting: the runner subscribes it
        self._send_subscribe([sub.channel])

    def _unwant(self, channel: str) -> None:
        if self._current(channel) is not None or self._conn is None:
            return  # subscribed again meanwhile, or disconnected (nothing to undo)
        self._pending.pop(channel, None)
        self._services.spawn(self._send("UNSUBSCRIBE", channel))

    def _send_subscribe(self, channels: list[str]) -> None:
        for channel in channels:
            self._pending[channel] = self._pending.get(channel, 0) + 1
        self._services.spawn(self._send("SUBSCRIBE", *channels))

    async def _send(self, *command: str) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            await conn.send_command(*command, check_health=False)
        except Exception as error:  # the reader notices the broken connection and reconnects
            log.debug("pub/sub: %s failed: %r", command[0], error)

    def _on_confirm(self, channel: str) -> None:
        left = self._pending.get(channel, 0) - 1
        if left > 0:
            self._pending[channel] = left
            return
        self._pending.pop(channel, None)
        sub = self._current(channel)
        if sub is not None:
            sub.ready.set()

    def _dispatch(self, reply: Any) -> None:
        if not isinstance(reply, list) or not reply:
            return
        kind = reply[0]
        if kind in (b"message", b"smessage"):
            sub = self._current(reply[1].decode())
            if sub is not None:
                sub.policy(sub, reply[2])
        elif kind in (b"subscribe", b"ssubscribe"):
            self._on_confirm(reply[1].decode())

    async def _run(self) -> None:
        delay = 0.05
        first = True
        while not self._stopping():
            conn = self._spec.make()
            try:
                await asyncio.wait_for(conn.connect(), self._timeout + 1)
                self._conn = conn
                self._pending.clear()
                channels = self.channels()
                if channels:
                    self._send_subscribe(channels)
                if not first:
                    self._reconnects += 1
                    log.info("pub/sub: reconnected to %s; waking every waiter", self._spec.address)
                    self._wake_everyone()
                first = False
                delay = 0.05
                pinger = asyncio.get_running_loop().create_task(self._ping(conn))
                try:
                    while True:
                        reply = await conn.read_response(timeout=PING_INTERVAL + self._timeout)
                        self._dispatch(reply)
                finally:
                    pinger.cancel()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self._stopping():
                    break
                log.warning(
                    "pub/sub connection to %s failed (%s); retrying in %.2f s",
                    self._spec.address,
                    error,
                    delay,
                )
                self._conn = None
                self._wake_everyone()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            finally:
                self._conn = None
                await _disconnect(conn)

    async def _ping(self, conn: Any) -> None:
        while True:
            await asyncio.sleep(PING_INTERVAL)
            try:
                await conn.send_command("PING", check_health=False)
            except Exception:
                return

    def _wake_everyone(self) -> None:
        with self._mutex:
            subs = list(self._entries.values())
        for sub in subs:
            sub.wake_all()

    async def aclose(self) -> None:
        """Close the connection and fail every pending subscription (on the loop)."""
        with self._mutex:
            self._closed = True
            subs = list(self._entries.values())
        error = ClientClosedError("the client is shut down")
        for sub in subs:
            sub.ready.set(error)
            sub.wake_all()
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)


async def _disconnect(conn: Any) -> None:
    try:
        await conn.disconnect(nowait=True)
    except Exception as error:  # already broken
        log.debug("pub/sub: disconnect failed: %r", error)
