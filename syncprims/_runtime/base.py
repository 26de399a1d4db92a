"""What both executors share: options resolved against the redis-py client, identity, clocks,
back-off, and fork safety.

Fork safety: after ``os.fork()`` every live executor in the child gets a new client id and
forgets the parent's subscriptions, renewals and per-client state (``ClientParts``;
``os.register_at_fork``, this module's one hook); the child therefore never owns, renews or
releases the parent's locks. redis-py's pools notice the fork
themselves and open new connections in the child.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

import attrs
from redis.backoff import EqualJitterBackoff

from syncprims._gevent import refuse_if_monkey_patched
from syncprims._protocol.contracts import ClientParts, Orphan, ScriptCall, Then
from syncprims._protocol.ids import new_client_id
from syncprims._protocol.keyspace import is_keyspace_channel
from syncprims._protocol.replication import sync_then
from syncprims._protocol.serverinfo import info_fields
from syncprims._protocol.timing import Bounds, clock
from syncprims._services.janitor import Janitor
from syncprims._services.listeners import ObjectListeners
from syncprims._services.loop import Scheduler
from syncprims._services.pubsub import ClusterSubscribers, Subscriber, Subscription
from syncprims._services.record import ClientRecord
from syncprims._services.watchdog import ScriptRunner, Watchdog
from syncprims._transport.cluster import ClusterRouter, key_slot
from syncprims._transport.replicas import remembered_count, replica_count
from syncprims._transport.server import NodeServer
from syncprims._transport.sources import CONNECT_TIMEOUT, Source
from syncprims.config import DEFAULT_TIMEOUT, Config
from syncprims.errors import ClientClosedError, SyncPrimsError

__all__ = ["ExecutorBase"]

log = logging.getLogger("syncprims")

N = TypeVar("N", bound=NodeServer)  # the face's server
S = TypeVar("S", bound=Subscriber)  # the face's pub/sub driver


_live: weakref.WeakSet[ExecutorBase[Any, Any]] = weakref.WeakSet()
_PATCHERS = frozenset({"gevent.monkey", "eventlet.patcher"})  # their patch state's modules
_WARNED_EVICTION: set[str] = set()  # addresses whose eviction policy was warned about


def resolve(config: Config, source: Source) -> tuple[Config, Bounds]:
    """The options with ``timeout`` resolved (the option, else the client's socket timeout,
    else 3 s), and the bounds of one call."""
    timeout = config.timeout
    if timeout is None:
        timeout = source.socket_timeout if source.socket_timeout else DEFAULT_TIMEOUT
    connect = source.connect_timeout
    if connect is None and not source.in_process:
        log.warning(
            "the redis-py client of %s has no socket_connect_timeout: connecting to an "
            "unreachable host can take the operating system's TCP timeout, beyond "
            "syncprims' bound of one operation (%g s assumed)",
            source.address,
            CONNECT_TIMEOUT,
        )
    if connect is None:
        connect = CONNECT_TIMEOUT
    resolved = attrs.evolve(config, timeout=timeout)
    bounds = Bounds(
        timeout=timeout,
        connect_timeout=connect,
        retry_attempts=config.retry_attempts,
        retry_delay_cap=config.retry_delay[1],
    )
    return resolved, bounds


class ExecutorBase(Generic[N, S]):
    """Options, identity, clocks, back-off, and the making and routing of the services,
    common to both executors.

    Args:
        config: the client's options.
        source: the redis-py pool or cluster the client talks through.
    """

    record: ClientRecord
    """The client's record in Redis (:meth:`_make_services`)."""
    janitor: Janitor
    """Deletes the unlock latch keys in the background (:meth:`_make_services`)."""
    watchdog: Watchdog
    """Renews leases and checks holds when a server lost data (:meth:`_make_services`)."""
    listeners: ObjectListeners
    """The objects' keyspace listeners (:meth:`_make_services`)."""
    pubsub: S | ClusterSubscribers[S]
    """The client's pub/sub: one driver, or a cluster's one per node and mode
    (:meth:`_make_pubsub`)."""
    transport: N | ClusterRouter[N]
    """The face's transport: a server, or a cluster router of its servers; both satisfy
    ``syncprims._transport.server.NodeServer``'s calls but ``asking``."""

    late_reply_window: float
    """How long the late reply of an abandoned call may still be read, seconds (set by each
    executor)."""
    refuses_patched = False
    """Whether the face refuses a process monkey-patched by gevent or eventlet (the sync
    face, ``syncprims._gevent``): at connect, and at each acquisition once one of them is
    imported, so a client connected before the patching is refused too."""

    def __init__(self, config: Config, source: Source) -> None:
        self.config, self.bounds = resolve(config, source)
        self.source = source
        self.client_id = new_client_id()
        self.cluster = source.cluster is not None
        self.database = _database(source)
        """The database number of the client's connections (0 in a cluster)."""
        self.name = f"syncprims-{self.client_id[:8]}"
        base, cap = self.config.retry_delay
        self._backoff = EqualJitterBackoff(cap=cap, base=base)
        self.closed = False
        self.closers: dict[int, Callable[[], Awaitable[object]]] = {}
        self.state = ClientParts()
        """The client's state of the core's mechanisms (``Executor.state``)."""
        self._releasing = 0  # releases in flight (release_started / release_ended)
        self._releasing_mutex = threading.Lock()
        _live.add(self)

    async def run_closers(self) -> None:
        """At shutdown, once no acquisition may start: end what :attr:`closers` holds, each
        in turn (an error is logged, and the others still run)."""
        while self.closers:
            _, close = self.closers.popitem()
            try:
                await close()
            except Exception as error:
                log.warning("ending a leadership at shutdown failed: %r", error)

    def release_started(self) -> None:
        """A release began: :meth:`releases_done` waits for it at shutdown."""
        with self._releasing_mutex:
            self._releasing += 1

    def release_ended(self) -> None:
        with self._releasing_mutex:
            self._releasing -= 1

    def refuse_if_closing(self, context: str) -> None:
        """As ``Executor.refuse_if_closing``; in the sync face, also refuse a process
        monkey-patched since connect."""
        if self.closed:
            raise ClientClosedError(f"the client is shut down ({context})")
        if self.refuses_patched and _PATCHERS & sys.modules.keys():  # patched after connect
            refuse_if_monkey_patched()
        if self.record.announced != self.client_id:  # inline: no call per acquisition
            self.record.announce()

    async def delete_now(self, keys: list[str], timeout: float | None = None) -> None:
        """Delete ``keys`` (unlock latch keys, the client's record) now: one ``UNLINK`` per
        slot, each sent once (``timeout``: seconds for its reply instead of the usual); what
        fails is left to its TTL (logged at DEBUG)."""
        for group in self.janitor.groups(keys):
            try:
                await self.transport.command(
                    "UNLINK", *group, context="deleting the client's keys", route=group[0],
                    timeout=timeout,
                )  # fmt: skip
            except Exception as error:
                log.debug("UNLINK of %d keys failed: %r", len(group), error)

    def releases_done(self, deadline: float) -> bool:
        """Whether no release is in flight; polled by shutdown until ``deadline``
        (:meth:`monotonic`)."""
        return self._releasing <= 0 or self.monotonic() >= deadline

    def retry_delay(self, attempt: int) -> float:
        """Equal-jitter back-off (redis-py's ``EqualJitterBackoff``), seconds."""
        return self._backoff.compute(min(attempt, 32))

    def slot_of(self, key: str) -> int:
        """The cluster slot of ``key`` (0 outside a cluster)."""
        return key_slot(key) if self.cluster else 0

    def node_of(self, key: str | None) -> object:
        """The server ``key`` lives on: a cluster node's address, else ``None`` (the one)."""
        transport = self.transport
        return transport.node_of(key) if isinstance(transport, ClusterRouter) else None

    def sharded(self, channel: str, key: str) -> bool:
        """Whether ``channel`` of the object at ``key`` uses sharded pub/sub: a Redis 7+
        cluster, channel and key in one slot; never a keyspace notification channel (Redis
        publishes those with classic pub/sub only, on the node that holds the key)."""
        transport = self.transport
        return (
            isinstance(transport, ClusterRouter)
            and bool(transport.sharded)
            and key_slot(channel) == key_slot(key)
            and not is_keyspace_channel(channel)
        )

    def publish_command_for(self, channel: str, key: str) -> str:
        """``SPUBLISH`` for a sharded channel, else ``PUBLISH``."""
        return "SPUBLISH" if self.cluster and self.sharded(channel, key) else "PUBLISH"

    def monotonic(self) -> float:
        """The clock leases and deadlines are counted on, seconds (monotonic; it goes on
        while the host is suspended where the platform allows: ``timing.clock``)."""
        return clock()

    def wall_ms(self) -> int:
        """The wall clock, epoch milliseconds."""
        return time.time_ns() // 1_000_000

    # -- what both faces' executors do alike, on their ``transport`` -----------------------

    async def start(self) -> None:
        """Check that Redis answers (``PING``; in a cluster, load the slot map first), then
        write the client's record and read the server's ``INFO``.

        Raises:
            TransportError, AuthenticationError, ServerReplyError: Redis could not be used.
        """
        if isinstance(self.transport, ClusterRouter):
            await self.transport.ready()
        await self.transport.command("PING", context="connecting")
        record = self.record.first_command()  # best effort: syncprims._services.record
        if record is not None:
            try:
                await self.transport.command(
                    *record, context="writing the client record", route=str(record[1])
                )
            except SyncPrimsError as error:
                self.record.refused(error)
        await self._read_server()
        if self.config.lock_synced_replicas == "auto" and not isinstance(
            self.transport, ClusterRouter
        ):
            await replica_count(self.transport, self.monotonic(), recheck=True)

    async def _read_server(self) -> None:
        """At connect: the server's ``INFO``, the reading the watchdog compares later ones
        with (``syncprims._protocol.serverinfo``), and a warning, once per server, when
        its ``maxmemory-policy`` may evict a lock's keys."""
        try:
            reply = await self.transport.command("INFO", context="reading the server's INFO")
        except SyncPrimsError as error:  # refused by an ACL, or fakeredis: nothing to compare
            log.debug("INFO at connect: %s", error)
            return
        self.watchdog.observe(self.node_of(None), reply)
        policy = info_fields(reply).get("maxmemory_policy", "noeviction")
        if policy != "noeviction" and self.source.address not in _WARNED_EVICTION:
            _WARNED_EVICTION.add(self.source.address)
            log.warning(
                "Redis at %s may evict keys (maxmemory-policy %s): a lock's key evicted is a "
                "lock given to another client while its holder still holds it (the holder "
                "is told within about a second). Locks need maxmemory-policy noeviction, or "
                "a Redis of their own (docs/guarantees.md)",
                self.source.address,
                policy,
            )

    def _replica_server(self, route: str) -> N:
        transport = self.transport
        return transport.route([route]) if isinstance(transport, ClusterRouter) else transport

    def replicas(self, route: str, *, recheck: bool = False) -> Coroutine[Any, Any, int]:
        # replica_count's coroutine itself, no layer around it (every acquire asks)
        return replica_count(self._replica_server(route), self.monotonic(), recheck=recheck)

    async def renewal_sync(self, route: str, recheck: bool = False) -> Then | None:
        """The ``WAIT``/``WAITAOF`` a watchdog renewal of a hold on ``route`` is written with,
        as an acquisition's (``lock_synced_replicas``, ``lock_synced_aof``), or ``None``:
        a renewal the replicas did not take counts as failed (``syncprims._services.
        watchdog``)."""
        setting = self.config.lock_synced_replicas
        required = await self.replicas(route, recheck=recheck) if setting == "auto" else setting
        return sync_then(required, self.config.lock_synced_aof, self.config.replica_sync_timeout)

    def known_replicas(self, route: str) -> int | None:
        return remembered_count(self._replica_server(route), self.monotonic())

    async def command(
        self, *args: str | int, context: str, route: str | None = None, timeout: float | None = None
    ) -> Any:
        return await self.transport.command(*args, context=context, route=route, timeout=timeout)

    async def eval_then(
        self, call: ScriptCall, then: Then, *, context: str, on_orphan: Orphan | None = None
    ) -> tuple[Any, Any]:
        """The blocking face's: its call's reply never outlives its caller, so ``on_orphan``
        is not passed on (the asyncio executor's own ``eval_then`` passes it)."""
        return await self.transport.eval_then(call, then, context=context)

    def _make_pubsub(self, make: Callable[..., S]) -> None:
        """Make :attr:`pubsub` (``make``: the face's driver class), once :attr:`transport`
        is set."""
        timeout = self.bounds.timeout
        router = self.transport
        if isinstance(router, ClusterRouter):
            self.pubsub = ClusterSubscribers(
                router.node_of,
                self.sharded,
                lambda node, sharded: make(
                    router.server(node).pool,
                    address=f"{node[0]}:{node[1]}",
                    timeout=timeout,
                    name=f"{self.name}-{node[1]}",
                    sharded=sharded,
                ),
            )
        else:
            self.pubsub = make(
                self.source.pool, address=self.source.address, timeout=timeout, name=self.name
            )

    def _make_services(self, services: Scheduler, runner: ScriptRunner) -> None:
        """The watchdog, the janitor, the listeners and the record, on ``services`` (the
        face's loop), sending through ``runner``: the transport (asyncio face) or its
        off-loop wrapper (blocking face)."""
        config = self.config
        self.watchdog = Watchdog(
            services,
            runner,
            lease=config.lock_watchdog_timeout,
            batch_size=config.watchdog_batch_size,
            retry_delay=config.retry_delay[1],
            slot_of=self.slot_of,
            node_of=self.node_of,
            sync=self.renewal_sync,
        )
        self.janitor = Janitor(services, runner, slot_of=self.slot_of)
        self.listeners = ObjectListeners(services, database=self.database)
        self.record = ClientRecord(
            services,
            runner,
            lambda: self.client_id,
            client_name(self.source),
            enabled=config.client_record,
        )

    def subscribed(self, channel: str, route: str | None = None) -> bool:
        return self._driver(channel, route).table.confirmed(channel)

    def _driver(self, channel: str, route: str | None) -> S:
        """The subscriber connection ``channel`` belongs on (a cluster's: by ``route``)."""
        pubsub = self.pubsub
        return pubsub.driver(channel, route) if isinstance(pubsub, ClusterSubscribers) else pubsub

    def _drivers(self, *, stop: bool = False) -> list[S]:
        """Every subscriber connection made so far; ``stop``: and no new one (shutdown)."""
        pubsub = self.pubsub
        if isinstance(pubsub, ClusterSubscribers):
            return pubsub.stop() if stop else pubsub.drivers()
        return [pubsub]

    def unsubscribe(self, sub: Any) -> None:
        assert isinstance(sub, Subscription)
        sub.table.release(sub)

    def _wake_waiters(self) -> None:
        """Wake every waiter of the client (shutdown: they raise ``ClientClosedError``)."""
        for driver in self._drivers():
            driver.table.wake_everyone()

    def after_fork(self) -> None:
        """In a forked child: a new identity, and nothing of the parent's background state."""
        self.client_id = new_client_id()
        self.closers = {}
        self.state.clear()
        self.pubsub.forget()
        self.watchdog.forget()
        self.janitor.forget()
        self.listeners.forget()
        self.record.forget()


def _connection_kwargs(source: Source) -> dict[str, Any]:
    """The settings of the source's connections (its pool's, or its cluster's)."""
    if source.pool is not None:
        kwargs = getattr(source.pool, "connection_kwargs", None)
    else:
        get = getattr(source.cluster, "get_connection_kwargs", None)
        kwargs = get() if callable(get) else None
    return kwargs if isinstance(kwargs, dict) else {}


def client_name(source: Source) -> str | None:
    """The ``client_name`` the application gave its redis-py client, if any (for the
    client's record: ``syncprims._services.record``)."""
    name = _connection_kwargs(source).get("client_name")
    return name if isinstance(name, str) and name else None


def _database(source: Source) -> int:
    """The ``db`` of the pool's connections (0 in a cluster, or when it says none)."""
    db = _connection_kwargs(source).get("db") if source.pool is not None else None
    try:
        return int(db) if db is not None else 0
    except (TypeError, ValueError):
        return 0


def live() -> list[ExecutorBase[Any, Any]]:
    """The executors of this process not yet collected."""
    return list(_live)


def _after_fork_in_child() -> None:
    for executor in live():
        executor.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
