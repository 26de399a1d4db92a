"""``connect`` and ``Client``: the entry point that makes syncprims objects."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias, Unpack, final, get_args

if TYPE_CHECKING:  # only the types are named; valkey-py is optional (the [valkey] extra)
    import redis.asyncio
    import valkey.asyncio

from syncprims._core.election import ElectionCore
from syncprims._core.fair import FairLockCore
from syncprims._core.fenced import FencedLockCore
from syncprims._core.latch import CountDownLatchCore
from syncprims._core.lock import LockCore
from syncprims._core.nonreentrant import NonReentrantFairLockCore, NonReentrantLockCore
from syncprims._core.owners import OwnerId, new_owner
from syncprims._core.rwlock import ReadWriteLockCore
from syncprims._core.semaphore import PermitExpirableSemaphoreCore, SemaphoreCore
from syncprims._core.spin import BackOff, SpinLockCore
from syncprims._protocol.contracts import LostCallback
from syncprims._protocol.kinds import KINDS, make
from syncprims._protocol.loss import LossReason
from syncprims._protocol.templates import lock_namer, require_coroutine_function
from syncprims._protocol.timing import Duration, lease_ms, wait_seconds
from syncprims._runtime.aio import AsyncExecutor as _Executor
from syncprims._runtime.aio import open_executor as _open
from syncprims.asyncio._decorate import P, T, locked
from syncprims.asyncio._election import LeaderElection
from syncprims.asyncio._fenced import FencedLock
from syncprims.asyncio._latch import CountDownLatch
from syncprims.asyncio._lock import (
    FairLock,
    NonReentrantFairLock,
    NonReentrantLock,
    RLock,
    SpinLock,
)
from syncprims.asyncio._multi import MultiLock, RedLock
from syncprims.asyncio._rwlock import ReadWriteLock
from syncprims.asyncio._semaphore import PermitExpirableSemaphore, Semaphore
from syncprims.config import Config, ConnectOptions
from syncprims.errors import LockTimeoutError, TransportError

__all__ = ["Client", "LostCallback", "MasterSet", "Source", "connect", "connect_many"]

log = logging.getLogger("syncprims")

Source: TypeAlias = (
    "str | redis.asyncio.Redis | redis.asyncio.ConnectionPool | redis.asyncio.RedisCluster"
    " | valkey.asyncio.Valkey | valkey.asyncio.ConnectionPool | valkey.asyncio.ValkeyCluster"
)
"""A URL, or the redis-py (or valkey-py) client, pool or cluster your application has (see
``connect``)."""


LockKind = Literal["lock", "fair", "fenced", "read", "write"]
"""The lock of a ``synchronized`` function: an RLock, a fair, fenced, read or write lock (rows
of the table of kinds, ``syncprims._protocol.kinds``)."""


@contextlib.asynccontextmanager
async def _holding(
    lock: RLock, wait_time: Duration | None, lease_time: Duration | None
) -> AsyncIterator[None]:
    """Hold ``lock`` for a block: ``lock()``, or ``try_lock(wait_time)`` raising on time-out."""
    if wait_time is None:
        await lock.lock(lease_time)
    elif not await lock.try_lock(wait_time, lease_time):
        wait = wait_seconds(wait_time)
        message = f"{lock._core.kind} {lock.name!r} was not acquired within {wait:g} s"
        raise LockTimeoutError(message, name=lock.name)
    try:
        yield
    finally:
        await lock.unlock()


def _with_callback(
    core: LockCore, on_lost: LostCallback | None, raise_on_release_error: bool | None = None
) -> Any:
    if on_lost is not None and not callable(on_lost):
        raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
    if raise_on_release_error is not None and not isinstance(raise_on_release_error, bool):
        raise TypeError(
            "raise_on_release_error must be a bool or None, not "
            f"{type(raise_on_release_error).__name__}"
        )
    core.holds.on_lost = on_lost
    core.raise_on_release_error = raise_on_release_error
    return core


@final
class Client:
    """A connection to Redis that makes syncprims objects (Redisson ``RedissonClient``).

    Made by [`connect`][syncprims.asyncio.connect]. Create one per process (per event loop in the
    asyncio face) and share it between threads (or tasks): it takes connections from the redis-py
    pool it was given, holds one pub/sub connection and runs the watchdog, all started lazily. Shut
    it down when done (``with``/``async with`` does it); locks it still holds then stop being
    renewed and expire by their lease. A redis-py client you passed in stays open.

    Each client has a random id (a UUID4); a lock's owner is that id plus the thread (sync
    face) or task (asyncio face). A child process made by ``os.fork()`` gets a new id: it
    never owns the parent's locks.
    """

    __slots__ = ("_ex",)

    _ex: _Executor

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("make a Client with syncprims.asyncio.connect(...)")

    @classmethod
    def _wrap(cls, executor: _Executor) -> Self:
        client = object.__new__(cls)
        client._ex = executor
        return client

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._ex.client_id} {self._ex.source.address}>"

    @property
    def id(self) -> str:
        """This client's id (a UUID4 string; the first part of every owner field)."""
        return self._ex.client_id

    @property
    def config(self) -> Config:
        """The client's options (``timeout`` shows the reply timeout in force)."""
        return self._ex.config

    @property
    def operation_timeout(self) -> float:
        """The longest one Redis operation of this client can take, seconds, retries
        included: ``(connect timeout + timeout + retry_delay[1]) * (retry_attempts + 1)``,
        with the connect timeout of the redis-py client (5 s when it has none). A wait (as in
        ``lock()`` or ``try_lock(wait_time=...)``) is bounded by its wait time, each Redis
        call within it by this."""
        return self._ex.bounds.operation_timeout

    def new_owner(self) -> OwnerId:
        """A new explicit lock owner, for a hold taken in one task or thread and released in
        another.

        Pass it as ``owner=`` to the acquire and release methods of any lock kind
        (``lock``, ``try_lock``, ``unlock``, ``acquire``, ``release``, ``get_hold_count``,
        ``ensure_held``, ``statistics``; the fenced lock's token methods; MultiLock and
        RedLock). Holds, the watchdog and ``on_lost`` then follow the owner, not the caller.
        ``async with lock:`` still uses the current task. (Redisson's ``threadId``
        overloads; redis-py's ``Lock`` token.)

        Returns:
            An [`OwnerId`][syncprims.OwnerId], unique in this process.

        Example:
            ```python
            job = client.new_owner()
            await lock.lock(owner=job)                    # in the request handler
            ...
            await lock.unlock(owner=job)                  # in the background task
            ```
        """
        return new_owner()

    def get_lock(
        self,
        name: str,
        *,
        on_lost: LostCallback | None = None,
        raise_on_release_error: bool | None = None,
    ) -> RLock:
        """The reentrant lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            on_lost: called as ``on_lost(name, reason)`` when a hold taken without
                ``lease_time`` is lost (the watchdog found it gone, or could not renew it
                before its lease ran out). It runs on the client's event loop: keep it short.
            raise_on_release_error: ``False``: leaving ``async with lock:`` when the lock was
                no longer held (its lease ran out, or it was lost, inside the block) logs a
                WARNING instead of raising ``LockNotHeldError``; an explicit ``unlock()``
                still raises. ``None`` (default): the client's
                [`Config.raise_on_release_error`][syncprims.Config] (``True`` unless set).

        Raises:
            TypeError, ValueError: a bad name, ``on_lost`` not callable, or
                ``raise_on_release_error`` not a ``bool``.
        """
        return RLock(_with_callback(LockCore(self._ex, name), on_lost, raise_on_release_error))

    def get_non_reentrant_lock(
        self,
        name: str,
        *,
        on_lost: LostCallback | None = None,
        raise_on_release_error: bool | None = None,
    ) -> NonReentrantLock:
        """The non-reentrant lock called ``name`` (no Redis call is made): an owner that
        holds it and acquires it again gets ``LockReentryError`` (Redisson 4.4
        ``getNonReentrantLock``).

        Args:
            name: the lock's Redis key (the same keys as an RLock's); a non-empty ``str``.
            on_lost: as in [`get_lock`][syncprims.asyncio.Client.get_lock].
            raise_on_release_error: as in [`get_lock`][syncprims.asyncio.Client.get_lock].

        Raises:
            TypeError, ValueError: as [`get_lock`][syncprims.asyncio.Client.get_lock].
        """
        return NonReentrantLock(
            _with_callback(NonReentrantLockCore(self._ex, name), on_lost, raise_on_release_error)
        )

    def get_non_reentrant_fair_lock(
        self,
        name: str,
        *,
        on_lost: LostCallback | None = None,
        raise_on_release_error: bool | None = None,
    ) -> NonReentrantFairLock:
        """The non-reentrant fair (FIFO) lock called ``name`` (no Redis call is made): an
        owner that holds it and acquires it again gets ``LockReentryError`` (Redisson 4.4
        ``getNonReentrantFairLock``).

        Args:
            name: the lock's Redis key (the same keys as a FairLock's); a non-empty ``str``.
            on_lost: as in [`get_lock`][syncprims.asyncio.Client.get_lock].
            raise_on_release_error: as in [`get_lock`][syncprims.asyncio.Client.get_lock].

        Raises:
            TypeError, ValueError: as [`get_lock`][syncprims.asyncio.Client.get_lock].
        """
        return NonReentrantFairLock(
            _with_callback(
                NonReentrantFairLockCore(self._ex, name), on_lost, raise_on_release_error
            )
        )

    def get_fair_lock(
        self,
        name: str,
        *,
        on_lost: LostCallback | None = None,
        raise_on_release_error: bool | None = None,
    ) -> FairLock:
        """The fair (FIFO) lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            on_lost: as in [`get_lock`][syncprims.asyncio.Client.get_lock].
            raise_on_release_error: as in [`get_lock`][syncprims.asyncio.Client.get_lock].

        Raises:
            TypeError, ValueError: as [`get_lock`][syncprims.asyncio.Client.get_lock].
        """
        core = _with_callback(FairLockCore(self._ex, name), on_lost, raise_on_release_error)
        return FairLock(core)

    def get_read_write_lock(
        self,
        name: str,
        *,
        writer_preference: bool = False,
        on_lost: LostCallback | None = None,
        raise_on_release_error: bool | None = None,
    ) -> ReadWriteLock:
        """The read-write lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            writer_preference: ``True``: a writer that has to wait holds back new readers
                (of clients that also ask for it), so that overlapping readers cannot starve
                it (docs/rw-lock.md). ``False`` (default): Redisson's behaviour.
            on_lost: as in [`get_lock`][syncprims.asyncio.Client.get_lock] (for both sides).
            raise_on_release_error: as in [`get_lock`][syncprims.asyncio.Client.get_lock]
                (for both sides).

        Raises:
            TypeError, ValueError: a bad name, ``writer_preference`` not a ``bool``,
                ``on_lost`` not callable, or ``raise_on_release_error`` not a ``bool``.
        """
        if not isinstance(writer_preference, bool):
            raise TypeError(
                f"writer_preference must be a bool, not {type(writer_preference).__name__}"
            )
        core = ReadWriteLockCore(self._ex, name, writer_preference=writer_preference)
        _with_callback(core.read_side, on_lost, raise_on_release_error)
        _with_callback(core.write_side, on_lost, raise_on_release_error)
        return ReadWriteLock(core)

    def get_fenced_lock(
        self,
        name: str,
        *,
        durable_tokens: bool = False,
        on_lost: LostCallback | None = None,
        raise_on_release_error: bool | None = None,
    ) -> FencedLock:
        """The fenced lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            durable_tokens: ``True``: every token is at least the server's clock in
                microseconds, so tokens stay higher than all earlier ones after Redis lost
                the counter (docs/fenced-lock.md, "Durable tokens"). ``False`` (default):
                Redisson's counter, which starts again from 1 after such a loss.
            on_lost: as in [`get_lock`][syncprims.asyncio.Client.get_lock].
            raise_on_release_error: as in [`get_lock`][syncprims.asyncio.Client.get_lock].

        Raises:
            TypeError, ValueError: a bad name, ``on_lost`` not callable, or
                ``raise_on_release_error`` or ``durable_tokens`` not a ``bool``.
        """
        core = _with_callback(
            FencedLockCore(self._ex, name, durable_tokens=durable_tokens),
            on_lost,
            raise_on_release_error,
        )
        return FencedLock(core)

    def get_spin_lock(
        self,
        name: str,
        *,
        initial_delay: float = 0.001,
        max_delay: float = 0.128,
        multiplier: float = 2.0,
        on_lost: LostCallback | None = None,
        raise_on_release_error: bool | None = None,
    ) -> SpinLock:
        """The spin lock called ``name``: waiters poll, no pub/sub (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            initial_delay: a waiter's first pause, seconds (> 0).
            max_delay: its longest pause, seconds (> 0).
            multiplier: how much each pause grows (> 0); a jitter of up to one more millisecond
                per attempt is added, as in Redisson.
            on_lost: as in [`get_lock`][syncprims.asyncio.Client.get_lock].
            raise_on_release_error: as in [`get_lock`][syncprims.asyncio.Client.get_lock].

        Raises:
            TypeError, ValueError: a bad name or delay, ``on_lost`` not callable, or
                ``raise_on_release_error`` not a ``bool``.
        """
        backoff = BackOff(initial_delay, max_delay, multiplier)
        core = SpinLockCore(self._ex, name, backoff)
        return SpinLock(_with_callback(core, on_lost, raise_on_release_error))

    def get_leader_election(
        self,
        name: str,
        *,
        value: str | None = None,
        lease_time: Duration | None = None,
        on_elected: Callable[[int], object] | None = None,
        on_revoked: Callable[[LossReason | None], object] | None = None,
    ) -> LeaderElection:
        """A candidate of the leader election called ``name`` (no Redis call is made): one
        per process that may lead (docs/election.md).

        Args:
            name: the election's name; a non-empty ``str`` (its keys are
                ``syncprims_election:{name}`` and beside it, all in one cluster slot).
            value: what others see of this candidate when it leads (``leader().value``);
                ``None`` (default): ``"<host>:<pid>"``.
            lease_time: the leadership's lease, seconds or ``timedelta`` (at least 1 s),
                renewed by the watchdog every third of it: a crashed leader is replaced
                within it. ``None`` (default): the client's ``lock_watchdog_timeout``.
            on_elected: called as ``on_elected(term)`` by ``campaign()`` once this candidate
                leads, in the campaigning task; if it raises, the leadership is resigned.
            on_revoked: called as ``on_revoked(reason)`` once per leadership when it ends:
                ``reason`` a [`LossReason`][syncprims.LossReason] when it was lost,
                ``None`` when it was given up (``resign()``, the client's shutdown,
                ``on_elected`` raising). It runs on the client's event loop for a loss:
                keep it short.

        Raises:
            TypeError: a bad name, ``value`` not a ``str``, a callback not callable.
            ValueError: an empty name, or a bad ``lease_time`` (not a positive duration, or
                under 1 s).
        """
        core = ElectionCore(
            self._ex,
            name,
            value=value,
            lease_time=lease_time,
            on_elected=on_elected,
            on_revoked=on_revoked,
        )
        return LeaderElection(core)

    def get_semaphore(self, name: str) -> Semaphore:
        """The semaphore called ``name`` (no Redis call is made).

        Raises:
            TypeError, ValueError: a bad name.
        """
        return Semaphore(SemaphoreCore(self._ex, name))

    def get_permit_expirable_semaphore(
        self, name: str, *, server_time: bool = False
    ) -> PermitExpirableSemaphore:
        """The permit-expirable semaphore called ``name`` (no Redis call is made).

        Args:
            name: the semaphore's Redis key; a non-empty ``str``.
            server_time: ``True``: leases start and end on the server's clock (the scripts
                read ``TIME``), for deployments without Redisson clients. ``False``
                (default): Redisson's layout, leases from each client's wall clock
                (docs/semaphores.md, "Clocks").

        Raises:
            TypeError, ValueError: a bad name, or ``server_time`` not a ``bool``.
        """
        return PermitExpirableSemaphore(
            PermitExpirableSemaphoreCore(self._ex, name, server_time=server_time)
        )

    def get_count_down_latch(self, name: str) -> CountDownLatch:
        """The count-down latch called ``name`` (no Redis call is made).

        Raises:
            TypeError, ValueError: a bad name.
        """
        return CountDownLatch(CountDownLatchCore(self._ex, name))

    def get_multi_lock(self, *locks: RLock, on_lost: LostCallback | None = None) -> MultiLock:
        """A [`MultiLock`][syncprims.asyncio.MultiLock] of ``locks`` (lock objects of this face,
        from any client).

        Args:
            *locks: the sub-locks.
            on_lost: called once when a hold is lost (any sub-lock lost it).

        Raises:
            TypeError: an argument is not a lock of this face, or ``on_lost`` not callable.
            ValueError: no lock.
        """
        return MultiLock(*locks, on_lost=on_lost)

    def synchronized(
        self,
        name: str | Callable[..., str],
        *,
        kind: LockKind = "lock",
        wait_time: Duration | None = None,
        lease_time: Duration | None = None,
    ) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[object, object, T]]]:
        """A decorator that runs each call of a function while holding a lock named per call.

        Example:
            ```python
            @client.synchronized("orders:{order_id}")
            async def ship(order_id: int, carrier: str = "ups") -> None:
                ...  # one ship() per order at a time, across the fleet

            @client.synchronized(lambda user, **_: f"users:{user.id}", kind="fair")
            async def rename(user: User, new_name: str) -> None: ...
            ```

        Args:
            name: the lock's name for a call: a ``str.format`` template whose fields name the
                function's parameters (``"orders:{order_id}"``, ``"users:{user.id}"``;
                defaults apply), or a callable taking the function's arguments and returning
                the name. A template with no field names one lock for every call.
            kind: the lock: ``"lock"`` (an [RLock][syncprims.asyncio.RLock], default),
                ``"fair"``, ``"fenced"``, or the ``"read"`` or ``"write"`` side of a
                read-write lock.
            wait_time: the longest wait for the lock, seconds or ``timedelta``; ``None``
                (default) waits as long as it takes.
            lease_time: as in [lock][syncprims.asyncio.RLock.lock]; ``None`` (default): the
                watchdog renews the lock until the call returns.

        Returns:
            The decorator; the decorated function keeps its signature, and raises
            [LockTimeoutError][syncprims.errors.LockTimeoutError] (without running) when
            the lock is not acquired within ``wait_time``.

        Raises:
            TypeError, ValueError: a bad ``kind``, duration, template (a field that names
                no parameter) or function (the asyncio face decorates ``async def``
                functions, the sync face plain ones); at decoration time.
        """
        kinds = get_args(LockKind)
        if kind not in kinds:
            raise ValueError(f"kind must be one of {', '.join(map(repr, kinds))}, not {kind!r}")
        get: Callable[[str], RLock] = functools.partial(make, KINDS[kind], self)
        if wait_time is not None:
            wait_seconds(wait_time)
        if lease_time is not None:
            lease_ms(lease_time)

        def decorate(
            func: Callable[P, Awaitable[T]],
        ) -> Callable[P, Coroutine[object, object, T]]:
            require_coroutine_function(func)
            namer = lock_namer(name, func)
            return locked(
                lambda args, kwargs: _holding(get(namer(args, kwargs)), wait_time, lease_time),
                func,
            )

        return decorate

    async def shutdown(self) -> None:
        """Stop the services and give every connection back. Idempotent.

        Releases in flight (in other tasks or threads) finish first, for up to the operation
        timeout; no acquisition starts meanwhile, and waiting callers are woken and raise
        ``ClientClosedError`` (a lock granted to one is given back; docs/design.md, "Late
        calls", its Shutdown paragraph). Leaderships are then resigned (``resign()``), so
        that the next candidate leads at once. Locks still held then stop being renewed and
        expire by their lease; later calls on this client's objects raise
        ``ClientClosedError``. A redis-py client (or pool) passed to
        [`connect`][syncprims.asyncio.connect] stays open and usable: its owner closes it. A
        client made from a URL is closed.
        """
        await self._ex.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


