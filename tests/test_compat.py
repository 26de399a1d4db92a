"""The version-neutral connection interface (``syncprims/_transport/compat.py``): each
fallback path, taken on purpose with the installed redis-py against a real server, so that
every path runs in every CI cell whatever redis-py line the cell has; and the client
libraries ``connect()`` accepts (valkey-py objects and URLs, a client-side cache).

The fallbacks, and the versions that need them:

* ``get_connection`` with a command name: redis-py < 5.3 and valkey-py 6 (``take``/``atake``);
* the socket timeout set around a read: redis-py < 8 and valkey-py (``read``);
* ``can_read_destructive``: redis-py < 8 and valkey-py, asyncio (``astale``);
* pub/sub replies pre-read decoded by ``can_read``: redis-py < 8 with hiredis and
  ``decode_responses=True`` (``read_message``);
* ``update_moved_exception`` / ``_moved_exception``: redis-py < 7.4 and valkey-py
  (``move_slot`` / ``amove_slot``).
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.connection

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer
from syncprims._transport import compat
from syncprims._transport.compat import (
    ERRORS,
    agive,
    amove_slot,
    aread,
    astale,
    atake,
    move_slot,
    read,
    read_message,
    take,
)
from tests.harness import LOOP, client_url

pytestmark = pytest.mark.real


# -- take: get_connection() with a command name -----------------------------------------------


class _OldPool(redis.ConnectionPool):
    """A pool whose ``get_connection`` needs a command name, as before redis-py 5.3."""

    names: list[str]

    def get_connection(self, command_name: str, *keys: Any, **options: Any) -> Any:  # type: ignore[override]
        self.names.append(command_name)
        parent = super().get_connection
        return parent(command_name) if compat._needs_command_name(parent) else parent()


def test_take_passes_a_command_name_only_where_required(redis_server: RedisServer) -> None:
    old = _OldPool(port=redis_server.port)
    old.names = []
    conn = take(old)
    assert old.names == ["EVALSHA"]
    old.release(conn)
    new = redis.ConnectionPool(port=redis_server.port)
    conn = take(new)  # no argument: redis-py >= 5.3 warns about one (an error under pytest)
    new.release(conn)
    old.disconnect()
    new.disconnect()


class _OldAsyncPool(redis.asyncio.ConnectionPool):
    names: list[str]

    async def get_connection(self, command_name: str, *keys: Any, **options: Any) -> Any:  # type: ignore[override]
        self.names.append(command_name)
        parent: Any = super().get_connection
        if compat._needs_command_name(parent):
            return await parent(command_name)
        return await parent()


async def test_atake_passes_a_command_name_only_where_required(redis_server: RedisServer) -> None:
    old = _OldAsyncPool(port=redis_server.port)
    old.names = []
    conn = await atake(old)
    assert old.names == ["EVALSHA"]
    await old.release(conn)
    await old.aclose()


# -- read: a deadline without read_response(timeout=) ----------------------------------------


class _NoTimeoutConnection(redis.connection.Connection):
    """``read_response`` without ``timeout``, as before redis-py 8."""

    def read_response(  # type: ignore[override]
        self,
        disable_decoding: bool = False,
        *,
        disconnect_on_error: bool = True,
        push_request: bool = False,
    ) -> Any:
        return super().read_response(
            disable_decoding=disable_decoding,
            disconnect_on_error=disconnect_on_error,
            push_request=push_request,
        )


@pytest.mark.parametrize("socket_timeout", [None, 5.0])
def test_read_sets_the_socket_timeout_around_the_read(
    redis_server: RedisServer, socket_timeout: float | None
) -> None:
    pool = redis.ConnectionPool(
        port=redis_server.port,
        connection_class=_NoTimeoutConnection,
        socket_timeout=socket_timeout,
    )
    conn = take(pool)
    try:
        conn.send_command("PING")
        assert read(conn, 0.5) == b"PONG"
        assert conn._sock.gettimeout() == socket_timeout  # restored
        key = f"compat:{uuid.uuid4().hex}"
        conn.send_command("BLPOP", key, 2)  # blocks in Redis for 2 s
        started = time.monotonic()
        with pytest.raises(ERRORS.timeout):
            read(conn, 0.3)
        assert time.monotonic() - started < 1.5  # the deadline, not BLPOP's 2 s
        assert conn._sock is None  # disconnected: the reply could come later
        conn.send_command("PING")  # reconnects
        assert read(conn, 0.5) == b"PONG"
        sock: Any = conn._sock
        assert sock.gettimeout() == socket_timeout
    finally:
        pool.release(conn)
        pool.disconnect()


def test_read_with_the_libraries_own_timeout(redis_server: RedisServer) -> None:
    pool = redis.ConnectionPool(port=redis_server.port)
    conn = take(pool)
    try:
        conn.send_command("BLPOP", f"compat:{uuid.uuid4().hex}", 2)
        with pytest.raises(ERRORS.timeout):
            read(conn, 0.2)
    finally:
        pool.release(conn)
        pool.disconnect()


# -- astale: can_read_destructive -------------------------------------------------------------


class _OldAsyncConnection(redis.asyncio.Connection):
    """An asyncio connection with ``can_read_destructive`` only, as before redis-py 8."""

    can_read = None  # type: ignore[assignment]  # not there before redis-py 8

    async def can_read_destructive(self) -> bool:
        parser: Any = self._parser  # redis-py 8's parser has can_read, older ones not
        check = getattr(parser, "can_read", None) or parser.can_read_destructive
        return bool(await check())


async def test_astale_falls_back_to_can_read_destructive(redis_server: RedisServer) -> None:
    # The stale connection that matters: one the server closed (a restart, CLIENT KILL).
    # (A reply nobody read is seen by the hiredis parser's can_read_destructive, not by the
    # pure-Python parsers' before redis-py 8, which look for the end of the stream only; the
    # transports never leave a reply unread on a connection they keep.)
    conn = _OldAsyncConnection(port=redis_server.port)
    assert not compat._has_can_read(conn)
    await conn.connect()  # type: ignore[no-untyped-call]
    admin = redis.Redis(port=redis_server.port)
    try:
        await conn.send_command("CLIENT", "ID")
        client_id = int(await conn.read_response())
        assert not await astale(conn)  # idle and open
        admin.execute_command("CLIENT", "KILL", "ID", client_id)  # type: ignore[no-untyped-call]
        await asyncio.sleep(0.2)
        assert await astale(conn)  # closed by the server
    finally:
        await conn.disconnect()
        admin.close()
    assert await astale(conn)  # closed here
    fresh = redis.asyncio.Connection(port=redis_server.port)
    await fresh.connect()  # type: ignore[no-untyped-call]
    assert not await astale(fresh)
    await fresh.disconnect()


# -- read_message: a reply pre-read decoded ---------------------------------------------------


class _Push(list[Any]):
    """A RESP3 push message as hiredis gives it (``PushNotification``, a list subclass)."""


class _PreDecoded:
    """A connection whose next reply was decoded by ``can_read`` (redis-py < 8, hiredis)."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def read_response(self, **kwargs: Any) -> Any:
        return self.reply


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            ["message", "redisson_lock__channel:{x}", "0"],
            [b"message", b"redisson_lock__channel:{x}", b"0"],
        ),
        (["subscribe", "ch", 1], [b"subscribe", b"ch", 1]),
        ([b"message", b"ch", b"1"], [b"message", b"ch", b"1"]),
        (b"PONG", b"PONG"),
        (_Push(["smessage", "ch", "0"]), [b"smessage", b"ch", b"0"]),  # RESP3 (hiredis)
    ],
)
def test_read_message_gives_bytes(reply: Any, expected: Any) -> None:
    assert read_message(_PreDecoded(reply)) == expected


