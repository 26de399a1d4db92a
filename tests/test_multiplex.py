"""The asyncio face's shared connections (``syncprims/_transport/aio/mux.py``): thousands of tasks
on a few connections, the application's pool left alone, and the exactly-once rules when a
caller goes away or the connection breaks."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio

import syncprims
import syncprims.asyncio
from syncprims._embedded import RedisServer

pytestmark = pytest.mark.real


def _named(server: RedisServer, client_name: str) -> list[dict[str, Any]]:
    """The connections of ``server`` whose client name is ``client_name``."""
    admin = redis.Redis(port=server.port)
    try:
        clients: list[dict[str, Any]] = admin.client_list()
        return [c for c in clients if c.get("name") == client_name]
    finally:
        admin.close()


async def _left_held(server: RedisServer, prefix: str) -> int:
    admin = redis.asyncio.Redis(port=server.port)
    try:
        return len([k async for k in admin.scan_iter(match=f"{prefix}*", count=1000)])
    finally:
        await admin.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("tasks", [2000])
async def test_thousands_of_tasks_share_a_few_connections(
    redis_server: RedisServer, tasks: int
) -> None:
    client_name = f"mux-{uuid.uuid4().hex[:8]}"
    app = redis.asyncio.Redis(port=redis_server.port, client_name=client_name)
    prefix = f"mux:{uuid.uuid4().hex[:8]}:"
    errors: list[BaseException] = []
    peak = 0
    async with await syncprims.asyncio.connect(app) as client:

        async def worker(i: int) -> None:
            lock = client.get_lock(f"{prefix}{i}")
            for _ in range(3):
                try:
                    await lock.lock()
                    await asyncio.sleep(0.001)
                    await lock.unlock()
                except Exception as error:  # counted, not raised: every task must finish
                    errors.append(error)

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, len(_named(redis_server, client_name)))
                await asyncio.sleep(0.2)

        watcher = asyncio.create_task(watch())
        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(tasks))), 120)
        watcher.cancel()
    await app.aclose()
    assert errors == []
    assert await _left_held(redis_server, prefix) == 0
    assert 1 <= peak <= 4  # the shared connection (plus one for pub/sub), not one per task


async def test_the_applications_own_client_inside_the_lock(redis_server: RedisServer) -> None:
    app = redis.asyncio.Redis(port=redis_server.port)  # defaults, passed in and used inside
    counter = f"mux:{uuid.uuid4().hex}"
    await app.set(counter, 0)
    failures: list[BaseException] = []
    async with await syncprims.asyncio.connect(app) as client:
        lock = client.get_lock(counter + ":lock")

        async def add() -> None:
            try:
                async with lock:
                    value = int(await app.get(counter) or 0)
                    await app.set(counter, value + 1)
            except Exception as error:
                failures.append(error)

        await asyncio.wait_for(asyncio.gather(*(add() for _ in range(400))), 120)
    assert failures == []
    assert int(await app.get(counter) or 0) == 400
    await app.delete(counter)
    await app.aclose()


async def test_cancelled_callers_leave_the_connection_in_step(redis_server: RedisServer) -> None:
    app = redis.asyncio.Redis(port=redis_server.port)
    name = f"mux:{uuid.uuid4().hex}"
    async with await syncprims.asyncio.connect(app) as client:
        # Many calls in flight on the one connection; half of them are cancelled at once,
        # some before their command is written, some while their reply is on the way.
        locks = [client.get_lock(f"{name}:{i}") for i in range(200)]
        calls = [asyncio.create_task(lock.try_lock(lease_time=30)) for lock in locks]
        await asyncio.sleep(0)
        for call in calls[::2]:
            call.cancel()
        results = await asyncio.gather(*calls, return_exceptions=True)
        kept = [lock for lock, result in zip(locks, results, strict=True) if result is True]
        assert kept  # the calls not cancelled took their locks (each task its own owner)
        for lock in kept:
            assert await lock.force_unlock()
        # Every reply went to its own caller: each name answers for itself.
        for i in range(20):
            lock = client.get_lock(f"{name}:other:{i}")
            assert await lock.try_lock(lease_time=30)
            assert await lock.get_hold_count() == 1
            assert await lock.is_held_by_current_thread()
            await lock.unlock()
        await asyncio.sleep(0.5)  # abandoned acquisitions are released in the background
    assert await _left_held(redis_server, name) == 0
    await app.aclose()


async def test_a_broken_connection_fails_its_calls_and_the_next_ones_reconnect(
    redis_server: RedisServer,
) -> None:
    client_name = f"mux-{uuid.uuid4().hex[:8]}"
    app = redis.asyncio.Redis(port=redis_server.port, client_name=client_name)
    name = f"mux:{uuid.uuid4().hex}"
    async with await syncprims.asyncio.connect(app) as client:
        lock = client.get_lock(name)
        assert await lock.try_lock(lease_time=30)
        await lock.unlock()
        admin = redis.Redis(port=redis_server.port)
        for connection in _named(redis_server, client_name):
            admin.client_kill_filter(_id=connection["id"])
        admin.close()
        await asyncio.sleep(0.2)
        # The next calls open a new shared connection.
        for _ in range(3):
            assert await lock.try_lock(lease_time=30)
            await lock.unlock()
    await app.aclose()


async def test_a_silent_server_times_calls_out_and_they_recover() -> None:
    with RedisServer() as server:
        app = redis.asyncio.Redis(port=server.port)
        name = f"mux:{uuid.uuid4().hex}"
        client = await syncprims.asyncio.connect(app, timeout=0.5, retry_attempts=0)
        lock = client.get_lock(name)
        assert await lock.try_lock(lease_time=30)
        await lock.unlock()
        server.pause()
        started = time.monotonic()
        try:
            outcomes = await asyncio.gather(
                *(client.get_lock(f"{name}:{i}").try_lock(lease_time=30) for i in range(20)),
                return_exceptions=True,
            )
            # The connection keeps the calls' deadlines (checked every quarter timeout).
            assert time.monotonic() - started < 0.5 + 0.125 + 0.5
        finally:
            server.resume()
        assert all(isinstance(o, syncprims.RedisTimeoutError) for o in outcomes), outcomes
        assert all(o.maybe_executed for o in outcomes if isinstance(o, syncprims.TransportError))
        assert await lock.try_lock(lease_time=30)  # a new connection
        await lock.unlock()
        # The late replies of the timed-out acquisitions (they ran once the server woke) were
        # read on the retired connection and each acquisition undone.
        deadline = time.monotonic() + 5
        while await _left_held(server, name) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert await _left_held(server, name) == 0
        await client.shutdown()
        await app.aclose()


async def test_zero_shared_connections_takes_pooled_ones(redis_server: RedisServer) -> None:
    app = redis.asyncio.Redis(port=redis_server.port)
    async with await syncprims.asyncio.connect(app, shared_connections=0) as client:
        lock = client.get_lock(f"mux:{uuid.uuid4().hex}")
        assert await lock.try_lock(lease_time=30)
        await lock.unlock()
        transport: Any = client._ex.transport
        assert transport._mux is None
    await app.aclose()


def test_the_option_is_checked() -> None:
    with pytest.raises(ValueError, match="shared_connections"):
        syncprims.Config(shared_connections=-1)


async def test_callers_cancelled_at_any_point_leave_nothing_held(redis_server: RedisServer) -> None:
    # The reply of a cancelled acquire can reach the reader before the cancelled caller runs
    # again; it must still be handed to the call's on_orphan (the permit given back), at
    # whatever point the caller was cancelled (before the write, in flight, as it came).
    app = redis.asyncio.Redis(port=redis_server.port)
    rng = random.Random(7)
    kept: list[str] = []
    async with await syncprims.asyncio.connect(app) as client:
        for i in range(120):
            sem = client.get_permit_expirable_semaphore(f"mux:{uuid.uuid4().hex}:{i}")
            assert await sem.try_set_permits(2)
            call = asyncio.create_task(sem.try_acquire(lease_time=30))
            if i % 2:  # before the write, or just after it
                for _ in range(rng.randint(0, 4)):
                    await asyncio.sleep(0)
            else:  # while the reply is on its way, or as it comes
                await asyncio.sleep(rng.uniform(0, 0.0006))
            call.cancel()
            try:
                permit = await call
            except asyncio.CancelledError:
                permit = None
            if permit is not None:
                await sem.release(permit)
            for _ in range(50):  # an abandoned permit is given back in the background
                if await sem.available_permits() == 2:
                    break
                await asyncio.sleep(0.01)
            else:
                kept.append(sem.name)
    assert kept == []
    await app.aclose()


@pytest.mark.parametrize("protocol", [2, 3])
async def test_replies_read_straight_off_the_hiredis_reader(
    redis_server: RedisServer, protocol: int
) -> None:
    """The shared connection's reader takes replies from redis-py's hiredis reader and the
    connection's stream itself (no read_response layers per reply) when it can: the same
    replies as read_response, error replies as exception values, several in one read; a
    connection that reads its own way (fakeredis) keeps read_response."""
    pytest.importorskip("hiredis")
    from redis.exceptions import NoScriptError, ResponseError

    from syncprims._protocol.wire import pack
    from syncprims._transport.aio.replies import direct_replies
    from syncprims._transport.compat import write_now

    app = redis.asyncio.Redis(port=redis_server.port, protocol=protocol)
    pool: Any = app.connection_pool  # make_connection is untyped in redis-py
    conn = pool.make_connection()
    await conn.connect()
    try:
        direct = direct_replies(conn)
        if direct is None:
            pytest.skip("this redis-py or hiredis has no reader this code knows")
        key = f"direct:{uuid.uuid4().hex}"
        commands: list[tuple[Any, ...]] = [
            ("SET", key, "v"),
            ("GET", key),
            ("GET", f"{key}:none"),
            ("INCR", f"{key}:n"),
            ("LPUSH", f"{key}:l", "a", "b"),
            ("LRANGE", f"{key}:l", 0, -1),
            ("INCR", key),  # an error reply: not an integer
            ("EVALSHA", "0" * 40, 0),  # NOSCRIPT
        ]
        write_now(conn, [chunk for command in commands for chunk in pack(command)])
        replies = [await direct.next() for _ in commands]
        assert replies[:6] == [b"OK", b"v", None, 1, 2, [b"b", b"a"]]
        assert isinstance(replies[6], ResponseError) and "integer" in str(replies[6])
        assert isinstance(replies[7], NoScriptError)
        write_now(conn, pack(("PING",)))  # the stream is still in step
        assert await direct.next() in (b"PONG", "PONG")
    finally:
        await conn.disconnect()
        await app.aclose()
    fakeredis = pytest.importorskip("fakeredis")
    fake = fakeredis.FakeAsyncRedis()
    fake_conn = fake.connection_pool.make_connection()
    await fake_conn.connect()
    try:
        assert direct_replies(fake_conn) is None
    finally:
        await fake_conn.disconnect()
        await fake.aclose()


async def test_a_socket_timeout_is_not_read_as_a_nil_reply(redis_server: RedisServer) -> None:
    """A socket that failed with ETIMEDOUT (keepalive or TCP_USER_TIMEOUT gave up) makes the
    asyncio reads raise, not return ``None``: redis-py's ``read_response(timeout=math.inf)``
    takes the builtin ``TimeoutError`` (Python 3.11+: ``asyncio.TimeoutError``) for its own
    timer and returns ``None``, which is the acquire script's "acquired" reply (redis-py 8.2
    and later raise their own ``ConnectionError`` for it; syncprims' reads raise either way)."""
    import errno

    from syncprims._transport.aio.replies import direct_replies
    from syncprims._transport.compat import aread
    from syncprims._transport.errors import translate
    from syncprims.errors import RedisConnectionError

    app = redis.asyncio.Redis(port=redis_server.port)
    pool: Any = app.connection_pool  # make_connection is untyped in redis-py
    try:
        for direct in (False, True):
            conn = pool.make_connection()
            await conn.connect()
            try:
                await conn.send_command("PING")
                assert await aread(conn) in (b"PONG", "PONG")  # a healthy read
                timed_out = TimeoutError(errno.ETIMEDOUT, "Connection timed out")
                conn._reader.set_exception(timed_out)  # what the transport does on ETIMEDOUT
                replies = direct_replies(conn) if direct else None
                if direct and replies is None:
                    continue  # no hiredis reader this code knows: the aread case covers it
                # The builtin (an OSError) from syncprims' reads, redis-py's from its own (8.2+).
                with pytest.raises((ConnectionError, redis.exceptions.ConnectionError)) as caught:
                    await (replies.next() if replies is not None else aread(conn))
                translated = translate(
                    caught.value, context="acquiring lock 'x'", address="here", timeout=3.0,
                    sent=True,
                )  # fmt: skip
                assert isinstance(translated, RedisConnectionError)
                assert translated.maybe_executed
            finally:
                await conn.disconnect()
    finally:
        await app.aclose()


