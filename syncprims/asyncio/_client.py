"""``Client`` and ``connect``: the entry point that makes syncprims objects."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from syncprims._core.fair import FairLockCore
from syncprims._core.fenced import FencedLockCore
from syncprims._core.latch import CountDownLatchCore
from syncprims._core.lock import LockCore
from syncprims._core.rwlock import ReadWriteLockCore
from syncprims._core.semaphore import PermitExpirableSemaphoreCore, SemaphoreCore
from syncprims._transport.executor import AsyncExecutor as _Executor
from syncprims.asyncio._lock import FairLock, FencedLock, ReadWriteLock, RLock
from syncprims.asyncio._multi import MultiLock, RedLock
from syncprims.asyncio._semaphore import CountDownLatch, PermitExpirableSemaphore, Semaphore
from syncprims.config import Config
from syncprims.errors import TransportError

__all__ = ["Client", "MasterSet", "connect", "connect_many"]

log = logging.getLogger("syncprims")


LostCallback = Callable[[str, str], None]
"""``on_lost(name, reason)``: a lock's hold was lost."""


def _with_callback(core: LockCore, on_lost: LostCallback | None) -> Any:
    if on_lost is not None and not callable(on_lost):
        raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
    core.on_lost = on_lost
    return core


class Client:
    """A connection to Redis that makes syncprims objects (Redisson ``RedissonClient``).

    Create one per process and share it between threads (or tasks): it holds the connection
    pool, one pub/sub connection, the watchdog and a services thread, all started lazily.
    Shut it down when done (``with``/``async with`` does it); locks it still holds then stop
    being renewed and expire by their lease.

    Each client has a random id (a UUID4); a lock's owner is that id plus the thread (sync
    face) or task (asyncio face). A child process made by ``os.fork()`` gets a new id: it
    never owns the parent's locks.
    """

    def __init__(self, executor: _Executor) -> None:
        self._ex = executor

    @classmethod
    async def create(cls, config: Config | None = None, *, check: bool = True) -> Self:
        """Create a client and check that Redis answers.

        Args:
            config: the configuration; ``None`` for ``Config()`` (Redis on 127.0.0.1:6379).
            check: ``False`` to skip the PING (the client connects on first use).

        Returns:
            A connected client.

        Raises:
            TypeError: ``config`` is not a :class:`~syncprims.Config`.
            TransportError: Redis could not be reached.
            AuthenticationError: Redis refused the user name or password.
            ServerReplyError: Redis refused another way.
        """
        if config is None:
            config = Config()
        if not isinstance(config, Config):
            raise TypeError(f"config must be a syncprims.Config, not {type(config).__name__}")
        client = cls(_Executor(config))
        if check:
            try:
                await client._ex.command("PING", context="connecting")
            except BaseException:
                await client.shutdown()
                raise
        return client

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._ex.client_id} {self._ex.config.describe()}>"

    @property
    def id(self) -> str:
        """This client's id (a UUID4 string; the first part of every owner field)."""
        return self._ex.client_id

    @property
    def config(self) -> Config:
        """The client's configuration."""
        return self._ex.config

    def get_lock(self, name: str, *, on_lost: LostCallback | None = None) -> RLock:
        """The reentrant lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            on_lost: called as ``on_lost(name, reason)`` when a hold taken without
                ``lease_time`` is lost (the watchdog found it gone, or could not renew it
                before its lease ran out). It runs on the client's services thread: keep it
                short, and thread-safe.

        Raises:
            TypeError, ValueError: a bad name, or ``on_lost`` not callable.
        """
        return RLock(_with_callback(LockCore(self._ex, name), on_lost))

    def get_fair_lock(self, name: str, *, on_lost: LostCallback | None = None) -> FairLock:
        """The fair (FIFO) lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            on_lost: called as ``on_lost(name, reason)`` when a hold taken without
                ``lease_time`` is lost (the watchdog found it gone, or could not renew it
                before its lease ran out). It runs on the client's services thread: keep it
                short, and thread-safe.

        Raises:
            TypeError, ValueError: a bad name, or ``on_lost`` not callable.
        """
        return FairLock(_with_callback(FairLockCore(self._ex, name), on_lost))

    def get_read_write_lock(
        self, name: str, *, on_lost: LostCallback | None = None
    ) -> ReadWriteLock:
        """The read-write lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            on_lost: called as ``on_lost(name, reason)`` when a hold taken without
                ``lease_time`` is lost (the watchdog found it gone, or could not renew it
                before its lease ran out). It runs on the client's services thread: keep it
                short, and thread-safe.

        Raises:
            TypeError, ValueError: a bad name, or ``on_lost`` not callable.
        """
        core = ReadWriteLockCore(self._ex, name)
        _with_callback(core.read_side, on_lost)
        _with_callback(core.write_side, on_lost)
        return ReadWriteLock(core)

    def get_fenced_lock(self, name: str, *, on_lost: LostCallback | None = None) -> FencedLock:
        """The fenced lock called ``name`` (no Redis call is made).

        Args:
            name: the lock's Redis key; a non-empty ``str``.
            on_lost: as in :meth:`get_lock`.

        Raises:
            TypeError, ValueError: a bad name, or ``on_lost`` not callable.
        """
        return FencedLock(_with_callback(FencedLockCore(self._ex, name), on_lost))

    def get_semaphore(self, name: str) -> Semaphore:
        """The semaphore called ``name`` (no Redis call is made).

        Raises:
            TypeError, ValueError: a bad name.
        """
        return Semaphore(SemaphoreCore(self._ex, name))

    def get_permit_expirable_semaphore(self, name: str) -> PermitExpirableSemaphore:
        """The permit-expirable semaphore called ``name`` (no Redis call is made).

        Raises:
            TypeError, ValueError: a bad name.
        """
        return PermitExpirableSemaphore(PermitExpirableSemaphoreCore(self._ex, name))

    def get_count_down_latch(self, name: str) -> CountDownLatch:
        """The count-down latch called ``name`` (no Redis call is made).

        Raises:
            TypeError, ValueError: a bad name.
        """
        return CountDownLatch(CountDownLatchCore(self._ex, name))

    def get_multi_lock(self, *locks: RLock) -> MultiLock:
        """A :class:`MultiLock` of ``locks`` (lock objects of this face, from any client).

        Raises:
            TypeError: an argument is not a lock of this face.
            ValueError: no lock.
        """
        return MultiLock(*locks)

    async def shutdown(self) -> None:
        """Stop the services and close every connection. Idempotent.

        Locks still held stop being renewed and expire by their lease; later calls on this
        client's objects raise ``ClientClosedError``.
        """
        await self._ex.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()