def test_a_decoding_client_is_woken_by_messages(redis_server: RedisServer) -> None:
    r = redis.Redis(port=redis_server.port, decode_responses=True, socket_connect_timeout=2)
    client = syncprims.connect(r)
    try:
        lock = client.get_lock(f"compat:{uuid.uuid4().hex}")
        lock.lock(lease_time=30)
        waited: list[float] = []

        def waiter() -> None:
            started = time.monotonic()
            assert lock.try_lock(wait_time=20)
            waited.append(time.monotonic() - started)
            lock.unlock()

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.3)
        lock.unlock()
        thread.join(25)
        assert waited and waited[0] < 3  # the release message, not a re-check
    finally:
        client.shutdown()
        r.close()


# -- aread: a parser that decodes whatever it is asked ----------------------------------------


async def test_aread_gives_bytes_where_the_parser_decodes_anyway(
    redis_server: RedisServer,
) -> None:
    """redis-py 5.0's asyncio hiredis parser ignores ``disable_decoding``: a
    ``decode_responses=True`` connection's replies come as text (``connect()`` failed on the
    first one), and :func:`aread` encodes them back. Here the parser is made to decode; cell
    ``redis5.0-hiredis`` takes the path for real."""
    client = redis.asyncio.Redis(port=redis_server.port, decode_responses=True)
    key = f"compat:{uuid.uuid4().hex}"
    await client.rpush(key, "a", "é")
    conn = await atake(client.connection_pool)
    try:
        real = conn._parser.read_response

        async def decoding(disable_decoding: bool = False, **options: Any) -> Any:
            return await real(disable_decoding=False, **options)

        conn._parser.read_response = decoding
        await conn.send_command("LRANGE", key, 0, -1)
        assert await aread(conn) == [b"a", "é".encode()]
        await conn.send_command("ECHO", "x")
        assert await aread(conn) == b"x"
    finally:
        await agive(client.connection_pool, conn)
        await client.delete(key)
        await client.aclose()


