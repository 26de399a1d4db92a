"""The pub/sub registry: one subscriber connection per client (per node in a cluster),
subscriptions shared per channel and counted by reference.

docs/design.md, "Waking waiters" (Redisson's ``PublishSubscribe`` / ``LockPubSub``,
redisson-spec.md 1.6): a refused ``SUBSCRIBE`` (``NOPERM``) makes that subscription's
waiters raise ``ServerReplyError``; a dropped connection is opened again after a back-off
of 50 ms .. 2 s.

The bookkeeping is written once (:class:`SubscriptionTable`: references, confirmations,
refusals, lingering, dispatch); two drivers move the bytes, each on a connection of its own
made with the settings of the client's pool (``compat.own_connection``), closed at shutdown:

* :class:`ThreadSubscriber` (sync face): a reader thread that wakes waiting threads
  directly (docs/design.md, "Sync over async, without a thread hop").
* :class:`TaskSubscriber` (asyncio face): a reader task on the client's event loop; it
  resolves the waiting tasks' futures on that same loop.

Also: an idle subscription keeps no wake-up permits (a message nobody waited for never
causes a spurious retry); a subscription is ready only when Redis confirmed *this*
``SUBSCRIBE``, and writes to the connection are serialised with the table's state, so the
wire's order matches it; an idle connection is PINGed, a silent one renewed; replies are
read as bytes with ``push_request``, so ``decode_responses`` and RESP3 work the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from syncprims._protocol.contracts import WakePolicy
from syncprims._services.parking import Latch, Signal
from syncprims._transport.aio.replies import read_in_callback
from syncprims._transport.compat import ERRORS, aread, own_connection, read_message, readable
from syncprims._transport.errors import error_code
from syncprims.errors import ClientClosedError, ServerReplyError

__all__ = [
    "ClusterSubscribers",
    "Subscription",
    "SubscriptionTable",
    "TaskSubscriber",
    "ThreadSubscriber",
]

log = logging.getLogger("syncprims.pubsub")

PING_INTERVAL = 5.0
"""Seconds without traffic after which the subscriber connection is PINGed."""
LINGER = 1.0
"""Seconds an unused subscription stays subscribed, in case it is needed again."""
MAX_IDLE = 1000
"""Most unused subscriptions kept; beyond this the oldest are dropped at the next sweep."""
POLL = 0.25
"""Seconds between housekeeping rounds (sweeps, PINGs)."""


class Subscription:
    """The local entry of one channel: its waiters' latch and the confirmation signal.

    Its wake-up methods are :class:`~syncprims._protocol.contracts.Wakeable`'s (the channel's
    rule calls them with the table's mutex held: :meth:`SubscriptionTable.dispatch`).
    """

    __slots__ = (
        "channel",
        "error",
        "idle_since",
        "latch",
        "note",
        "policy",
        "ready",
        "refcount",
        "table",
    )

    def __init__(self, channel: str, policy: WakePolicy, table: SubscriptionTable) -> None:
        self.table = table
        self.channel = channel
        self.policy = policy
        self.refcount = 0
        self.idle_since = 0.0
        self.latch = Latch()
        self.ready = Signal()
        self.error: ServerReplyError | None = None  # Redis refused the SUBSCRIBE
        self.note: bytes | None = None  # left by a message on a paired channel (tell())

    def raise_if_refused(self) -> None:
        """Raise the ``ServerReplyError`` with which Redis refused this subscription, if any."""
        if self.error is not None:
            raise self.error

    def wake(self, n: int) -> None:
        users = self.refcount
        if n > 0 and users > 0:
            self.latch.release(min(n, users), cap=users)

    def wake_all(self) -> None:
        n = self.refcount
        if n > 0:
            self.latch.release(n, cap=n)

    def tell(self, channel: str, note: bytes) -> None:
        other = self.table.entries.get(channel)
        if other is not None:
            other.note = note

    def take_note(self) -> bytes | None:
        note, self.note = self.note, None
        return note

    def wake_paired(self, channel: str) -> None:
        other = self.table.entries.get(channel)
        if other is not None:
            other.wake_all()


class SubscriptionTable:
    """The subscriptions of one subscriber connection: what both drivers share.

    Every method that changes state is called with :attr:`mutex` held by the driver, which
    writes the matching command before releasing it (``*_locked`` methods), or takes it itself.
    """

    def __init__(self, *, sharded: bool) -> None:
        self.sharded = sharded
        self.subscribe, self.unsubscribe = (
            ("SSUBSCRIBE", "SUNSUBSCRIBE") if sharded else ("SUBSCRIBE", "UNSUBSCRIBE")
        )
        self.mutex = threading.Lock()
        self.entries: dict[str, Subscription] = {}
        self._pending: dict[str, int] = {}  # channel -> SUBSCRIBE commands not yet confirmed
        self._order: deque[str] = deque()  # those SUBSCRIBEs' channels, in the order sent
        self._closed = False

    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- request side ---------------------------------------------------------------------

    def take_locked(self, channel: str, policy: WakePolicy) -> tuple[Subscription, bool]:
        """A reference on ``channel``; ``True`` when it is new (SUBSCRIBE it now).

        Raises:
            ClientClosedError: the table is closed.
        """
        if self._closed:
            raise ClientClosedError("the client is shut down")
        sub = self.entries.get(channel)
        new = sub is None
        if sub is None:
            sub = self.entries[channel] = Subscription(channel, policy, self)
        sub.refcount += 1
        return sub, new

    def release(self, sub: Subscription) -> None:
        """Drop a reference; the subscription lingers a moment before it is dropped."""
        with self.mutex:
            sub.refcount -= 1
            if sub.refcount <= 0:
                sub.refcount = 0
                sub.idle_since = time.monotonic()
                sub.latch.drain()

    def confirmed(self, channel: str) -> bool:
        """Whether ``channel`` is subscribed and Redis confirmed it (not refused) now."""
        sub = self.entries.get(channel)
        return sub is not None and sub.ready.is_set and sub.error is None

    # -- driver side ----------------------------------------------------------------------

    def commands_locked(self, command: str, channels: list[str]) -> list[tuple[str, ...]]:
        """The commands that write ``command`` (:attr:`subscribe` or :attr:`unsubscribe`)
        for ``channels``: one SUBSCRIBE each (a refusal names its channel), recorded as
        about to be written in this order, or one UNSUBSCRIBE for them all."""
        if command != self.subscribe:
            return [(command, *channels)] if channels else []
        for channel in channels:
            self._pending[channel] = self._pending.get(channel, 0) + 1
            self._order.append(channel)
        return [(command, channel) for channel in channels]

    def expired_locked(self, now: float) -> list[str]:
        """Drop the subscriptions unused for ``LINGER`` seconds (and the oldest beyond
        ``MAX_IDLE``); returns their channels, to UNSUBSCRIBE now."""
        idle = [s for s in self.entries.values() if s.refcount == 0]
        gone = [s for s in idle if now - s.idle_since >= LINGER]
        excess = len(self.entries) - len(gone) - MAX_IDLE
        if excess > 0:
            rest = sorted((s for s in idle if s not in gone), key=lambda s: s.idle_since)
            gone += rest[:excess]
        for sub in gone:
            del self.entries[sub.channel]
            self._pending.pop(sub.channel, None)
        return [sub.channel for sub in gone]

    def reconnected_locked(self) -> list[str]:
        """A new connection: forget what the old one had pending; every channel to
        subscribe again (the caller records them with :meth:`commands_locked`)."""
        self._pending.clear()
        self._order.clear()
        return list(self.entries)

    def _answered_locked(self, channel: str) -> bool:
        left = self._pending.get(channel, 0) - 1
        if left > 0:
            self._pending[channel] = left
            return False
        self._pending.pop(channel, None)
        return True

    def dispatch(self, reply: Any) -> None:
        """Handle one reply read from the connection (messages and confirmations)."""
        if not isinstance(reply, list) or not reply:
            return
        kind = reply[0]
        if kind in (b"message", b"smessage"):
            with self.mutex:
                sub = self.entries.get(reply[1].decode())
                if sub is not None:
                    sub.policy(sub, reply[2])
        elif kind in (b"subscribe", b"ssubscribe"):
            self._on_confirm(reply[1].decode())
        elif kind == b"sunsubscribe":
            self._on_shard_moved(reply[1].decode())

    def _on_confirm(self, channel: str) -> None:
        with self.mutex:
            if channel in self._order:
                self._order.remove(channel)  # the oldest first: replies come in order
            if not self._answered_locked(channel):
                return
            sub = self.entries.get(channel)
        if sub is not None:
            sub.ready.set()

    def _on_shard_moved(self, channel: str) -> None:
        """A SUNSUBSCRIBE we did not ask for: the channel's slot left this node.

        The entry is dropped (new waits subscribe on the slot's new node) and its waiters are
        woken to re-check; they wait out their current wait without messages, bounded as
        always by the TTL and the re-check interval.
        """
        with self.mutex:
            sub = self.entries.get(channel)
            if sub is None or channel in self._pending:
                return
            del self.entries[channel]
        sub.wake_all()

    def refused(self, error: Exception) -> bool:
        """An error reply: Redis refused the oldest unconfirmed SUBSCRIBE (``False``: there
        is none, so the error is not a refusal and the connection is renewed)."""
        with self.mutex:
            if not self._order:
                return False
            channel = self._order.popleft()
            self._answered_locked(channel)
            sub = self.entries.pop(channel, None)  # the next user subscribes (and is refused) anew
        if isinstance(error, ERRORS.ask + ERRORS.try_again + ERRORS.cluster_down):
            # A cluster slot on the move: not a refusal. As for an unrequested SUNSUBSCRIBE,
            # the waiters re-check and a new wait subscribes on the slot's new node.
            log.info("pub/sub: %r is served elsewhere now (%s)", channel, error)
            if sub is not None:
                sub.wake_all()
            return True
        log.warning("pub/sub: Redis refused to subscribe to %r: %s", channel, error)
        if sub is not None:
            sub.error = ServerReplyError(
                f"Redis refused to subscribe to {channel!r} (check the user's ACL channel "
                f"patterns): {error}",
                code=error_code(error),
            )
            sub.error.__cause__ = error
            sub.ready.set()
            sub.wake_all()
        return True

    def wake_everyone(self) -> None:
        """Wake every waiter (after a reconnection: messages may have been lost)."""
        with self.mutex:
            subs = list(self.entries.values())
        for sub in subs:
            sub.wake_all()

    def close(self) -> None:
        """Fail pending subscriptions and wake every waiter; later takes raise."""
        with self.mutex:
            self._closed = True
            subs = list(self.entries.values())
        error = ClientClosedError("the client is shut down")
        for sub in subs:
            sub.ready.set(error)
            sub.wake_all()


class Subscriber:
    """What both faces' drivers share: a server's table of subscriptions and the one
    connection (made with the pool's settings) that keeps them subscribed.

    Args:
        pool: the redis-py pool whose settings the subscriber connection is made with.
        address: the server, for messages.
        timeout: seconds to wait for a PING reply before renewing the connection.
        name: the reader's name prefix.
        sharded: SSUBSCRIBE (a Redis 7 cluster's sharded channels) instead of SUBSCRIBE.
    """

    def __init__(
        self, pool: Any, *, address: str, timeout: float, name: str, sharded: bool = False
    ) -> None:
        self._pool = pool
        self.address = address
        self._timeout = timeout
        self._name = name
        self.table = SubscriptionTable(sharded=sharded)
        self._conn: Any = None  # connected and in use by the reader
        self._held: Any = None  # its own, with the pool's settings (closed at close)
        self._was_connected = False
        self.reconnects = 0

    def _connected(self) -> None:
        """The reader's connection is up; after the first, messages may have been lost, so
        every waiter re-checks."""
        if self._was_connected:
            self.reconnects += 1
            log.info("pub/sub: reconnected to %s; waking every waiter", self.address)
            self.table.wake_everyone()
        self._was_connected = True

    def _failed(self, error: Exception, delay: float) -> None:
        """Log a failed connection, retried in ``delay`` seconds: once per outage at
        WARNING, the retries that follow at DEBUG."""
        log.log(
            logging.WARNING if delay == 0.05 else logging.DEBUG,
            "pub/sub connection to %s failed (%s); retrying in %.2f s",
            self.address,
            error,
            delay,
        )

    def forget(self) -> None:
        """After ``os.fork()``, in the child: the connection and the reader are the
        parent's."""
        self.table = SubscriptionTable(sharded=self.table.sharded)
        self._conn = self._held = None
        self._was_connected = False


class ThreadSubscriber(Subscriber):
    """The sync face's driver: a reader thread on a connection of a blocking redis-py pool.

    Args: as :class:`Subscriber`.
    """

    _thread: threading.Thread | None = None  # the reader, started by the first acquire

    async def acquire(self, channel: str, policy: WakePolicy) -> Subscription:
        """Take a reference on ``channel``'s subscription, subscribing if needed (never
        suspends). Wait on ``sub.ready`` before relying on messages.

        Raises:
            ClientClosedError: the client is shut down.
        """
        table = self.table
        with table.mutex:
            sub, new = table.take_locked(channel, policy)
            if new:
                self._write_locked(table.subscribe, [channel])
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"{self._name}-pubsub", daemon=True
                )
                self._thread.start()
        return sub

    def _write_locked(self, command: str, channels: list[str]) -> None:
        conn = self._conn
        if conn is None:
            return  # (re)connecting: the reader subscribes every registered channel
        try:
            for args in self.table.commands_locked(command, channels):
                conn.send_command(*args, check_health=False)
        except Exception as error:  # the reader notices the broken connection and reconnects
            log.debug("pub/sub: %s failed: %r", command, error)

    # -- reader thread ------------------------------------------------------------------------

    def _connect(self) -> Any:
        conn = self._held
        if conn is None:
            conn = self._held = own_connection(self._pool)
        conn.connect()
        table = self.table
        with table.mutex:
            if table.is_closed():
                return None
            self._conn = conn
            channels = table.reconnected_locked()
            if channels:
                self._write_locked(table.subscribe, channels)
        return conn

    def _run(self) -> None:
        delay = 0.05
        while not self.table.is_closed():
            conn = None
            try:
                conn = self._connect()
                if conn is None:
                    return
                self._connected()
                delay = 0.05
                self._serve(conn)
            except Exception as error:
                if self.table.is_closed():
                    return
                self._failed(error, delay)
                self._drop_connection(conn)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _serve(self, conn: Any) -> None:
        table = self.table
        last_traffic = time.monotonic()
        ping_sent = 0.0
        while not table.is_closed():
            if readable(conn, POLL):
                try:
                    reply = read_message(conn)
                except ERRORS.response as error:
                    if not table.refused(error):
                        raise
                    continue
                table.dispatch(reply)
                last_traffic = time.monotonic()
                ping_sent = 0.0
                continue
            now = time.monotonic()
            with table.mutex:
                self._write_locked(table.unsubscribe, table.expired_locked(now))
            if ping_sent and now - ping_sent > self._timeout:
                raise TimeoutError(f"no PING reply within {self._timeout:g} s")
            if not ping_sent and now - last_traffic > PING_INTERVAL:
                with table.mutex:
                    conn.send_command("PING", check_health=False)
                ping_sent = now

    def _drop_connection(self, conn: Any) -> None:
        with self.table.mutex:
            if self._conn is conn:
                self._conn = None
        if conn is not None:
            try:
                conn.disconnect()
            except Exception as error:  # already broken
                log.debug("pub/sub: disconnect failed: %r", error)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Fail pending subscriptions, wake every waiter, give the connection back."""
        table = self.table
        table.close()
        with table.mutex:
            conn, self._conn = self._conn, None
            thread = self._thread
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.disconnect()  # shuts the socket down: the reader's recv returns
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        held, self._held = self._held, None
        if held is not None:
            with contextlib.suppress(Exception):
                held.disconnect()

    def forget(self) -> None:
        super().forget()
        self._thread = None


class TaskSubscriber(Subscriber):
    """The asyncio face's driver: a task on the client's loop keeps a connection of a
    ``redis.asyncio`` pool subscribed (its messages parsed in the loop's protocol callback
    where redis-py's parser allows it, ``aio.replies.read_in_callback``, else read by it).

    Args: as :class:`Subscriber`.
    """

    def __init__(
        self, pool: Any, *, address: str, timeout: float, name: str, sharded: bool = False
    ) -> None:
        super().__init__(pool, address=address, timeout=timeout, name=name, sharded=sharded)
        self._write_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._last_traffic = 0.0
        self._ping_sent = 0.0
        self._lost: asyncio.Future[None] | None = None  # None: the task reads (_connect)
        self._background: set[asyncio.Task[Any]] = set()

    async def acquire(self, channel: str, policy: WakePolicy) -> Subscription:
        """As :meth:`ThreadSubscriber.acquire`, on the running loop."""
        table = self.table
        async with self._write_lock:
            with table.mutex:
                sub, new = table.take_locked(channel, policy)
            if new:
                try:
                    await self._write(table.subscribe, [channel])
                except BaseException:  # cancelled while writing: give the reference back
                    table.release(sub)
                    raise
        if self._reader is None:
            loop = asyncio.get_running_loop()
            self._reader = loop.create_task(self._run(), name=f"{self._name}-pubsub")
            self._keeper = loop.create_task(self._housekeeping(), name=f"{self._name}-pubsub-ping")
        return sub

    async def _write(self, command: str, channels: list[str]) -> None:
        """Write under the write lock (held by the caller)."""
        conn = self._conn
        if conn is None or not channels:
            return  # (re)connecting: the reader subscribes every registered channel
        with self.table.mutex:
            commands = self.table.commands_locked(command, channels)
        try:
            for args in commands:
                await conn.send_command(*args, check_health=False)
        except ERRORS.failures as error:  # the reader notices the broken connection and reconnects
            log.debug("pub/sub: %s failed: %r", command, error)

    async def _connect(self) -> Any:
        conn = self._held
        if conn is None:
            conn = self._held = own_connection(self._pool)
        self._lost = None
        if not conn.is_connected:
            await conn.connect()
            # One loop turn less per wake-up than the task's reads (before any SUBSCRIBE).
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            on_lost = functools.partial(_end, lost)
            if read_in_callback(conn, self._on_reply, on_lost, self._spawn, _MESSAGES):
                self._lost = lost
        table = self.table
        async with self._write_lock:
            if table.is_closed():
                return None
            self._conn = conn
            with table.mutex:
                channels = table.reconnected_locked()
            await self._write(table.subscribe, channels)
        return conn

    async def _run(self) -> None:
        delay = 0.05
        table = self.table
        while not table.is_closed():
            conn = None
            try:
                conn = await self._connect()
                if conn is None:
                    return
                self._connected()
                delay = 0.05
                self._last_traffic = time.monotonic()
                self._ping_sent = 0.0
                if self._lost is not None:
                    await self._lost  # raises how the connection ended
                while not table.is_closed():
                    try:
                        reply = await aread(conn)
                    except ERRORS.response as error:
                        reply = error
                    self._on_reply(reply)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if table.is_closed():
                    return
                self._failed(error, delay)
                await self._drop_connection(conn)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _on_reply(self, reply: Any) -> None:
        """One reply or message (read by the task, or by the loop's callback: ``_connect``).
        Raises an error reply no subscription explains: the connection is then opened
        again."""
        if isinstance(reply, ERRORS.response):
            if not self.table.refused(reply):
                raise reply
            return
        self.table.dispatch(reply)
        self._last_traffic = time.monotonic()
        self._ping_sent = 0.0

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _housekeeping(self) -> None:
        """Sweep lingering subscriptions and PING an idle connection, every ``POLL`` s."""
        table = self.table
        while not table.is_closed():
            await asyncio.sleep(POLL)
            conn = self._conn
            if conn is None:
                continue
            now = time.monotonic()
            async with self._write_lock:
                with table.mutex:
                    gone = table.expired_locked(now)
                await self._write(table.unsubscribe, gone)
                if conn is not self._conn or not conn.is_connected:
                    continue  # dropped meanwhile: a command would connect it again, unread
                if self._ping_sent and now - self._ping_sent > self._timeout:
                    log.info("pub/sub: no PING reply within %g s; reconnecting", self._timeout)
                    await self._drop_connection(conn)  # the reader's read fails and reconnects
                elif not self._ping_sent and now - self._last_traffic > PING_INTERVAL:
                    with contextlib.suppress(*ERRORS.failures):
                        await conn.send_command("PING", check_health=False)
                    self._ping_sent = now

    async def _drop_connection(self, conn: Any) -> None:
        if self._conn is conn:
            self._conn = None
            if self._lost is not None:  # read in the callback: _run reconnects now
                _end(self._lost, ConnectionError("the connection was dropped"))
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)

    async def aclose(self) -> None:
        """Fail pending subscriptions, wake every waiter, stop the tasks, give the
        connection back."""
        self.table.close()
        tasks = [t for t in (self._reader, self._keeper, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        self._conn = None
        held, self._held = self._held, None
        if held is not None:
            with contextlib.suppress(Exception):
                await held.disconnect()

    def forget(self) -> None:
        super().forget()
        self._write_lock = asyncio.Lock()
        self._reader = self._keeper = None


D = TypeVar("D", bound=Subscriber)


class ClusterSubscribers(Generic[D]):
    """Pub/sub for a cluster: one subscriber per node and mode, each channel on its node.

    A channel whose slot is its object's key slot uses sharded pub/sub (Redis 7+:
    SSUBSCRIBE on the node that owns the slot; the scripts SPUBLISH there). A channel in
    another slot (Redisson's latch channel of a tagged name) uses classic pub/sub, which the
    cluster broadcasts to every node.

    Args:
        node_of: the node that owns a key's slot.
        sharded: whether a channel (of the object at a key) is sharded.
        make: a driver for a node and mode.
    """

    def __init__(
        self,
        node_of: Callable[[str], tuple[str, int]],
        sharded: Callable[[str, str], bool],
        make: Callable[[tuple[str, int], bool], D],
    ) -> None:
        self._node_of = node_of
        self._sharded = sharded
        self._make = make
        self._mutex = threading.Lock()
        self._drivers: dict[tuple[tuple[str, int], bool], D] = {}
        self._closed = False

    def driver(self, channel: str, route: str | None) -> D:
        """The driver that serves ``channel`` (``route``: its object's key)."""
        key = route if route is not None else channel
        sharded = self._sharded(channel, key)
        node = self._node_of(channel if sharded else key)
        with self._mutex:
            if self._closed:
                raise ClientClosedError("the client is shut down")
            driver = self._drivers.get((node, sharded))
            if driver is None:
                driver = self._drivers[(node, sharded)] = self._make(node, sharded)
        return driver

    def drivers(self) -> list[D]:
        """Every driver made so far."""
        with self._mutex:
            return list(self._drivers.values())

    def stop(self) -> list[D]:
        """Make no new driver (shutdown); returns every driver made so far, to close."""
        with self._mutex:
            self._closed = True
            return list(self._drivers.values())

    def forget(self) -> None:
        """After ``os.fork()``, in the child: the parent's drivers are not ours."""
        with self._mutex:
            self._drivers = {}


# A subscriber's RESP3 push frames: its replies, not the library's notifications.
_MESSAGES = frozenset(b"message smessage subscribe ssubscribe unsubscribe sunsubscribe".split())


def _end(lost: asyncio.Future[None], error: BaseException) -> None:
    """The connection whose messages the event loop's callback read ended with ``error``."""
    if not lost.done():
        lost.set_exception(error)
        lost.exception()  # retrieved: no warning when the reader task is gone (closing)
