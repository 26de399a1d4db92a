"""The pub/sub registry: one subscriber connection per client, subscriptions shared per channel.

Follows Redisson's ``PublishSubscribe`` / ``LockPubSub`` (redisson-spec.md 1.6): local
waiters of one channel share one subscription, counted by reference; each subscription has a
:class:`~syncprims._services.latch.Latch` that messages release according to the
subscription's wake policy. Differences, on purpose (measured on this machine):

* **A dedicated reader thread** blocks on the subscriber socket (redis-py's blocking
  connection, hiredis parser) and wakes waiters directly. Delivering a message through an
  asyncio loop thread instead cost ~120 us more per wake-up, and the loop thread then
  competed for the GIL with the waiter it had just woken.
* **Subscriptions linger** for ``LINGER`` seconds after their last user leaves. Under
  contention a waiter then finds its channel already subscribed and confirmed: no
  SUBSCRIBE/UNSUBSCRIBE round trip per contended acquire. An idle subscription keeps no
  wake-up permits, so a message nobody waited for never causes a spurious retry later.
* A subscription is reported ready only when Redis confirmed *this* SUBSCRIBE; writes to the
  connection happen under the registry mutex, so the order of SUBSCRIBE/UNSUBSCRIBE on the
  wire always matches the registry's state.
* After the connection drops, the reader reconnects (back-off 50 ms .. 2 s), subscribes
  again, and wakes every waiter so that each re-checks (messages sent meanwhile are lost).
* The connection is PINGed when idle; a silent connection is dropped and renewed.
* Each channel is subscribed with its own SUBSCRIBE, so that Redis refusing one (an ACL
  without that channel: ``NOPERM``) refuses only that one. The refusal is kept on the
  subscription: its waiters raise ``ServerReplyError`` instead of the connection being
  treated as broken (which reconnected in a loop and lost the other subscriptions).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import redis.exceptions

from syncprims._services.latch import Latch, Signal
from syncprims._transport.connections import ConnectionSpec
from syncprims.errors import ClientClosedError, ServerReplyError

__all__ = [
    "ClusterPubSub",
    "PubSubRegistry",
    "Subscription",
    "WakePolicy",
    "latch_policy",
    "lock_policy",
    "semaphore_policy",
]

log = logging.getLogger("syncprims.pubsub")

PING_INTERVAL = 5.0
"""Seconds without traffic after which the subscriber connection is PINGed."""
LINGER = 1.0
"""Seconds an unused subscription stays subscribed, in case it is needed again."""
MAX_IDLE = 1000
"""Most unused subscriptions kept; beyond this the oldest are dropped at once."""
POLL = 0.25
"""Seconds between housekeeping rounds of the reader thread."""
_REDIRECTED = (
    redis.exceptions.AskError,  # and MovedError
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)
"""Error replies to SSUBSCRIBE that mean "not here, not now", not "not allowed"."""


class Subscription:
    """The local entry of one channel: its waiters' latch and the confirmation signal."""

    __slots__ = (
        "channel",
        "error",
        "idle_since",
        "latch",
        "policy",
        "ready",
        "refcount",
        "registry",
    )

    def __init__(self, channel: str, policy: WakePolicy, registry: PubSubRegistry) -> None:
        self.registry = registry
        self.channel = channel
        self.policy = policy
        self.refcount = 0
        self.idle_since = 0.0
        self.latch = Latch()
        self.ready = Signal()
        self.error: ServerReplyError | None = None  # Redis refused the SUBSCRIBE

    def raise_if_refused(self) -> None:
        """Raise the ``ServerReplyError`` with which Redis refused this subscription, if any."""
        if self.error is not None:
            raise self.error

    def wake_all(self) -> None:
        """Wake every local user of the channel, blocked now or about to wait."""
        n = self.refcount
        if n > 0:
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
    elif sub.refcount > 0:
        sub.latch.release(1, cap=sub.refcount)