# -- move_slot: before NodesManager.move_slot --------------------------------------------------


class _OldNodesManager:
    def __init__(self) -> None:
        self.moved: list[Exception] = []
        self._moved_exception: Exception | None = None

    def update_moved_exception(self, error: Exception) -> None:
        self.moved.append(error)


class _NewNodesManager:
    def __init__(self) -> None:
        self.moved: list[Exception] = []

    def move_slot(self, error: Exception) -> None:
        self.moved.append(error)


class _NewAsyncNodesManager:
    def __init__(self) -> None:
        self.moved: list[Exception] = []

    async def move_slot(self, error: Exception) -> None:
        self.moved.append(error)


async def test_move_slot_on_every_nodes_manager() -> None:
    error = redis.exceptions.MovedError("3999 127.0.0.1:6381")
    old, new = _OldNodesManager(), _NewNodesManager()
    move_slot(old, error)
    move_slot(new, error)
    assert old.moved == [error] and new.moved == [error]
    old_async, new_async, plain = _OldNodesManager(), _NewAsyncNodesManager(), _NewNodesManager()
    await amove_slot(old_async, error)
    await amove_slot(new_async, error)
    await amove_slot(plain, error)  # redis-py 7.4's asyncio move_slot is not a coroutine
    assert old_async._moved_exception is error
    assert new_async.moved == [error] and plain.moved == [error]


# -- valkey-py ---------------------------------------------------------------------------------


def test_valkey_objects_and_urls_sync(redis_server: RedisServer) -> None:
    valkey = pytest.importorskip("valkey", reason="valkey-py is not installed")
    name = f"compat:{uuid.uuid4().hex}"
    pool = valkey.ConnectionPool(port=redis_server.port)
    sources: list[Any] = [
        valkey.Valkey(port=redis_server.port),
        pool,
        valkey.BlockingConnectionPool(port=redis_server.port, max_connections=4),
        f"valkey://127.0.0.1:{redis_server.port}?decode_responses=True",
    ]
    for source in sources:
        with syncprims.connect(source) as client:
            lock = client.get_lock(name)
            assert lock.try_lock(lease_time=5)
            assert lock.is_held_by_current_thread()
            lock.unlock()
            sem = client.get_semaphore(name + ":s")
            assert sem.try_set_permits(1)
            assert sem.try_acquire() and not sem.try_acquire()
            sem.release()
            client.get_semaphore(name + ":s").delete()
    assert redis.Redis(port=redis_server.port).exists(name) == 0
    pool.disconnect()


