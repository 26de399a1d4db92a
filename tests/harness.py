"""One test body for both faces.

A test is an ``async def`` that talks to syncprims through a :class:`Face`. An
:class:`Actor` is one owner: a dedicated thread for the sync face, a dedicated task for the
asyncio face. ``await actor(obj.method, *args)`` runs the call as that owner, so ownership,
reentrancy and contention behave as they would in a real program of that face.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import redis
import redis.client

import syncprims
import syncprims.asyncio
from syncprims import redis_from_url as plain_client
from syncprims._embedded import RedisServer

__all__ = [
    "CLIENT_OPTIONS",
    "LOOP",
    "Actor",
    "Face",
    "MakeLock",
    "cli_process",
    "end_process_group",
    "raw_command",
    "raw_pubsub",
    "raw_redis",
    "client_url",
    "redis_py_version",
    "sharded_pubsub",
    "within",
]

MakeLock = Callable[..., Any]
"""Makes a lock of the kind under test: ``make_lock(client, name, **getter_options)``."""


def raw_redis(url: str) -> Any:
    """A plain redis-py client for ``url`` (any form), to look at what syncprims left."""
    return plain_client(url)


CLIENT_OPTIONS = frozenset(
    option for option in os.environ.get("SYNCPRIMS_TEST_CLIENT", "").split(",") if option
)
"""The client variant the matrix cell asks for (``SYNCPRIMS_TEST_CLIENT``, comma-separated):
``valkey`` (valkey-py clients: ``valkey://`` URLs), ``resp3`` (``protocol=3``), ``decode``
(``decode_responses=True``). Empty: redis-py, RESP2, bytes, as before."""
_CLIENT_CHOICES = {"valkey", "resp3", "decode"}
if not CLIENT_OPTIONS <= _CLIENT_CHOICES:
    raise ValueError(
        f"SYNCPRIMS_TEST_CLIENT takes {sorted(_CLIENT_CHOICES)}, got {sorted(CLIENT_OPTIONS)}"
    )


LOOP = os.environ.get("SYNCPRIMS_TEST_LOOP", "asyncio")
"""The event loop the asyncio tests run on (``SYNCPRIMS_TEST_LOOP``): ``asyncio`` (the
standard library's) or ``uvloop`` (matrix cell ``redis6-uvloop``: uvloop's event loop
policy, so that every ``asyncio.run`` and new loop of the suite is uvloop's)."""
if LOOP == "uvloop":  # installed only in that cell: imported by name (no stub for mypy)
    asyncio.set_event_loop_policy(importlib.import_module("uvloop").EventLoopPolicy())
elif LOOP != "asyncio":
    raise ValueError(f"SYNCPRIMS_TEST_LOOP takes 'asyncio' or 'uvloop', got {LOOP!r}")


FAKE_URLS: set[str] = set()
"""The URLs of the session's fakeredis TCP servers (added by the ``fake_server`` fixture)."""

FAKE_TIMEOUT = 10.0
"""Seconds: a client's default timeout towards fakeredis in :meth:`Face.connect` (an
explicit ``timeout=`` wins). The fake server runs in a thread of the test's own process: on
a loaded machine (``SYNCPRIMS_TEST_LOAD=2``) it answered a connect after more than the
library's 3 s default. Real servers keep the library's default."""


def client_url(url: str) -> str:
    """``url`` as the matrix cell's client variant spells it (see :data:`CLIENT_OPTIONS`):
    the scheme of valkey-py, and ``protocol`` / ``decode_responses`` query parameters, which
    both libraries' ``from_url`` pass to every connection. Other URLs are left alone."""
    if not CLIENT_OPTIONS or not url.startswith(("redis://", "rediss://", "redis+", "rediss+")):
        return url
    if "valkey" in CLIENT_OPTIONS:
        url = "valkey" + url.removeprefix("redis")
    query = []
    if "resp3" in CLIENT_OPTIONS:
        query.append("protocol=3")
    if "decode" in CLIENT_OPTIONS:
        query.append("decode_responses=True")
    if query:
        url += ("&" if "?" in url else "?") + "&".join(query)
    return url


def redis_py_version() -> tuple[int, ...]:
    """The installed redis-py's version, ``(8, 2, 0)`` (tests of redis-py's own behaviour
    only)."""
    return tuple(int(part) for part in redis.__version__.split(".")[:3] if part.isdigit())


def raw_command(client: redis.Redis, *args: str | int) -> Any:
    """``client.execute_command(*args)``: redis-py leaves that method unannotated."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def debug_sleep(url: str, seconds: float) -> threading.Thread:
    """Start ``DEBUG SLEEP seconds`` on the server at ``url`` from a thread, and return once
    the server is asleep (a probe's ``PING`` goes unanswered for 50 ms), so that a command
    sent next waits for the sleep however late the thread was scheduled. Join the thread."""

    def sleep() -> None:
        with redis.Redis.from_url(url) as sleeper:
            raw_command(sleeper, "DEBUG", "SLEEP", str(seconds))

    thread = threading.Thread(target=sleep)
    thread.start()
    probe = redis.Redis.from_url(url, socket_timeout=0.05)
    deadline = time.monotonic() + 5
    try:
        while time.monotonic() < deadline:
            try:
                probe.ping()
            except redis.TimeoutError:
                return thread  # asleep: the PING's reply comes after the sleep, unread
            time.sleep(0.01)
        raise AssertionError(f"the server at {url} did not start DEBUG SLEEP within 5 s")
    finally:
        probe.close()


def lock_fields(servers: Sequence[RedisServer], name: str) -> list[int]:
    """How many fields the lock hash ``name`` has on each server (0 when free or dead)."""
    return [len(owners) for owners in lock_owners(servers, name)]


def lock_owners(servers: Sequence[RedisServer], name: str) -> list[set[str]]:
    """The fields (``uuid:threadId`` owners) of the lock hash ``name`` on each server (an
    empty set when free or dead): which owners hold where, not only how many."""
    out: list[set[str]] = []
    for server in servers:
        try:
            r = redis.Redis.from_url(server.url, socket_timeout=0.5, decode_responses=True)
            out.append({str(field) for field in r.hkeys(name)})
            r.close()
        except redis.exceptions.RedisError:
            out.append(set())
    return out


async def released_everywhere(
    servers: Sequence[RedisServer], name: str, seconds: float = 5.0
) -> list[int]:
    """Wait until no server holds the lock hash ``name``; return the last field counts.

    A MultiLock's or RedLock's unlock returns once a quorum released; the masters still out
    (one reconnecting after a restart, say) finish in the background within the operation
    timeout. So a test that checks every master polls, with a bound, instead of reading once.
    """
    deadline = time.monotonic() + seconds
    while any(fields := lock_fields(servers, name)) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return fields


def sharded_pubsub(client: Any) -> bool:
    """Whether syncprims publishes with ``SPUBLISH`` through ``client``: a cluster of Redis 7
    or newer (Valkey reports a Redis 7 version). A Redis 6.2 cluster has no sharded pub/sub,
    and syncprims uses ``PUBLISH`` there, as on a single server."""
    if not isinstance(client, redis.RedisCluster):
        return False
    node = client.get_default_node()  # type: ignore[no-untyped-call]
    info = client.get_redis_connection(node).info("server")
    return int(str(info["redis_version"]).split(".")[0]) >= 7


class RawSubscriber:
    """A redis-py subscriber that listens where syncprims publishes: classic pub/sub, or
    sharded pub/sub (SSUBSCRIBE) on a Redis 7 cluster, where the scripts SPUBLISH."""

    def __init__(self, client: Any) -> None:
        self._cluster = sharded_pubsub(client)
        self._pubsub: Any = client.pubsub()

    def subscribe(self, channel: str) -> None:
        """Subscribe to ``channel``."""
        if self._cluster:
            self._pubsub.ssubscribe(channel)
        else:
            self._pubsub.subscribe(channel)

    def get_message(
        self, ignore_subscribe_messages: bool = True, timeout: float = 0.0
    ) -> dict[str, Any] | None:
        """The next message, or ``None`` after ``timeout`` seconds."""
        if self._cluster:
            message = self._pubsub.get_sharded_message(
                ignore_subscribe_messages=ignore_subscribe_messages, timeout=timeout
            )
        else:
            message = self._pubsub.get_message(
                ignore_subscribe_messages=ignore_subscribe_messages, timeout=timeout
            )
        return dict(message) if message is not None else None

    def close(self) -> None:
        """Unsubscribe and close."""
        self._pubsub.close()


def raw_pubsub(client: Any) -> RawSubscriber:
    """A subscriber on ``client`` (see :class:`RawSubscriber`)."""
    return RawSubscriber(client)


class Actor:
    """An owner that runs calls one at a time (a thread or a task)."""

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        """Stop the thread or task."""


class _ThreadActor(Actor):
    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="actor")
        self._thread.start()
        self.ident = 0

    def _serve(self) -> None:
        self.ident = threading.get_ident()
        while True:
            item = self._calls.get()
            if item is None:
                return
            fn, args, kwargs, loop, future = item
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:
                loop.call_soon_threadsafe(_set_exception, future, error)
            else:
                loop.call_soon_threadsafe(_set_result, future, result)

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._calls.put((fn, args, kwargs, loop, future))
        return await future

    async def close(self) -> None:
        self._calls.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5)


class _TaskActor(Actor):
    def __init__(self) -> None:
        self._calls: asyncio.Queue[Any] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        while True:
            item = await self._calls.get()
            if item is None:
                return
            fn, args, kwargs, future = item
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):  # most methods are coroutines, a few are not
                    result = await result
            except BaseException as error:
                if not future.done():
                    future.set_exception(error)
                if isinstance(error, asyncio.CancelledError):
                    raise
            else:
                if not future.done():
                    future.set_result(result)

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._calls.put((fn, args, kwargs, future))
        return await future

    def cancel(self) -> None:
        """Cancel the task (and the call it is running)."""
        self._task.cancel()

    async def close(self) -> None:
        if not self._task.done():
            await self._calls.put(None)
            await asyncio.wait({self._task}, timeout=5)


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class Face:
    """The sync or the asyncio face, for one test."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_async = name == "async"
        self.module: Any = syncprims.asyncio if self.is_async else syncprims
        self._clients: list[Any] = []
        self._actors: list[Actor] = []

    def __repr__(self) -> str:
        return f"<Face {self.name}>"

    async def connect(self, url: str, **options: Any) -> Any:
        """A client of this face; shut down when the test ends."""
        client: Any
        if url in FAKE_URLS:  # in-process fakeredis answers late on a loaded machine
            options.setdefault("timeout", FAKE_TIMEOUT)
        url = client_url(url)
        if self.is_async:
            client = await syncprims.asyncio.connect(url, **options)
        else:
            client = await asyncio.get_running_loop().run_in_executor(
                None, lambda: syncprims.connect(url, **options)
            )
        self._clients.append(client)
        return client

    async def connect_many(self, urls: list[str], **options: Any) -> Any:
        """A MasterSet of this face; shut down when the test ends."""
        masters: Any
        urls = [client_url(url) for url in urls]
        if self.is_async:
            masters = await syncprims.asyncio.connect_many(urls, **options)
        else:
            masters = await asyncio.get_running_loop().run_in_executor(
                None, lambda: syncprims.connect_many(urls, **options)
            )
        self._clients.append(masters)
        return masters

    def actor(self) -> Actor:
        """A new owner: a thread (sync) or a task (asyncio)."""
        actor: Actor = _TaskActor() if self.is_async else _ThreadActor()
        self._actors.append(actor)
        return actor

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a call whose owner does not matter (queries) on a fresh owner."""
        if self.is_async:
            return await fn(*args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))

    async def close(self) -> None:
        """Stop the actors and shut the clients down."""
        for actor in self._actors:
            await actor.close()
        for client in self._clients:
            if self.is_async:
                await client.shutdown()
            else:
                await asyncio.get_running_loop().run_in_executor(None, client.shutdown)


async def within(seconds: float, awaitable: Awaitable[Any]) -> Any:
    """Await with a bound: a hang fails the test instead of stalling it."""
    return await asyncio.wait_for(awaitable, seconds)


def wait_replica_acks(r: Any, bound: float = 10.0) -> None:
    """Return once a replica of ``r``'s master acknowledges a write.

    A ``WAIT`` with nothing written yet answers at once for a replica that has just
    connected at offset 0, before it acknowledges anything within a short timeout: a
    following acquire's ``WAIT`` then timed out (0 of 1 replicas). So write first.

    Raises:
        TimeoutError: no replica acknowledged within ``bound`` seconds.
    """
    deadline = time.monotonic() + bound
    while True:
        r.set("probe", 1)
        if r.execute_command("WAIT", 1, 100) == 1:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no replica acknowledged a write within {bound} s")


_CLI_WITH_CTRL_C = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from syncprims.cli import main; sys.exit(main())"
)


def cli_process(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``syncprims ARGS`` in a session of its own (its process group: ``os.killpg`` reaches
    it and its worker processes), stdout and stderr piped, ``REDIS_URL`` unset unless
    ``env`` sets it. The child sets SIGINT's disposition itself (Python's Ctrl-C handler):
    it would inherit an ignored SIGINT from a runner started as a script's background job.
    End it with :func:`end_process_group` in a ``finally``."""
    base = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.Popen(
        [sys.executable, "-c", _CLI_WITH_CTRL_C, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**base, **(env or {})},
        start_new_session=True,
    )


def end_process_group(process: subprocess.Popen[str], others: Iterable[int] = ()) -> None:
    """SIGKILL ``process``'s group (whatever is still in it) and the processes ``others``
    (e.g. its servers, in sessions of their own), reap ``process`` and close its pipes."""
    targets = [(os.killpg, process.pid), *((os.kill, pid) for pid in others)]
    for kill, pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()