@pytest.mark.parametrize("protocol", [2, 3])
async def test_replies_are_parsed_in_the_event_loops_callback(
    redis_server: RedisServer, protocol: int
) -> None:
    """With redis-py's hiredis parser the shared connection has no reader task: its replies
    are parsed by the protocol callback as the bytes arrive (one loop turn less per round
    trip). The library's own protocol still sees the end of the connection, so a killed
    connection fails over to a new one and closing does not wait forever."""
    pytest.importorskip("hiredis")
    from syncprims._transport.aio.replies import direct_replies

    client_name = f"cb-{uuid.uuid4().hex[:8]}"
    app = redis.asyncio.Redis(port=redis_server.port, protocol=protocol, client_name=client_name)
    name = f"cb:{uuid.uuid4().hex}"
    client = await syncprims.asyncio.connect(app)
    try:
        lock = client.get_lock(name)
        assert await lock.try_lock(lease_time=30)
        transport: Any = client._ex.transport
        shared = transport._mux[0]
        wire = shared._wire
        if direct_replies(wire.conn) is None:
            pytest.skip("this redis-py or hiredis has no reader this code knows")
        assert wire.reader is None, "a reader task reads the shared connection"
        stream = wire.conn._reader
        locked = await asyncio.gather(*(lock.is_locked() for _ in range(50)))
        assert locked == [True] * 50  # many replies per read, each to its caller
        await lock.unlock()
        admin = redis.Redis(port=redis_server.port)
        for connection in _named(redis_server, client_name):
            admin.client_kill_filter(_id=connection["id"])
        admin.close()
        deadline = time.monotonic() + 5
        while shared._wire is wire and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert shared._wire is not wire, "the killed connection was not noticed"
        assert stream.at_eof() or stream.exception() is not None  # its own protocol saw it
        for _ in range(3):  # the next calls open a new shared connection
            assert await lock.try_lock(lease_time=30)
            await lock.unlock()
    finally:
        await asyncio.wait_for(client.shutdown(), 10)
        await app.aclose()