async def connect(source: Source | None = None, /, **options: Unpack[ConnectOptions]) -> Client:
    """Connect to Redis through the redis-py client your application already has, or a URL.

    Example:
        ```python
        r = redis.asyncio.Redis(host="cache", password=secret, client_name="orders")
        client = await syncprims.asyncio.connect(r)          # r's pool, settings and all
        ```

    Args:
        source: a ``redis.asyncio.Redis`` (also ``fakeredis.FakeAsyncRedis`` or a Sentinel
            ``master_for`` client), a ``redis.asyncio.ConnectionPool`` (any kind) or a
            ``redis.asyncio.RedisCluster``, whose connections (and so credentials, TLS,
            database, client name, timeouts, pool size) syncprims uses; it stays yours and
            stays open after [`shutdown`][syncprims.asyncio.Client.shutdown]. Or a URL
            (``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``,
            ``redis+sentinel://``: docs/configuration.md). ``None``: the ``REDIS_URL``
            environment variable, else ``redis://127.0.0.1:6379``.
        **options: syncprims' own options ([`Config`][syncprims.Config]):
            ``lock_watchdog_timeout``, ``timeout``, ``retry_attempts``... A misspelt one is
            a type error for mypy and a ``TypeError`` at run time.

    Returns:
        A connected [`Client`][syncprims.asyncio.Client], bound to the running event loop.

    Raises:
        TypeError: ``source`` is of no accepted type (the message lists them), or an unknown
            option.
        ValueError: a bad URL or option value.
        TransportError: Redis could not be reached.
        AuthenticationError: Redis refused the credentials.
    """
    config = Config.from_options(options)
    if source is None:
        source = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
    return Client._wrap(await _open(source, config))