async def test_valkey_objects_and_urls_async(redis_server: RedisServer) -> None:
    valkey = pytest.importorskip("valkey", reason="valkey-py is not installed")
    import valkey.asyncio as avalkey

    name = f"compat:{uuid.uuid4().hex}"
    mine = avalkey.Valkey(port=redis_server.port, protocol=3)
    pool = avalkey.ConnectionPool(port=redis_server.port)
    sources: list[Any] = [
        mine,
        pool,
        f"valkey://127.0.0.1:{redis_server.port}",
    ]
    for source in sources:
        async with await syncprims.asyncio.connect(source) as client:
            lock = client.get_lock(name)
            assert await lock.try_lock(lease_time=5)
            holder = asyncio.create_task(lock.try_lock(wait_time=5, lease_time=5))
            await asyncio.sleep(0.2)
            await lock.unlock()
            assert await asyncio.wait_for(holder, 5)  # woken by the release
            await client.get_lock(name).force_unlock()
    assert await mine.ping()  # the caller's client stays open
    await mine.aclose()
    await pool.disconnect()
    with pytest.raises(TypeError, match="asyncio client object"):
        syncprims.connect(avalkey.Valkey(port=redis_server.port))  # type: ignore[arg-type]
    assert valkey.__name__ == "valkey"


def test_valkey_errors_map_to_ours() -> None:
    valkey = pytest.importorskip("valkey", reason="valkey-py is not installed")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    client = valkey.Valkey(port=port, socket_connect_timeout=1)
    with pytest.raises(syncprims.RedisConnectionError) as info:
        syncprims.connect(client)
    assert isinstance(info.value.__cause__, valkey.exceptions.ConnectionError)


def test_valkey_url_without_valkey_py_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("valkey", "valkey.exceptions", "valkey.sentinel", "valkey.asyncio"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(ImportError, match=r"syncprims\[valkey\]"):
        syncprims.connect("valkey://127.0.0.1:1")


# -- client-side caching -----------------------------------------------------------------------


def test_a_caching_client_is_served_by_a_cache_free_twin(redis_server: RedisServer) -> None:
    cache = pytest.importorskip("redis.cache", reason="this redis-py has no client-side caching")
    # redis-py refuses cache_config against Redis < 7.4 when a connection opens; syncprims'
    # connections come from its cache-free twin, so they open (and never track keys).
    r = redis.Redis(port=redis_server.port, protocol=3, cache_config=cache.CacheConfig())
    client = syncprims.connect(r)
    try:
        source = client._ex.source
        assert source.twin is not None and source.pool is not r.connection_pool
        assert source.twin.cache is None if hasattr(source.twin, "cache") else True
        lock = client.get_lock(f"compat:{uuid.uuid4().hex}")
        assert lock.try_lock(lease_time=5)
        assert lock.is_locked()  # an HEXISTS read: never a cached reply
        lock.unlock()
        assert not lock.is_locked()
    finally:
        client.shutdown()
    assert r.connection_pool.cache is not None  # the caller's client is untouched


# -- the event loop ---------------------------------------------------------------------------


async def test_asyncio_tests_run_on_the_loop_asked_for(redis_server: RedisServer) -> None:
    """``SYNCPRIMS_TEST_LOOP=uvloop`` (a matrix cell) runs every asyncio test on uvloop's
    event loop (tests/harness.py); a lock works there as on asyncio's own."""
    module = type(asyncio.get_running_loop()).__module__.partition(".")[0]
    assert module == ("uvloop" if LOOP == "uvloop" else "asyncio")
    async with await syncprims.asyncio.connect(client_url(redis_server.url)) as client:
        lock = client.get_lock(f"loop:{uuid.uuid4().hex}")
        assert await lock.try_lock(wait_time=1)
        await lock.unlock()