def semaphore_policy(sub: Subscription, message: bytes) -> None:
    """Semaphore channels: the message is the number of permits now available (spec 1.6).

    Wakes up to that many local waiters; a zero or negative count (after ``add_permits`` of a
    negative number) wakes nobody (Redisson would fail on it).
    """
    try:
        available = int(message)
    except ValueError:
        return
    if available > 0 and sub.refcount > 0:
        sub.latch.release(min(available, sub.refcount), cap=sub.refcount)


def latch_policy(sub: Subscription, message: bytes) -> None:
    """Count-down latch channels: ``0`` opens the latch (wakes every waiter); ``1`` (a new
    count) wakes nobody."""
    if message == b"0":
        sub.wake_all()


class PubSubRegistry:
    """Shared, reference-counted subscriptions on one subscriber connection."""

    def __init__(
        self, spec: ConnectionSpec, *, timeout: float, name: str, sharded: bool = False
    ) -> None:
        self._spec = spec
        self.sharded = sharded
        self._subscribe, self._unsubscribe = (
            ("SSUBSCRIBE", "SUNSUBSCRIBE") if sharded else ("SUBSCRIBE", "UNSUBSCRIBE")
        )
        self._timeout = timeout
        self._name = name
        self._mutex = threading.Lock()  # entries, pending confirmations, writes to the socket
        self._entries: dict[str, Subscription] = {}
        self._pending: dict[str, int] = {}  # channel -> SUBSCRIBE commands not yet confirmed
        self._order: deque[str] = deque()  # those SUBSCRIBEs' channels, in the order sent
        self._conn: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.reconnects = 0

    # -- request threads ------------------------------------------------------------------

    def acquire(self, channel: str, policy: WakePolicy, route: str | None = None) -> Subscription:
        """Take a reference on ``channel``'s subscription, subscribing if needed.

        Wait on ``sub.ready`` before relying on messages.

        Raises:
            ClientClosedError: the registry is closed.
        """
        with self._mutex:
            if self._closed:
                raise ClientClosedError("the client is shut down")
            sub = self._entries.get(channel)
            if sub is None:
                sub = self._entries[channel] = Subscription(channel, policy, self)
                self._write_locked(self._subscribe, [channel])
            sub.refcount += 1
            if self._thread is None:
                self._start_locked()
        return sub

    def release(self, sub: Subscription) -> None:
        """Drop a reference; the subscription lingers a moment before it is dropped."""
        with self._mutex:
            sub.refcount -= 1
            if sub.refcount <= 0:
                sub.refcount = 0
                sub.idle_since = time.monotonic()
                sub.latch.drain()
                if len(self._entries) > MAX_IDLE:
                    self._sweep_locked(sub.idle_since, force=True)

    def channels(self) -> list[str]:
        """The channels subscribed now (in use or lingering)."""
        with self._mutex:
            return list(self._entries)

    def _write_locked(self, command: str, channels: list[str]) -> None:
        conn = self._conn
        if conn is None:
            return  # (re)connecting: the reader subscribes every registered channel
        try:
            if command == self._subscribe:
                for channel in channels:  # one command each: a refusal names its channel
                    self._pending[channel] = self._pending.get(channel, 0) + 1
                    self._order.append(channel)
                    conn.send_command(command, channel, check_health=False)
            else:
                for channel in channels:
                    self._pending.pop(channel, None)
                conn.send_command(command, *channels, check_health=False)
        except Exception as error:  # the reader notices the broken connection and reconnects
            log.debug("pub/sub: %s failed: %r", command, error)

    def _sweep_locked(self, now: float, *, force: bool = False) -> None:
        idle = [s for s in self._entries.values() if s.refcount == 0]
        if force:
            idle.sort(key=lambda s: s.idle_since)
            idle = idle[: max(len(self._entries) - MAX_IDLE, 0) or 1]
        else:
            idle = [s for s in idle if now - s.idle_since >= LINGER]
        if idle:
            for sub in idle:
                del self._entries[sub.channel]
            self._write_locked(self._unsubscribe, [s.channel for s in idle])

    def _start_locked(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{self._name}-pubsub", daemon=True)
        self._thread.start()

    # -- reader thread ----------------------------------------------------------------------

    def _answered_locked(self, channel: str) -> bool:
        """Count one answer (a confirmation or a refusal) to a SUBSCRIBE of ``channel``;
        ``True`` when none is pending any more."""
        left = self._pending.get(channel, 0) - 1
        if left > 0:
            self._pending[channel] = left
            return False
        self._pending.pop(channel, None)
        return True

    def _on_confirm(self, channel: str) -> None:
        with self._mutex:
            if channel in self._order:
                self._order.remove(channel)  # the oldest first: replies come in order
            if not self._answered_locked(channel):
                return
            sub = self._entries.get(channel)
        if sub is not None:
            sub.ready.set()

    def _dispatch(self, reply: Any) -> None:
        if not isinstance(reply, list) or not reply:
            return
        kind = reply[0]
        if kind in (b"message", b"smessage"):
            with self._mutex:
                sub = self._entries.get(reply[1].decode())
                if sub is not None:
                    sub.policy(sub, reply[2])
        elif kind in (b"subscribe", b"ssubscribe"):
            self._on_confirm(reply[1].decode())
        elif kind == b"sunsubscribe":
            self._on_shard_moved(reply[1].decode())

    def _on_shard_moved(self, channel: str) -> None:
        """A SUNSUBSCRIBE we did not ask for: the channel's slot left this node.

        The entry is dropped (new waits subscribe on the slot's new node) and its waiters are
        woken to re-check; they wait out their current wait without messages, bounded as
        always by the TTL and the re-check interval.
        """
        with self._mutex:
            sub = self._entries.get(channel)
            if sub is None or channel in self._pending:
                return
            del self._entries[channel]
        sub.wake_all()

    def _connect(self) -> Any:
        conn = self._spec.make()
        conn.connect()
        with self._mutex:
            if self._closed:
                conn.disconnect()
                return None
            self._conn = conn
            self._pending.clear()
            self._order.clear()
            channels = list(self._entries)
            if channels:
                self._write_locked(self._subscribe, channels)
        return conn

    def _run(self) -> None:
        delay = 0.05
        first = True
        while not self._closed:
            conn = None
            try:
                conn = self._connect()
                if conn is None:
                    return
                if not first:
                    self.reconnects += 1
                    log.info("pub/sub: reconnected to %s; waking every waiter", self._spec.address)
                    self._wake_everyone()
                first = False
                delay = 0.05
                self._serve(conn)
            except Exception as error:
                if self._stopping():
                    return
                with self._mutex:
                    if not self._entries:  # nobody needs this node now: stop; restart on use
                        self._thread = None
                        self._conn = None
                        return
                # Once per outage at WARNING; the retries that follow at DEBUG.
                log.log(
                    logging.WARNING if delay == 0.05 else logging.DEBUG,
                    "pub/sub connection to %s failed (%s); retrying in %.2f s",
                    self._spec.address,
                    error,
                    delay,
                )
                self._drop_connection(conn)
                self._wake_everyone()
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _stopping(self) -> bool:
        return self._closed

    def _serve(self, conn: Any) -> None:
        last_traffic = time.monotonic()
        ping_sent = 0.0
        while not self._closed:
            if conn.can_read(timeout=POLL):
                try:
                    reply = conn.read_response()
                except redis.exceptions.ResponseError as error:
                    if not self._refused(error):
                        raise
                    continue
                self._dispatch(reply)
                last_traffic = time.monotonic()
                ping_sent = 0.0
                continue
            now = time.monotonic()
            with self._mutex:
                self._sweep_locked(now)
            if ping_sent and now - ping_sent > self._timeout:
                raise TimeoutError(f"no PING reply within {self._timeout:g} s")
            if not ping_sent and now - last_traffic > PING_INTERVAL:
                with self._mutex:
                    conn.send_command("PING", check_health=False)
                ping_sent = now

    def _refused(self, error: Exception) -> bool:
        """An error reply: Redis refused the oldest unconfirmed SUBSCRIBE (``False``: there
        is none, so the error is not a refusal and the connection is renewed)."""
        with self._mutex:
            if not self._order:
                return False
            channel = self._order.popleft()
            self._answered_locked(channel)
            sub = self._entries.pop(channel, None)  # the next user subscribes (and is refused) anew
        if isinstance(error, _REDIRECTED):
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
                f"patterns): {error}"
            )
            sub.error.__cause__ = error
            sub.ready.set()
            sub.wake_all()
        return True

    def _drop_connection(self, conn: Any) -> None:
        with self._mutex:
            if self._conn is conn:
                self._conn = None
        if conn is not None:
            try:
                conn.disconnect()
            except Exception as error:  # already broken
                log.debug("pub/sub: disconnect failed: %r", error)

    def _wake_everyone(self) -> None:
        with self._mutex:
            subs = list(self._entries.values())
        for sub in subs:
            sub.wake_all()

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Close the connection, fail pending subscriptions and wake every waiter."""
        with self._mutex:
            self._closed = True
            subs = list(self._entries.values())
            conn, self._conn = self._conn, None
            thread = self._thread
        error = ClientClosedError("the client is shut down")
        for sub in subs:
            sub.ready.set(error)
            sub.wake_all()
        if conn is not None:
            try:
                conn.disconnect()  # shuts the socket down: the reader's recv returns
            except Exception as exc:
                log.debug("pub/sub: disconnect at close failed: %r", exc)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._spec.close()


class ClusterPubSub:
    """Pub/sub for a cluster: one registry per node and mode, each channel on its node.

    A channel whose slot is its object's key slot uses sharded pub/sub (Redis 7+:
    SSUBSCRIBE on the node that owns the slot; the scripts SPUBLISH there). A channel in
    another slot (Redisson's latch channel of a tagged name) uses classic pub/sub, which the
    cluster broadcasts to every node.
    """

    def __init__(
        self,
        node_of: Callable[[str], tuple[str, int]],
        sharded: Callable[[str, str], bool],
        spec_for: Callable[[str, int], ConnectionSpec],
        *,
        timeout: float,
        name: str,
    ) -> None:
        self._node_of = node_of
        self._sharded = sharded
        self._spec_for = spec_for
        self._timeout = timeout
        self._name = name
        self._mutex = threading.Lock()
        self._registries: dict[tuple[tuple[str, int], bool], PubSubRegistry] = {}
        self._closed = False

    def acquire(self, channel: str, policy: WakePolicy, route: str | None = None) -> Subscription:
        """Take a reference on ``channel`` (``route``: the key of the object it belongs to)."""
        key = route if route is not None else channel
        sharded = self._sharded(channel, key)
        node = self._node_of(channel if sharded else key)
        with self._mutex:
            if self._closed:
                raise ClientClosedError("the client is shut down")
            registry = self._registries.get((node, sharded))
            if registry is None:
                registry = self._registries[(node, sharded)] = PubSubRegistry(
                    self._spec_for(*node),
                    timeout=self._timeout,
                    name=f"{self._name}-{node[1]}",
                    sharded=sharded,
                )
        return registry.acquire(channel, policy)

    def release(self, sub: Subscription) -> None:
        """Drop a reference taken by :meth:`acquire`."""
        sub.registry.release(sub)

    def close(self, timeout: float = 5.0) -> None:
        """Close every registry."""
        with self._mutex:
            self._closed = True
            registries = list(self._registries.values())
        for registry in registries:
            registry.close(timeout)