@final
class MasterSet:
    """Clients of several independent Redis masters, for locks across all of them.

    Made by [`connect_many`][syncprims.asyncio.connect_many]. ``get_red_lock(name)`` locks ``name``
    on a majority of the masters; ``get_multi_lock(name)`` on all of them.
    """

    __slots__ = ("_clients",)

    _clients: tuple[Client, ...]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("make a MasterSet with syncprims.asyncio.connect_many(...)")

    @classmethod
    def _wrap(cls, clients: Sequence[Client]) -> Self:
        masters = object.__new__(cls)
        masters._clients = tuple(clients)
        return masters

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self._clients)} masters>"

    @property
    def clients(self) -> tuple[Client, ...]:
        """One client per master, in the order given."""
        return self._clients

    def get_red_lock(self, name: str, *, on_lost: LostCallback | None = None) -> RedLock:
        """A [`RedLock`][syncprims.asyncio.RedLock] of the lock ``name`` on every master (no Redis
        call is made).

        Args:
            name: the lock's Redis key on each master.
            on_lost: called once when a hold is lost: more than a minority of the masters
                lost it ([`MultiLock`][syncprims.asyncio.MultiLock]).

        Raises:
            TypeError, ValueError: a bad name, or ``on_lost`` not callable.
        """
        return RedLock(*(client.get_lock(name) for client in self._clients), on_lost=on_lost)

    def get_multi_lock(self, name: str, *, on_lost: LostCallback | None = None) -> MultiLock:
        """A [`MultiLock`][syncprims.asyncio.MultiLock] of the lock ``name`` on every master (all
        must be held).

        Args:
            name: the lock's Redis key on each master.
            on_lost: called once when a hold is lost: any master lost it.

        Raises:
            TypeError, ValueError: a bad name, or ``on_lost`` not callable.
        """
        return MultiLock(*(client.get_lock(name) for client in self._clients), on_lost=on_lost)

    async def shutdown(self) -> None:
        """Shut every client down (redis-py clients passed in stay open). Idempotent."""
        for client in self._clients:
            await client.shutdown()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