async def connect(url: str | None = None, **options: Any) -> Client:
    """Connect to Redis: one server, a cluster, or a sentinel-managed master.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS),
            ``unix:///path``, ``redis+cluster://host:port,host:port`` (a cluster, from any of
            its nodes) or ``redis+sentinel://host:port,host:port/master_name`` (a master
            found through its sentinels); ``None`` uses the ``REDIS_URL`` environment
            variable, else ``redis://127.0.0.1:6379``.
        **options: :class:`~syncprims.Config` attributes (``lock_watchdog_timeout=10``,
            ``password=...``, ``tls=TLS(...)``...).

    Returns:
        A connected :class:`Client`.

    Raises:
        TypeError, ValueError: a bad option.
        TransportError: Redis could not be reached.
    """
    if url is None:
        url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
    return await Client.create(Config.from_url(url, **options))


class MasterSet:
    """Clients of several independent Redis masters, for locks across all of them.

    Made by :func:`connect_many`. ``get_red_lock(name)`` locks ``name`` on a majority of the
    masters; ``get_multi_lock(name)`` on all of them.
    """

    def __init__(self, clients: Sequence[Client]) -> None:
        if not clients:
            raise ValueError("a MasterSet needs at least one client")
        self._clients = tuple(clients)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self._clients)} masters>"

    @property
    def clients(self) -> tuple[Client, ...]:
        """One client per master, in the order of the URLs."""
        return self._clients

    def get_red_lock(self, name: str) -> RedLock:
        """A :class:`RedLock` of the lock ``name`` on every master (no Redis call is made).

        Raises:
            TypeError, ValueError: a bad name.
        """
        return RedLock(*(client.get_lock(name) for client in self._clients))

    def get_multi_lock(self, name: str) -> MultiLock:
        """A :class:`MultiLock` of the lock ``name`` on every master (all must be held).

        Raises:
            TypeError, ValueError: a bad name.
        """
        return MultiLock(*(client.get_lock(name) for client in self._clients))

    async def shutdown(self) -> None:
        """Shut every client down. Idempotent."""
        for client in self._clients:
            await client.shutdown()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()


async def connect_many(urls: Sequence[str], **options: Any) -> MasterSet:
    """Connect to several independent Redis masters (for RedLock and MultiLock).

    Each master gets its own client. The per-node ``timeout`` and ``connect_timeout`` default
    to 0.5 s here (not 3 s and 5 s): a dead master should cost little next to the wait time.
    A master that does not answer now is tolerated while a majority does (its client
    connects when it comes back).

    Args:
        urls: one URL per master (see :func:`connect`).
        **options: :class:`~syncprims.Config` attributes, applied to every client.

    Returns:
        A :class:`MasterSet`.

    Raises:
        ValueError: no URL.
        TransportError: fewer than a majority of the masters answered.
    """
    if isinstance(urls, str) or not urls:
        raise ValueError("urls must be a non-empty list of URLs")
    options.setdefault("timeout", 0.5)
    options.setdefault("connect_timeout", 0.5)
    clients: list[Client] = []
    failures: list[TransportError] = []
    for url in urls:
        config = Config.single_server(url, **options)
        try:
            clients.append(await Client.create(config))
        except TransportError as error:
            failures.append(error)
            log.warning("master %s does not answer (%s); going on without it for now", url, error)
            clients.append(await Client.create(config, check=False))
    if len(failures) > len(urls) - (len(urls) // 2 + 1):
        for client in clients:
            await client.shutdown()
        raise failures[0]
    return MasterSet(clients)