async def connect_many(
    sources: Sequence[Source], /, **options: Unpack[ConnectOptions]
) -> MasterSet:
    """Connect to several independent Redis masters (for RedLock and MultiLock).

    Each master gets its own client. ``timeout`` defaults to 0.5 s here (not the redis-py
    client's): a dead master should cost little next to the wait time; masters given by URL
    also get a 0.5 s connect timeout. A master that does not answer now is tolerated while a
    majority does (its client connects when it comes back).

    Args:
        sources: one URL or ``redis.asyncio`` client (or pool) per master (see
            [`connect`][syncprims.asyncio.connect]).
        **options: as for [`connect`][syncprims.asyncio.connect], applied to every client.

    Returns:
        A [`MasterSet`][syncprims.asyncio.MasterSet].

    Raises:
        ValueError: no source.
        TypeError: a source of no accepted type, or an unknown option.
        TransportError: fewer than a majority of the masters answered.
    """
    if isinstance(sources, str) or not sources:
        raise ValueError("sources must be a non-empty list of URLs or redis-py clients")
    settings = dict(options)
    settings.setdefault("timeout", 0.5)
    config = Config.from_options(settings)
    clients: list[Client] = []
    failures: list[TransportError] = []
    try:
        for source in sources:
            try:
                clients.append(Client._wrap(await _open(source, config, connect_timeout=0.5)))
            except TransportError as error:
                failures.append(error)
                log.warning("a master does not answer (%s); going on without it for now", error)
                unchecked = await _open(source, config, check=False, connect_timeout=0.5)
                clients.append(Client._wrap(unchecked))
        if len(failures) > len(sources) - (len(sources) // 2 + 1):
            raise failures[0]
    except BaseException:
        for client in clients:
            await client.shutdown()
        raise
    return MasterSet._wrap(clients)
